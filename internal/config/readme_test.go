package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestREADMEConfigTables keeps the README's configuration tables equal to
// the keys the code has; `go test ./internal/config -update` rewrites them.
func TestREADMEConfigTables(t *testing.T) {
	path := filepath.Join("..", "..", "README.md")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	readme := string(b)
	for name, cfg := range map[string]any{"collector": DefaultCollector(), "aggregator": DefaultAggregator()} {
		open, end := "<!-- config:"+name+" -->\n", "<!-- /config:"+name+" -->"
		i, j := strings.Index(readme, open), strings.Index(readme, end)
		require.True(t, i >= 0 && j > i, "README.md lacks the %s markers", name)
		want := MarkdownTable(cfg)
		if !strings.HasSuffix(want, "\n") {
			want += "\n"
		}
		got := readme[i+len(open) : j]
		if *update {
			readme = readme[:i+len(open)] + want + readme[j:]
			continue
		}
		require.Equal(t, want, got, "README.md's %s table is stale: go test ./internal/config -update", name)
	}
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(readme), 0o644))
	}
}
