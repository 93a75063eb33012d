package split

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzScanAnchorLinesMatchesPlain holds the grouped one-pass-per-byte
// anchor search to the plain search for each anchor in turn.
func FuzzScanAnchorLinesMatchesPlain(f *testing.F) {
	for _, a := range pieceAnchors {
		f.Add([]byte("x " + string(a) + " y\n" + string(a[1:]) + "\n" + string(a)))
	}
	f.Add([]byte("uMiB\nmodel size:z\n=instance name=\nfff draft modelfitting params\n"))
	for _, p := range []string{"runs/4b/split.log", "logs/router.log", "logs/two_models.log", "logs/b4000_legacy.log"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", filepath.FromSlash(p)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[:min(len(b), 8<<10)])
	}
	for _, m := range debugMarkers {
		f.Add([]byte("x " + string(m) + " y\n" + string(m[1:]) + "\n" + string(m)))
	}
	f.Fuzz(func(t *testing.T, chunk []byte) {
		got := sortedSet(scanAnchorLines(chunk, nil))
		want := sortedSet(anchorLinesPlain(pieceAnchors, chunk, nil))
		if !slices.Equal(got, want) {
			t.Fatalf("%q:\nfast  %v\nplain %v", chunk, got, want)
		}
		got = sortedSet(anchorLines(debugGroups, chunk, nil))
		want = sortedSet(anchorLinesPlain(debugMarkers, chunk, nil))
		if !slices.Equal(got, want) {
			t.Fatalf("-v markers in %q:\nfast  %v\nplain %v", chunk, got, want)
		}
	})
}

func sortedSet(s []int) []int {
	slices.Sort(s)
	return slices.Compact(s)
}

// TestScanGroupsCoverAnchors: every scan anchor is in exactly one group.
func TestScanGroupsCoverAnchors(t *testing.T) {
	n := 0
	for _, g := range scanGroups {
		for _, x := range g.as {
			n++
			if x.a[x.k] != g.c {
				t.Errorf("%q: byte %d is not %q", x.a, x.k, g.c)
			}
		}
	}
	if n != len(pieceAnchors) {
		t.Fatalf("%d anchors grouped, want %d", n, len(pieceAnchors))
	}
	// An anchor without a group byte has a group of its own.
	gs := groupAnchors([][]byte{[]byte("MiB"), []byte("xyz"), []byte("xqq")}, "M")
	if len(gs) != 2 || gs[1].c != 'x' || len(gs[1].as) != 2 {
		t.Fatalf("groups %+v", gs)
	}
}
