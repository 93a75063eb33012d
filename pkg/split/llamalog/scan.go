package llamalog

import (
	"bytes"
	"slices"
)

// Piece is what Parser.ScanPiece found in a piece of a log: the lines that
// can be relevant and the piece's line count. Reuse one per scanning
// goroutine to scan without allocating.
type Piece struct {
	cands    []candidate
	newlines uint64
	starts   []int
}

// candidate is a line that can be relevant: its start in the piece, its
// number of lines before it in the piece, and the id of an anchor the
// line holds (see anchorID; 0 when the scan does not say).
type candidate struct {
	start  int
	line   uint64
	anchor uint8
}

// scanAnchorIDs are pieceAnchors then debugMarkers: an anchor's id is its
// index here plus one.
var scanAnchorIDs = slices.Concat(pieceAnchors, debugMarkers)

// anchorID returns the id of anchor a (0 for none of scanAnchorIDs).
func anchorID(a []byte) uint8 {
	for i, x := range scanAnchorIDs {
		if bytes.Equal(x, a) {
			return uint8(i + 1)
		}
	}
	return 0
}

// mainAnchor reports whether id is one of pieceAnchors: a line holding one
// is relevant whatever else it holds (Parser.Relevant).
func mainAnchor(id uint8) bool { return id != 0 && int(id) <= len(pieceAnchors) }

// Candidates returns how many lines of the piece may be relevant.
func (pc *Piece) Candidates() int { return len(pc.cands) }

// Candidate returns the i-th line of the piece that may be relevant, in
// order: its start in the piece, the number of lines before it in the
// piece, and sure, true when the scan found in it an anchor that makes it
// relevant whatever else it holds (Parser.Relevant is true of it; of the
// others, ask Relevant).
func (pc *Piece) Candidate(i int) (start int, line uint64, sure bool) {
	c := &pc.cands[i]
	return c.start, c.line, mainAnchor(c.anchor)
}

// Newlines returns the number of newlines in the piece.
func (pc *Piece) Newlines() uint64 { return pc.newlines }

// ScanPiece searches a piece of a log (whole lines; the last may lack its
// newline) for the lines that can be relevant (see Parser.Relevant), into
// pc. It depends on nothing but its arguments, so pieces can be scanned
// in any order, on any goroutine: the lines it picks are a superset of
// those line-by-line application would find relevant, with debug telling
// whether -v markers are still wanted (true is always safe; a fold says
// whether it still wants them).
func (p *Parser) ScanPiece(piece []byte, debug bool, pc *Piece) {
	p.scanPiece(piece, debug, pc, usePairScan)
}

// scanPiece is ScanPiece with the pair scan (pairs) or the grouped memchr
// passes.
func (p *Parser) scanPiece(piece []byte, debug bool, pc *Piece, pairs bool) {
	starts := pc.starts[:0]
	if pairs {
		ps := mainPairs
		if debug {
			ps = debugPairs
		}
		pc.cands, pc.newlines = ps.scan(piece, pc.cands[:0])
		if p.traceNeedsMiB {
			return // in order, each once, counted
		}
		for _, c := range pc.cands {
			starts = append(starts, c.start)
		}
	} else {
		starts = scanAnchorLines(piece, starts)
		if debug {
			starts = anchorLines(debugGroups, piece, starts)
		}
	}
	if !p.traceNeedsMiB {
		starts = p.traceLines(piece, starts)
	}
	slices.Sort(starts)
	starts = slices.Compact(starts)
	pc.starts = starts
	pc.cands = pc.cands[:0]
	var nl uint64
	pos := 0
	for _, s := range starts {
		nl += uint64(bytes.Count(piece[pos:s], nlByte))
		pc.cands = append(pc.cands, candidate{start: s, line: nl})
		pos = s
	}
	pc.newlines = nl + uint64(bytes.Count(piece[pos:], nlByte))
}

var nlByte = []byte{'\n'}

// traceLines appends the lines that hold a custom trace pattern's literal,
// or, with no literal, every line the pattern matches.
func (p *Parser) traceLines(chunk []byte, starts []int) []int {
	if len(p.traceAnchor) > 0 {
		for off := 0; ; {
			i := bytes.Index(chunk[off:], p.traceAnchor)
			if i < 0 {
				return starts
			}
			i += off
			starts = append(starts, bytes.LastIndexByte(chunk[:i], '\n')+1)
			e := bytes.IndexByte(chunk[i:], '\n')
			if e < 0 {
				return starts
			}
			off = i + e + 1
		}
	}
	for s := 0; s < len(chunk); {
		e := bytes.IndexByte(chunk[s:], '\n')
		if e < 0 {
			e = len(chunk) - s
		}
		if p.trace.Match(chunk[s : s+e]) {
			starts = append(starts, s)
		}
		s += e + 1
	}
	return starts
}

// pieceAnchors are the anchors ScanPiece always searches: every line
// holding one is relevant (Parser.Relevant). Build, version and verbosity
// lines and the rows of a memory-breakdown table are among them, so that
// no search depends on what the fold has seen.
var pieceAnchors = slices.Concat(scanAnchors, onceAnchors, [][]byte{aBreakdown})

// anchorAt is an anchor and the offset in it of its group's byte.
type anchorAt struct {
	a []byte
	k int
}

// anchorGroup is the anchors that contain byte c: one IndexByte pass over
// a chunk for c finds every line holding any of them.
type anchorGroup struct {
	c  byte
	as []anchorAt
}

// groupBytes are the bytes the scanner hunts for, in order of preference:
// each anchor is searched for by the first of them it contains. A hit
// costs far more than a pass, so they are bytes rare in llama.cpp and
// llama-server output (request and slot lines are most of a long server
// log); an anchor holding none of them gets a pass of its own, by its
// first byte.
const groupBytes = "MzIxwfbq-cv"

// debugGroupBytes are the same for the -v markers.
const debugGroupBytes = "yvqzgx"

var (
	// scanGroups is pieceAnchors grouped by groupBytes.
	scanGroups = groupAnchors(pieceAnchors, groupBytes)
	// debugGroups is debugMarkers grouped by debugGroupBytes.
	debugGroups = groupAnchors(debugMarkers, debugGroupBytes)
)

func groupAnchors(anchors [][]byte, pref string) []anchorGroup {
	var gs []anchorGroup
	for _, a := range anchors {
		// An anchor with none of pref is searched by its first byte.
		c, k := a[0], 0
		for _, p := range []byte(pref) {
			if i := bytes.IndexByte(a, p); i >= 0 {
				c, k = p, i
				break
			}
		}
		i := 0
		for i < len(gs) && gs[i].c != c {
			i++
		}
		if i == len(gs) {
			gs = append(gs, anchorGroup{c: c})
		}
		gs[i].as = append(gs[i].as, anchorAt{a, k})
	}
	return gs
}

// scanAnchorLines appends the start of every line of chunk that contains
// one of pieceAnchors (in no particular order, maybe twice). It is the
// same set as searching for each anchor in turn (anchorLinesPlain, a
// fuzz test holds them equal), in one pass per group byte.
func scanAnchorLines(chunk []byte, starts []int) []int {
	return anchorLines(scanGroups, chunk, starts)
}

func anchorLines(groups []anchorGroup, chunk []byte, starts []int) []int {
	for _, g := range groups {
		for off := 0; off < len(chunk); {
			i := bytes.IndexByte(chunk[off:], g.c)
			if i < 0 {
				break
			}
			i += off
			off = i + 1
			for _, x := range g.as {
				s := i - x.k
				// The first and last bytes turn most false hits away
				// before the full compare.
				if s < 0 || s+len(x.a) > len(chunk) || chunk[s] != x.a[0] || chunk[s+len(x.a)-1] != x.a[len(x.a)-1] || !bytes.Equal(chunk[s:s+len(x.a)], x.a) {
					continue
				}
				starts = append(starts, bytes.LastIndexByte(chunk[:s], '\n')+1)
				// The rest of the line is already in.
				if e := bytes.IndexByte(chunk[i:], '\n'); e >= 0 {
					off = i + e + 1
				} else {
					off = len(chunk)
				}
				break
			}
		}
	}
	return starts
}
