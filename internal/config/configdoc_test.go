package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConfigDocTables keeps the key tables of docs/configuration.md equal
// to the keys the code has; `go test ./internal/config -update` rewrites
// them.
func TestConfigDocTables(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "configuration.md")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := string(b)
	for name, cfg := range map[string]any{"collector": DefaultCollector(), "aggregator": DefaultAggregator()} {
		open, end := "<!-- config:"+name+" -->\n", "<!-- /config:"+name+" -->"
		i, j := strings.Index(doc, open), strings.Index(doc, end)
		require.True(t, i >= 0 && j > i, "docs/configuration.md lacks the %s markers", name)
		want := MarkdownTable(cfg)
		if !strings.HasSuffix(want, "\n") {
			want += "\n"
		}
		got := doc[i+len(open) : j]
		if *update {
			doc = doc[:i+len(open)] + want + doc[j:]
			continue
		}
		require.Equal(t, want, got, "docs/configuration.md's %s table is stale: go test ./internal/config -update", name)
	}
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(doc), 0o644))
	}
}
