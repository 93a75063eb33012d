package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gttsplit/gttsplit/cmd/internal/clitest"
)

// TestRegressionsDocWorkflow: the GitHub Actions job of docs/regressions.md
// is a workflow YAML whose aggregator commands parse as the binary parses
// them (every flag known, every value valid), and it gates with --format
// github.
func TestRegressionsDocWorkflow(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(clitest.RepoRoot, "docs", "regressions.md"))
	require.NoError(t, err)
	doc := string(b)
	i := strings.Index(doc, "```yaml\nname: gtt\n")
	require.GreaterOrEqual(t, i, 0, "docs/regressions.md lost its workflow")
	block := doc[i+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	var wf struct {
		On   string `yaml:"on"`
		Jobs map[string]struct {
			RunsOn []string `yaml:"runs-on"`
			Steps  []struct {
				Name string `yaml:"name"`
				Uses string `yaml:"uses"`
				Run  string `yaml:"run"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(block), &wf))
	require.Len(t, wf.Jobs, 1)
	var cmds []string
	for _, j := range wf.Jobs {
		require.Contains(t, j.RunsOn, "self-hosted", "the collector reads the GPU host's /proc")
		for _, s := range j.Steps {
			for _, line := range strings.Split(strings.ReplaceAll(s.Run, "\\\n", " "), "\n") {
				if f := strings.Fields(line); len(f) > 0 && (f[0] == "aggregator" || f[0] == "collector") {
					cmds = append(cmds, strings.Join(f, " "))
				}
			}
		}
	}
	require.Len(t, cmds, 2, "collector run, then aggregator gate: %q", cmds)
	require.True(t, strings.HasPrefix(cmds[0], "collector run --out gtt "), cmds[0])
	f := strings.Fields(cmds[1])
	cmd, args, err := clitest.ParseCommand(newRoot(os.Stdout, os.Stderr), f[1:])
	require.NoError(t, err, cmds[1])
	require.Equal(t, "gate", cmd.Name())
	require.Equal(t, []string{"gtt"}, args, "the collector's --out directory")
	format, _ := cmd.Flags().GetString("format")
	require.Equal(t, "github", format)
}

// TestRegressionsDocRunsAsPrinted runs every "$ aggregator ..." example of
// docs/regressions.md as printed, in a directory laid out as the page
// names its files: run/ (the 4B reference run, as `collector run --out`
// writes it), baseline.json, builds.jsonl and splits/ (testdata/
// regressions), and requires the output the page prints. The workflow
// commands of its `--format github` example are among the output of the
// same gate in that format.
func TestRegressionsDocRunsAsPrinted(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(clitest.RepoRoot, "docs", "regressions.md"))
	require.NoError(t, err)
	doc := string(b)
	work := t.TempDir()
	for from, to := range map[string]string{
		filepath.Join(clitest.RepoRoot, "testdata", "runs", "4b"): "run",
		regressionsDir: ".",
	} {
		require.NoError(t, os.CopyFS(filepath.Join(work, to), os.DirFS(from)))
	}
	t.Chdir(work)
	run := func(args []string) string {
		var stdout, stderr bytes.Buffer
		root := newRoot(&stdout, &stderr)
		root.SilenceUsage, root.SilenceErrors = true, true
		root.SetArgs(args)
		_ = root.Execute() // a gate that fails exits 1: its output is the point
		return strings.TrimRight(stdout.String(), "\n")
	}
	ts := clitest.Transcripts(doc, "aggregator")
	require.GreaterOrEqual(t, len(ts), 2, "the page's gate and history examples")
	var gate []string
	for _, tr := range ts {
		require.Equal(t, tr.Output, run(tr.Args[1:]), "$ %s", strings.Join(tr.Args, " "))
		if tr.Args[1] == "gate" {
			gate = tr.Args[1:]
		}
	}
	require.NotNil(t, gate, "the page's gate example")
	github := run(append(gate, "--format", "github"))
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "::error ") {
			require.Contains(t, strings.Split(github, "\n"), l, "the workflow command the page shows")
		}
	}
}
