package main

import (
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
