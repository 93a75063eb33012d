package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/cmd/internal/clitest"
)

// TestBisectScriptInDocs: docs/regressions.md shows scripts/gtt-bisect as
// it is (the script bisect.txtar runs), and the page's bisect runs it.
func TestBisectScriptInDocs(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(clitest.RepoRoot, "docs", "regressions.md"))
	require.NoError(t, err)
	script, err := os.ReadFile(filepath.Join(clitest.RepoRoot, "scripts", "gtt-bisect"))
	require.NoError(t, err)
	require.Contains(t, string(doc), "```sh\n"+string(script)+"```\n", "docs/regressions.md shows scripts/gtt-bisect whole")
	require.Contains(t, string(doc), "git bisect run /path/to/gttsplit/scripts/gtt-bisect")
	fi, err := os.Stat(filepath.Join(clitest.RepoRoot, "scripts", "gtt-bisect"))
	require.NoError(t, err)
	require.NotZero(t, fi.Mode().Perm()&0o111, "scripts/gtt-bisect is executable")
	require.True(t, strings.HasPrefix(string(script), "#!/bin/sh\n"))
}
