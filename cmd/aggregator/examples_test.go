package main

import (
	"os"
	"slices"
	"testing"

	"github.com/gttsplit/gttsplit/cmd/internal/clitest"
)

// TestExamplesAreScripted: every example of `aggregator --help` and every
// aggregator command in the code blocks of the README and docs/ runs in
// testdata/script/examples.txtar, as written but for
// clitest.ExampleSubstitutions (docs/deploy.md and docs/regressions.md
// aside, see clitest.DocCommands). The quickstart through
// `go run` is run by TestREADMEQuickstartIntegration.
func TestExamplesAreScripted(t *testing.T) {
	t.Parallel()
	root := newRoot(os.Stdout, os.Stderr)
	ex := slices.DeleteFunc(append(clitest.HelpExamples(root), clitest.DocCommands(t, "aggregator")...),
		func(s string) bool { return s == "go run ./cmd/aggregator quickstart" })
	if len(ex) < 10 {
		t.Fatalf("only %d examples found: %q", len(ex), ex)
	}
	clitest.RequireScripted(t, "testdata/script/examples.txtar", ex)
}

// TestHelpIsShort: every command's --help text fits at the prompt and
// the docs it names exist.
func TestHelpIsShort(t *testing.T) {
	t.Parallel()
	clitest.RequireShortHelp(t, newRoot(os.Stdout, os.Stderr))
}
