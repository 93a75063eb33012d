package split

import (
	"bytes"
	"io"
	"slices"
	"sync"
)

// chunkSize is how much of a log ReadLog searches at once.
const chunkSize = 1 << 18

// ReadLog applies a whole log to the fold, numbering its lines from 1 in
// stream. Only lines that contain one of the parser's anchors are visited:
// each chunk is searched for every anchor (see Parser.ScanPiece) and the
// lines of the hits are handed to AddLineBytes, so the cost per irrelevant
// line is a share of a few memchr-speed passes, with no allocation. It
// returns the number of lines read.
//
// It is the sequential form of a LogFeed: a reader that scans pieces of a
// file on several goroutines and feeds them in order gives the same fold.
func (f *Fold) ReadLog(r io.Reader, stream string) (uint64, error) {
	return f.readLog(r, stream, chunkSize)
}

func (f *Fold) readLog(r io.Reader, stream string, size int) (uint64, error) {
	feed := f.NewLogFeed(stream)
	// The buffer and candidate list of an earlier read: new ones are
	// zeroed and faulted in page by page, a cost a large log pays once
	// but many reads of small logs pay each time.
	rb := readBufs.Get().(*readBuf)
	defer readBufs.Put(rb)
	pc := &rb.pc
	buf := rb.buf
	if size != chunkSize {
		buf = make([]byte, size)
	}
	carry := 0 // bytes of an unfinished line at buf[:carry]
	for {
		n, err := io.ReadFull(r, buf[carry:])
		end := carry + n
		eof := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !eof {
			return feed.lines, err
		}
		chunk := buf[:end]
		if !eof {
			// Only whole lines; keep the tail for the next round.
			cut := bytes.LastIndexByte(chunk, '\n')
			if cut < 0 {
				// A line longer than the buffer: grow it.
				nb := make([]byte, 2*len(buf))
				copy(nb, buf[:end])
				buf, carry = nb, end
				continue
			}
			chunk = chunk[:cut+1]
		}
		f.p.ScanPiece(chunk, feed.WantDebug(), pc)
		feed.Apply(chunk, pc)
		if eof {
			return feed.Close(), nil
		}
		carry = copy(buf, buf[len(chunk):end])
	}
}

// readBuf is what ReadLog reads with: a chunk buffer and a Piece. ReadLog
// keeps nothing of them.
type readBuf struct {
	buf []byte
	pc  Piece
}

var readBufs = sync.Pool{New: func() any { return &readBuf{buf: make([]byte, chunkSize)} }}

// LogFeed applies a log to a fold piece by piece, in order. A piece is
// whole lines (only the log's last piece may end without a newline) that
// Parser.ScanPiece searched, maybe on another goroutine and with another
// piece size: the fold comes out the same however the log is cut, the
// same as applying every line with AddLineBytes. A LogFeed is not safe for
// concurrent use (the fold is not); ScanPiece is.
type LogFeed struct {
	f      *Fold
	stream string
	lines  uint64 // lines in the pieces applied
}

// NewLogFeed starts feeding a log to the fold as stream, its lines numbered
// from 1.
func (f *Fold) NewLogFeed(stream string) *LogFeed {
	if f.names == nil {
		f.names = new(nameCache)
	}
	return &LogFeed{f: f, stream: stream}
}

// Parser is the fold's parser, the one to scan the pieces with.
func (l *LogFeed) Parser() *Parser { return l.f.p }

// WantDebug reports whether the fold still looks for a line only -v prints
// (pass it to ScanPiece). Once false it stays false, so a scanner may read
// it late: a piece scanned for -v markers the fold no longer needs folds
// the same.
func (l *LogFeed) WantDebug() bool { return l.f.WantsDebug() }

// Apply folds the next piece of the log, which ScanPiece scanned into pc.
//
// It is AddLineBytes for each candidate line (without re-checking the
// lines the scan found a main anchor in), but the piece's lines are
// entered in the fold's line set with one range at the end rather than
// one by one: a line applied before (by an earlier piece or another
// source) is still skipped.
func (l *LogFeed) Apply(piece []byte, pc *Piece) {
	f := l.f
	before := f.st.Lines[l.stream] // unchanged until the piece is marked
	f.st.growRecords(len(pc.cands))
	for _, c := range pc.cands {
		s := c.start
		e := bytes.IndexByte(piece[s:], '\n')
		if e < 0 {
			e = len(piece) - s
		}
		seq, line := l.lines+c.line+1, piece[s:s+e]
		if before.has(seq) {
			continue
		}
		// A line the scan found one of the main anchors in is relevant;
		// any other (a -v marker's, a custom trace pattern's) is checked.
		if mainAnchor(c.anchor) || f.p.Relevant(line, f.st.DebugSeq == 0) {
			f.addRelevant(l.stream, seq, line)
		}
	}
	n := pc.newlines
	if len(piece) > 0 && piece[len(piece)-1] != '\n' {
		n++ // the log's last line, without a newline
	}
	f.markLines(l.stream, l.lines+1, l.lines+n)
	l.lines += n
}

// Lines is the number of lines in the pieces applied so far.
func (l *LogFeed) Lines() uint64 { return l.lines }

// Close records that every line of the log was read (only the candidates
// were parsed) and returns the number of lines.
func (l *LogFeed) Close() uint64 {
	l.f.markLines(l.stream, 1, l.lines)
	return l.lines
}

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

// ScanPiece searches a piece of a log (whole lines; the last may lack its
// newline) for the lines that can be relevant (see Parser.Relevant), into
// pc. It depends on nothing but its arguments, so pieces can be scanned
// in any order, on any goroutine: the lines it picks are a superset of
// those line-by-line application would find relevant, with debug telling
// whether -v markers are still wanted (LogFeed.WantDebug; true is always
// safe).
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
