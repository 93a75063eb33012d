package main

import (
	"os"
	"testing"

	"github.com/gttsplit/gttsplit/cmd/internal/clitest"
)

// TestExamplesAreScripted: every example of `collector --help` and every
// collector command in the code blocks of the README and docs/ runs in
// testdata/script/examples.txtar, as written but for
// clitest.ExampleSubstitutions (docs/deploy.md and docs/regressions.md
// aside, see clitest.DocCommands).
func TestExamplesAreScripted(t *testing.T) {
	t.Parallel()
	root := newRoot(nil, os.Stdout, os.Stderr, nil)
	ex := append(clitest.HelpExamples(root), clitest.DocCommands(t, "collector")...)
	if len(ex) < 8 {
		t.Fatalf("only %d examples found: %q", len(ex), ex)
	}
	clitest.RequireScripted(t, "testdata/script/examples.txtar", ex)
}

// TestHelpIsShort: every command's --help text fits at the prompt and
// the docs it names exist.
func TestHelpIsShort(t *testing.T) {
	t.Parallel()
	clitest.RequireShortHelp(t, newRoot(nil, os.Stdout, os.Stderr, nil))
}
