package llamalog

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// The pair scan finds the lines holding any of a set of anchors in one
// pass over a piece, 32 bytes a step (pairscan_amd64.s, with AVX2): each
// anchor is looked for by one rare pair of its bytes, table look-ups per
// byte tell whether a byte pair (and the byte after it) may start one of
// them, and only those places are compared with the anchors. The same pass counts newlines. A
// long server log has almost no such pair outside the anchor lines, so
// the pass costs about what a memchr costs, for all the anchors at once.
//
// Each anchor goes to one of 8 buckets. A byte pair (x, y) is a candidate
// when, for some bucket, x's low and high nibbles are both among the
// first bytes' nibbles of the bucket's pairs and y's among the second
// bytes': every pair of the bucket is a candidate (the scan misses
// nothing), and so are a few mixtures of the bucket's nibbles.

// pairTables are the nibble tables of the scan, each 16 bytes twice (one
// copy per 128-bit lane), then the constants the kernel needs.
type pairTables struct {
	lo0, hi0, lo1, hi1 [32]byte
	nibble, newline    [32]byte
	// The byte after the pair, the same way: a third look-up turns away
	// most places where a frequent pair ("ze", "fi", "ba") is not the
	// anchor's ("ze:", "fit", "bac"). An anchor whose pair ends it lets
	// any byte through in its bucket.
	lo2, hi2 [32]byte
}

// add enters the pair a[k], a[k+1] (and the byte after it, when a has
// one) in bucket (0-7).
func (t *pairTables) add(a []byte, k, bucket int) {
	for i := range 32 {
		t.nibble[i], t.newline[i] = 0x0f, '\n'
	}
	c0, c1, bit := a[k], a[k+1], byte(1)<<bucket
	for lane := 0; lane < 32; lane += 16 {
		t.lo0[lane+int(c0&15)] |= bit
		t.hi0[lane+int(c0>>4)] |= bit
		t.lo1[lane+int(c1&15)] |= bit
		t.hi1[lane+int(c1>>4)] |= bit
		if k+2 < len(a) {
			c2 := a[k+2]
			t.lo2[lane+int(c2&15)] |= bit
			t.hi2[lane+int(c2>>4)] |= bit
		} else {
			for n := range 16 {
				t.lo2[lane+n] |= bit
				t.hi2[lane+n] |= bit
			}
		}
	}
}

// pairAnchor is an anchor, the offset k of its pair in it, the pair's
// second byte and the anchor's id (see anchorID).
type pairAnchor struct {
	a  []byte
	k  int
	c1 byte
	id uint8
}

// pairSet is a set of anchors ready for the pair scan.
type pairSet struct {
	t pairTables
	// byFirst holds the anchors by the first byte of their pair.
	byFirst [256][]pairAnchor
}

// anchorPair is the pair an anchor is looked for by and its bucket:
// chosen from how often byte pairs occur in the repository's logs and in
// llama-server request lines (the pairs of the anchors and -v markers
// never occur in the latter); TestPairsCoverAnchors checks every anchor
// has one.
var anchorPair = map[string]struct {
	pair   string
	bucket int
}{
	"MiB": {"Mi", 0}, "build": {"ui", 0}, "mem required": {"ui", 0},
	"model size:":          {"ze", 1},
	"buffer size":          {"uf", 6},
	"fitting params":       {"fi", 2},
	"CLIP using":           {"IP", 2},
	"warming up the model": {"wa", 3},
	"params backend":       {"ba", 4}, "instance name=": {"an", 4}, "draft model": {"af", 4},
	"version: ": {"n:", 5}, "spawning server": {"aw", 5},
	"ucting llama_context": {"uc", 6}, "verbosity = ": {"rb", 6}, "VRAM used": {"VR", 6},
	"breakdown_print": {"br", 7}, "-value pairs": {"-v", 7}, "fallback to CPU backend": {"lb", 7},
	// -v markers
	"create_tensor: loading tensor": {"cr", 0},
	": dev = ":                      {"de", 1}, "does not support async": {"oe", 1}, "does not have KV cache": {"oe", 1},
	"enumerating backends":           {"um", 0},
	"using async uploads for device": {"yn", 3}, "for async uploads": {"yn", 3},
	"backend_ptrs.size()": {"e(", 2},
	"n_embd_k_gqa =":      {"gq", 5},
	"assigned to device":  {"gn", 6}, "cannot be used with preferred buffer type": {"nn", 6},
	"graph_reserve: reserving a graph": {"ap", 7},
	// what failed, where a reservation starts, the fit's dry runs
	"failed to ": {"fa", 4}, "Failed to ": {"Fa", 4}, "GGML_ASSERT(buffer)": {"GG", 3},
	"reserving ...": {"vi", 3}, "getting device memory data": {"de", 1},
	"max_nodes = ": {"ax", 4},
}

// newPairSet builds the scan of anchors. An anchor without a listed pair
// is looked for by its first two bytes, in bucket 0 (slower, still right).
func newPairSet(anchors ...[][]byte) *pairSet {
	ps := &pairSet{}
	for _, as := range anchors {
		for _, a := range as {
			ap, ok := anchorPair[string(a)]
			k := bytes.Index(a, []byte(ap.pair))
			if !ok || len(ap.pair) != 2 || k < 0 {
				ap.pair, ap.bucket, k = string(a[:2]), 0, 0
			}
			ps.t.add(a, k, ap.bucket)
			c0, c1 := a[k], a[k+1]
			ps.byFirst[c0] = append(ps.byFirst[c0], pairAnchor{a: a, k: k, c1: c1, id: anchorID(a)})
		}
	}
	return ps
}

var (
	// mainPairs is the pair scan of the anchors ScanPiece always wants,
	// debugPairs the same and the -v markers.
	mainPairs  = newPairSet(pieceAnchors)
	debugPairs = newPairSet(pieceAnchors, debugMarkers)
)

// scan appends the lines of b holding one of the set's anchors, in order,
// each once, and returns them with b's newline count.
func (ps *pairSet) scan(b []byte, cands []candidate) ([]candidate, uint64) {
	var nl uint64
	last := -1 // the start of the last line appended
	for pos := 0; ; {
		off, mask, n, nlMask := pairScan(b[pos:], &ps.t)
		at := pos + off
		nl += uint64(n)
		if mask == 0 {
			// The tail, shorter than a step: every place.
			for q := at; q+1 < len(b); q++ {
				if len(ps.byFirst[b[q]]) > 0 {
					cands, last = ps.check(b, q, nl+uint64(bytes.Count(b[at:q], nlByte)), cands, last)
				}
			}
			return cands, nl + uint64(bytes.Count(b[at:], nlByte))
		}
		for mask != 0 {
			j := bits.TrailingZeros32(mask)
			mask &= mask - 1
			// The newlines of the step before the pair.
			cands, last = ps.check(b, at+j, nl+uint64(bits.OnesCount32(nlMask&(1<<j-1))), cands, last)
		}
		nl += uint64(bits.OnesCount32(nlMask))
		pos = at + 32
	}
}

// any reports whether b holds one of the set's anchors (newlines or not):
// the scan of a single line.
func (ps *pairSet) any(b []byte) bool {
	for pos := 0; ; {
		off, mask, _, _ := pairScan(b[pos:], &ps.t)
		at := pos + off
		if mask == 0 {
			// The tail, shorter than a step: every place.
			for q := at; q+1 < len(b); q++ {
				if len(ps.byFirst[b[q]]) > 0 && ps.at(b, q) != nil {
					return true
				}
			}
			return false
		}
		for mask != 0 {
			q := at + bits.TrailingZeros32(mask)
			mask &= mask - 1
			if ps.at(b, q) != nil {
				return true
			}
		}
		pos = at + 32
	}
}

// at returns an anchor of the set whose pair starts at b[q] and that is
// there, or nil.
func (ps *pairSet) at(b []byte, q int) *pairAnchor {
	for i := range ps.byFirst[b[q]] {
		x := &ps.byFirst[b[q]][i]
		if s := q - x.k; x.c1 == b[q+1] && s >= 0 && s+len(x.a) <= len(b) && bytes.Equal(b[s:s+len(x.a)], x.a) {
			return x
		}
	}
	return nil
}

// check appends the line of b at q (line lines before it) when an anchor
// whose pair starts at q is there, with that anchor's id. A line already
// appended (the last one) is not looked at again.
func (ps *pairSet) check(b []byte, q int, line uint64, cands []candidate, last int) ([]candidate, int) {
	if n := len(cands); n > 0 && last >= 0 && cands[n-1].line == line {
		return cands, last // the line of the last hit: anchors hold no newline
	}
	x := ps.at(b, q)
	if x == nil {
		return cands, last
	}
	start := lastNewline(b[:q-x.k]) + 1
	if start != last {
		cands = append(cands, candidate{start: start, line: line, anchor: x.id})
	}
	return cands, start
}

// lastNewline is bytes.LastIndexByte(b, '\n'), 8 bytes a step (the
// library's is a byte loop; a line start is often 100 bytes back).
func lastNewline(b []byte) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := len(b)
	for i >= 8 {
		w := binary.LittleEndian.Uint64(b[i-8:]) ^ (lo * '\n')
		if (w-lo)&^w&hi != 0 {
			break // a newline in b[i-8:i]
		}
		i -= 8
	}
	for i > 0 {
		i--
		if b[i] == '\n' {
			return i
		}
	}
	return -1
}
