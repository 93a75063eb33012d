package llamalog

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gttsplit/gttsplit/internal/perftest"
)

// FuzzScanAnchorLinesMatchesPlain holds the grouped one-pass-per-byte
// anchor search to the plain search for each anchor in turn.
func FuzzScanAnchorLinesMatchesPlain(f *testing.F) {
	for _, a := range pieceAnchors {
		f.Add([]byte("x " + string(a) + " y\n" + string(a[1:]) + "\n" + string(a)))
	}
	f.Add([]byte("uMiB\nmodel size:z\n=instance name=\nfff draft modelfitting params\n"))
	for _, p := range []string{"runs/4b/split.log", "logs/router.log", "logs/two_models.log", "logs/b4000_legacy.log"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", filepath.FromSlash(p)))
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

// FuzzPairScanMatchesPlain holds the pair scan (one pass for every anchor,
// newlines counted on the way) to the plain search and a newline count.
func FuzzPairScanMatchesPlain(f *testing.F) {
	if !usePairScan {
		f.Skip("no pair-scan kernel on this CPU")
	}
	for _, as := range [][][]byte{pieceAnchors, debugMarkers} {
		for _, a := range as {
			f.Add([]byte(strings.Repeat("x", len(a)%40) + " " + string(a) + " y\n" + string(a[1:]) + "\n" + string(a)))
		}
	}
	for _, p := range []string{"runs/4b/split.log", "logs/router.log", "logs/two_models.log", "logs/b4000_legacy.log"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", filepath.FromSlash(p)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[:min(len(b), 8<<10)])
	}
	f.Fuzz(func(t *testing.T, chunk []byte) {
		for i := range min(len(chunk)+1, 80) {
			if got, want := lastNewline(chunk[:len(chunk)-i]), bytes.LastIndexByte(chunk[:len(chunk)-i], '\n'); got != want {
				t.Fatalf("%q: last newline at %d, found %d", chunk[:len(chunk)-i], want, got)
			}
		}
		for _, c := range []struct {
			ps      *pairSet
			anchors [][]byte
		}{{mainPairs, pieceAnchors}, {debugPairs, slices.Concat(pieceAnchors, debugMarkers)}} {
			cands, nl := c.ps.scan(chunk, nil)
			want := sortedSet(anchorLinesPlain(c.anchors, chunk, nil))
			var got []int
			for _, x := range cands {
				got = append(got, x.start)
				if n := uint64(bytes.Count(chunk[:x.start], []byte{'\n'})); x.line != n {
					t.Fatalf("%q: line at %d has %d lines before it, counted %d", chunk, x.start, n, x.line)
				}
				// The anchor it names is in the line, and is a main
				// anchor only if one is.
				line := chunk[x.start:]
				if e := bytes.IndexByte(line, '\n'); e >= 0 {
					line = line[:e]
				}
				if x.anchor == 0 || int(x.anchor) > len(c.anchors) || !bytes.Contains(line, scanAnchorIDs[x.anchor-1]) {
					t.Fatalf("%q: line at %d: anchor %d", chunk, x.start, x.anchor)
				}
				if mainAnchor(x.anchor) && !MustParser().Relevant(line, false) {
					t.Fatalf("%q: line at %d: main anchor %q, not relevant", chunk, x.start, scanAnchorIDs[x.anchor-1])
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%q:\npair  %v\nplain %v", chunk, got, want)
			}
			if n := uint64(bytes.Count(chunk, []byte{'\n'})); nl != n {
				t.Fatalf("%q: %d newlines, counted %d", chunk, n, nl)
			}
		}
	})
}

// TestPairsCoverAnchors: every anchor and -v marker has its listed pair,
// and the anchors' pairs never occur in llama-server request lines.
func TestPairsCoverAnchors(t *testing.T) {
	run, err := perftest.Run4B()
	if err != nil {
		t.Fatal(err)
	}
	log, err := perftest.ServerLog(int64(len(run)) + 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	req := log[len(run):]
	for i, as := range [][][]byte{pieceAnchors, debugMarkers} {
		for _, a := range as {
			ap, ok := anchorPair[string(a)]
			if !ok || len(ap.pair) != 2 || !bytes.Contains(a, []byte(ap.pair)) || ap.bucket < 0 || ap.bucket > 7 {
				t.Errorf("%q: pair %+v", a, ap)
			}
			if i == 0 && bytes.Contains(req, []byte(ap.pair)) {
				t.Errorf("%q: pair %q occurs in request lines", a, ap.pair)
			}
		}
	}
	if len(anchorPair) != len(pieceAnchors)+len(debugMarkers) {
		t.Errorf("%d pairs listed for %d anchors", len(anchorPair), len(pieceAnchors)+len(debugMarkers))
	}
}

// TestAnchorPairsAreRare: over a long llama-server log (the 4B run, then
// request and slot lines) few places pass the pair scan of the anchors, a
// pair's bucket included: "buffer size" by its "uf" in bucket 5 (with "n:"
// and "aw") let 79 times as many through as without it (34,339 against 436
// in 8 MiB), in bucket 6 466.
func TestAnchorPairsAreRare(t *testing.T) {
	srv, err := perftest.ServerLog(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	tb := &mainPairs.t
	n := 0
	for q := 0; q+1 < len(srv); q++ {
		c0, c1, c2 := srv[q], srv[q+1], byte(0)
		if q+2 < len(srv) {
			c2 = srv[q+2]
		}
		if tb.lo0[c0&15]&tb.hi0[c0>>4]&tb.lo1[c1&15]&tb.hi1[c1>>4]&tb.lo2[c2&15]&tb.hi2[c2>>4] != 0 {
			n++
		}
	}
	t.Logf("%d of %d places pass the pair scan of the anchors", n, len(srv))
	if n*10000 > len(srv) {
		t.Errorf("%d of %d places pass the pair scan of the anchors: more than 0.01 %%", n, len(srv))
	}
}

// TestLiteralPairsAreRare: every literal has its listed pair and bucket,
// and over the messages of the repository's logs and llama-server request
// lines few places pass the pair scan of the grammar's literals (each
// place passed is looked up; with one bucket per literal's id, 14 % did),
// and of the -v markers few more than hold one.
func TestLiteralPairsAreRare(t *testing.T) {
	for _, a := range lits {
		lp, ok := litPair[string(a)]
		if !ok || len(lp.pair) != 2 || !bytes.Contains(a, []byte(lp.pair)) || lp.bucket < 0 || lp.bucket > 7 {
			t.Errorf("%q: pair %+v", a, lp)
		}
	}
	if len(litPair) != len(lits) {
		t.Errorf("%d pairs listed for %d literals", len(litPair), len(lits))
	}
	files, _ := filepath.Glob(filepath.Join(perftest.Root(), "testdata", "*", "*.log"))
	deeper, _ := filepath.Glob(filepath.Join(perftest.Root(), "testdata", "*", "*", "*.log"))
	srv, err := perftest.ServerLog(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	logs := [][]byte{srv}
	for _, f := range append(files, deeper...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, b)
	}
	// passes is the scan's test of a place: its pair and the byte after
	// it (0 past the end) fit the nibbles of a bucket of t.
	passes := func(t *pairTables, s []byte, q int) bool {
		c0, c1, c2 := s[q], s[q+1], byte(0)
		if q+2 < len(s) {
			c2 = s[q+2]
		}
		return t.lo0[c0&15]&t.hi0[c0>>4]&t.lo1[c1&15]&t.hi1[c1>>4]&t.lo2[c2&15]&t.hi2[c2>>4] != 0
	}
	var places, main, debug, holds int
	var scratch []byte
	for _, b := range logs {
		for _, l := range bytes.Split(b, []byte("\n")) {
			s := Payload(l, &scratch)
			for q := 0; q+1 < len(s); q++ {
				places++
				if passes(&litTab.pt, s, q) {
					main++
				}
				if passes(&debugLitTab.pt, s, q) {
					debug++
				}
				if debugLitTab.check(s, q) != 0 {
					holds++
				}
			}
		}
	}
	t.Logf("%d places: %d pass the grammar's literals, %d the -v markers' (%d hold one)", places, main, debug, holds)
	if main*200 > places {
		t.Errorf("%d of %d places pass the pair scan of the grammar's literals: more than 0.5 %%", main, places)
	}
	if debug > 2*holds+places/100 {
		t.Errorf("%d of %d places pass the pair scan of the -v markers, %d hold one", debug, places, holds)
	}
}

// The grouped memchr passes (CPUs without the pair-scan kernel) pick the
// same lines and count the same newlines as the pair scan, with and
// without -v markers and with a custom trace pattern.
func TestScanPieceWithoutPairScan(t *testing.T) {
	if !usePairScan {
		t.Skip("no pair-scan kernel on this CPU")
	}
	custom, err := NewParser(`packed=(\d+)`, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"runs/4b/split.log", "runs/27b/split.log", "logs/router.log", "logs/two_models.log", "logs/b4000_legacy.log", "logs/b9200_not_verbose.log"} {
		log, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []*Parser{MustParser(), custom} {
			for _, debug := range []bool{true, false} {
				for _, cut := range []int{len(log), len(log) / 3} {
					var a, b Piece
					p.scanPiece(log[:cut], debug, &a, true)
					p.scanPiece(log[:cut], debug, &b, false)
					// The passes do not say which anchor a line holds.
					if !slices.EqualFunc(a.cands, b.cands, func(x, y candidate) bool { return x.start == y.start && x.line == y.line }) || a.newlines != b.newlines {
						t.Fatalf("%s (debug %v, %d bytes): pair scan %d lines %v, passes %d lines %v", name, debug, cut, a.newlines, a.cands, b.newlines, b.cands)
					}
				}
			}
		}
	}
}

// FuzzRelevantMatchesPlain holds Relevant (the pair scan of the line, the
// path of every line a served run applies) to the search for each anchor
// in turn, with and without -v markers, for the default trace pattern and
// a custom one.
func FuzzRelevantMatchesPlain(f *testing.F) {
	addLineSeeds(f)
	for _, a := range scanAnchorIDs {
		f.Add([]byte(strings.Repeat("y", len(a)%37) + string(a) + strings.Repeat("z", 40-len(a)%29)))
		f.Add([]byte(string(a[:len(a)-1]) + "\n" + string(a[len(a)-1:])))
	}
	custom, err := NewParser(`packed=(\d+)`, "")
	if err != nil {
		f.Fatal(err)
	}
	ps := []*Parser{MustParser(), custom}
	f.Fuzz(func(t *testing.T, line []byte) {
		for _, p := range ps {
			for _, debug := range []bool{false, true} {
				if got, want := p.Relevant(line, debug), p.relevantPlain(line, debug); got != want {
					t.Fatalf("%q (debug %v, custom %v): relevant %v, plain %v", line, debug, p != ps[0], got, want)
				}
			}
		}
	})
}

// anchorLinesPlain is the straightforward search anchorLines stands for:
// every anchor in turn, the line of each hit.
func anchorLinesPlain(anchors [][]byte, chunk []byte, starts []int) []int {
	for _, a := range anchors {
		for off := 0; ; {
			i := bytes.Index(chunk[off:], a)
			if i < 0 {
				break
			}
			i += off
			starts = append(starts, bytes.LastIndexByte(chunk[:i], '\n')+1)
			e := bytes.IndexByte(chunk[i:], '\n')
			if e < 0 {
				break
			}
			off = i + e + 1
		}
	}
	return starts
}
