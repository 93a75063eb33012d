package events_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.json and the examples in docs/events.md")

// docPath is the contract document whose examples must match the goldens.
const docPath = "../../docs/events.md"

func goldenPath(stem string) string { return filepath.Join("testdata", "golden", stem+".json") }

func indent(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, json.Indent(&buf, b, "", "  "))
	buf.WriteByte('\n')
	return buf.Bytes()
}

// TestGolden checks that every example event encodes to its golden file and
// that the golden file decodes back to the same bytes.
func TestGolden(t *testing.T) {
	for _, ex := range examples() {
		t.Run(ex.stem(), func(t *testing.T) {
			ev, err := ex.build()
			require.NoError(t, err)
			wire, err := events.Marshal(ev)
			require.NoError(t, err)
			got := indent(t, wire)
			path := goldenPath(ex.stem())
			if *update {
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test -update to create it")
			require.Equal(t, string(want), string(got), "golden %s is stale; run go test -update", path)

			// The golden (indented) file is a valid event of the same type
			// that re-encodes to the same wire bytes.
			back, err := events.Unmarshal(want)
			require.NoError(t, err)
			d, err := events.Decode(back)
			require.NoError(t, err)
			require.Equal(t, ex.typ, d.Type)
			again, err := events.Marshal(back)
			require.NoError(t, err)
			require.Equal(t, string(wire), string(again))
		})
	}
}

// docExample matches one example block of docs/events.md: a marker comment
// naming the type, then a fenced json block.
var docExample = regexp.MustCompile("(?s)<!-- example: ([a-z0-9.]+) -->\n```json\n(.*?)```\n")

// TestDocExamples checks that docs/events.md shows, for every type, exactly
// the golden example, so the document cannot drift from the code. With
// -update it rewrites the blocks in place.
func TestDocExamples(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	require.NoError(t, err)
	goldens := map[string][]byte{}
	for _, ex := range examples() {
		b, err := os.ReadFile(goldenPath(ex.stem()))
		require.NoError(t, err)
		goldens[ex.typ] = b
	}
	if *update {
		doc = docExample.ReplaceAllFunc(doc, func(m []byte) []byte {
			sub := docExample.FindSubmatch(m)
			g, ok := goldens[string(sub[1])]
			if !ok {
				return m
			}
			return fmt.Appendf(nil, "<!-- example: %s -->\n```json\n%s```\n", sub[1], g)
		})
		require.NoError(t, os.WriteFile(docPath, doc, 0o644))
	}
	seen := map[string]int{}
	for _, m := range docExample.FindAllSubmatch(doc, -1) {
		typ := string(m[1])
		seen[typ]++
		want, ok := goldens[typ]
		require.True(t, ok, "docs/events.md shows an example of unknown type %q", typ)
		require.Equal(t, string(want), string(m[2]), "example %s in docs/events.md differs from its golden; run go test -update", typ)
		_, err := events.DecodeBytes(m[2])
		require.NoError(t, err, typ)
	}
	for _, typ := range events.Types {
		require.Equal(t, 1, seen[typ], "docs/events.md must show exactly one example of %s", typ)
	}
}
