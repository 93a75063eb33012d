package clitest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// MaxHelpLines is the most lines a command's Long text may take: what a
// user needs at the prompt, so that with cobra's usage lines and the
// command's flags a --help stays near one screen. The details are in
// docs/, which the text names.
const MaxHelpLines = 10

var docRef = regexp.MustCompile(`docs/[a-z0-9_-]+\.md`)

// RequireShortHelp checks the Long text of root and of each of its
// subcommands: at most MaxHelpLines lines, and every docs/*.md it names
// exists in the repository.
func RequireShortHelp(t *testing.T, root *cobra.Command) {
	t.Helper()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if n := strings.Count(strings.TrimRight(c.Long, "\n"), "\n") + 1; n > MaxHelpLines {
			t.Errorf("%s --help: the text takes %d lines, more than %d: move the details to docs/ and name the doc", c.CommandPath(), n, MaxHelpLines)
		}
		for _, doc := range docRef.FindAllString(c.Long, -1) {
			if _, err := os.Stat(filepath.Join(RepoRoot, doc)); err != nil {
				t.Errorf("%s --help names %s, which does not exist", c.CommandPath(), doc)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
