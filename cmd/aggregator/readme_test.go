package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readmeCommands returns the commands of the README's "The two commands"
// section, in order.
func readmeCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, "## The two commands")
	require.GreaterOrEqual(t, i, 0, "README.md lost its 'The two commands' section")
	s = s[i:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	var cmds []string
	for _, block := range strings.Split(s, "```sh\n")[1:] {
		cmd := strings.TrimSpace(block[:strings.Index(block, "```")])
		cmds = append(cmds, cmd)
	}
	return cmds
}

// TestREADMEQuickstartIntegration runs the README's quickstart command
// itself, from the repository's root, so the README cannot drift.
func TestREADMEQuickstartIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole pipeline")
	}
	cmds := readmeCommands(t)
	require.Len(t, cmds, 2, "the README names two commands: the quickstart and the tests")
	require.Equal(t, "go test -race -timeout 20m ./internal/runtable ./...", cmds[1])
	ci, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	require.NoError(t, err)
	require.Contains(t, string(ci), "\n"+cmds[1]+"\n", ".ci/run must run the README's test command")

	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	// The README's command as written, run from the repository's root, with
	// its output directory moved to a temporary one: a test never touches a
	// user's quickstart-out/.
	out := filepath.Join(t.TempDir(), "quickstart-out")
	cmd := exec.Command("sh", "-c", cmds[0]+" --out '"+out+"'")
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())
	for _, want := range []string{"3925.0", "2375.9", "795.8", "20497.0", "15718.5", "2631.3", "wrote 2 splits"} {
		require.Contains(t, stdout.String(), want)
	}
	for _, f := range []string{
		"json/strix01/gpu0/strix01-20261107T140311-4b.json", "json/strix01/gpu1/strix01-20261107T141902-27b.json",
		"json/splits.jsonl", "reports/strix01/gpu0/strix01-20261107T140311-4b.md",
	} {
		require.FileExists(t, filepath.Join(out, f))
	}
}

// TestRepositoryStandsAlone: no text of the repository cites documents that
// are not in it (the design notes it was built from), and every relative
// Markdown link points at a file that exists.
func TestRepositoryStandsAlone(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	// Spelled in pieces so this file does not cite them itself.
	banned := []string{"SPEC" + " §", "SPEC" + ".md", "FORMATS" + " §", "FORMATS" + ".md", "../" + "shared"}
	link := regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "quickstart-out", "data":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".txtar", ".yaml", ".yml", "":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, s := range banned {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s cites %q, which is not in the repository", path, s)
			}
		}
		if filepath.Ext(path) == ".md" {
			for _, m := range link.FindAllSubmatch(b, -1) {
				target := filepath.Join(filepath.Dir(path), string(m[1]))
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s links to %s, which does not exist", path, m[1])
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
}

// TestREADMECompareOutput keeps the README's compare example equal to what
// the command prints.
func TestREADMECompareOutput(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	const cmd = "$ aggregator compare testdata/runs/4b/events.jsonl testdata/controls/4b-ngl0/events.jsonl\n"
	s := string(b)
	i := strings.Index(s, cmd)
	require.GreaterOrEqual(t, i, 0, "README.md lost its compare example")
	want := s[i+len(cmd):]
	want = want[:strings.Index(want, "```")]

	var out, errb bytes.Buffer
	root := newRoot(&out, &errb)
	root.SetArgs([]string{"compare", filepath.Join("..", "..", "testdata", "runs", "4b", "events.jsonl"),
		filepath.Join("..", "..", "testdata", "controls", "4b-ngl0", "events.jsonl")})
	require.NoError(t, root.Execute(), errb.String())
	require.Equal(t, strings.TrimRight(want, "\n"), strings.TrimRight(out.String(), "\n"))
}
