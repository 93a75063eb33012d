package split

import (
	"bytes"
	"io"
	"slices"
	"sync"

	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// chunkSize is how much of a log ReadLog searches at once.
const chunkSize = 1 << 18

// ReadLog applies a whole log to the fold, numbering its lines from 1 in
// stream. Only lines that contain one of the parser's anchors are visited:
// each chunk is searched for every anchor (see llamalog.Parser.ScanPiece)
// and the lines of the hits are handed to AddLineBytes, so the cost per
// irrelevant line is a share of a few memchr-speed passes, with no
// allocation. It returns the number of lines read.
//
// It is the sequential form of a LogFeed: a reader that scans pieces of a
// file on several goroutines and feeds them in order gives the same fold.
func (f *Fold) ReadLog(r io.Reader, stream string) (uint64, error) {
	return f.readLog(r, stream, chunkSize)
}

func (f *Fold) readLog(r io.Reader, stream string, size int) (uint64, error) {
	feed := f.NewLogFeed(stream)
	if _, err := feed.readFrom(r, size); err != nil {
		return feed.lines, err
	}
	return feed.Close(), nil
}

// ReadFrom applies what r holds, to its end, after the pieces applied so
// far: its lines are the log's next ones, and its last line counts even
// without a newline (so nothing may be applied after it). It returns the
// number of bytes read. It is what a reader that scanned the first part
// of a file in pieces applies the rest with (what was appended since,
// or a last line without its newline).
func (l *LogFeed) ReadFrom(r io.Reader) (int64, error) { return l.readFrom(r, chunkSize) }

func (l *LogFeed) readFrom(r io.Reader, size int) (int64, error) {
	// The buffer and candidate list of an earlier read: new ones are
	// zeroed and faulted in page by page, a cost a large log pays once
	// but many reads of small logs pay each time.
	rb := readBufs.Get().(*readBuf)
	defer readBufs.Put(rb)
	if wt, ok := r.(io.WriterTo); ok {
		if _, file := r.(interface{ Fd() uintptr }); !file {
			return l.writeFrom(wt, rb, size)
		}
	}
	pc := &rb.pc
	buf := rb.buf
	if size != chunkSize {
		buf = make([]byte, size)
	}
	var read int64
	carry := 0 // bytes of an unfinished line at buf[:carry]
	for {
		n, err := io.ReadFull(r, buf[carry:])
		read += int64(n)
		end := carry + n
		eof := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !eof {
			return read, err
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
		l.f.p.ScanPiece(chunk, l.WantDebug(), pc)
		l.Apply(chunk, pc)
		if eof {
			return read, nil
		}
		carry = copy(buf, buf[len(chunk):end])
	}
}

// writeFrom is readFrom of a reader that hands its bytes over itself
// (io.WriterTo: bytes in memory, a reader's own buffers): the whole lines
// of each write are scanned and applied where they are, at most size
// bytes a piece, and only a line that one write leaves open is copied, to
// be put together with the next. A file (which also has WriteTo, by
// copying through a small buffer) is read into the chunk buffer instead.
func (l *LogFeed) writeFrom(wt io.WriterTo, rb *readBuf, size int) (int64, error) {
	w := pieceWriter{l: l, pc: &rb.pc, size: size, open: rb.buf[:0]}
	n, err := wt.WriteTo(&w)
	if err != nil {
		return n, err
	}
	if len(w.open) > 0 {
		w.apply(w.open) // the last line, without its newline
	}
	return n, nil
}

// pieceWriter applies the log written to it (see writeFrom).
type pieceWriter struct {
	l    *LogFeed
	pc   *llamalog.Piece
	size int
	open []byte // the start of a line the writes so far left open
	str  []byte // WriteString's copy
}

func (w *pieceWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(w.open) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.open = append(w.open, p...)
			return n, nil
		}
		w.open = append(w.open, p[:i+1]...)
		w.apply(w.open)
		w.open, p = w.open[:0], p[i+1:]
	}
	for len(p) > 0 {
		// Whole lines, at most size bytes unless a line is longer.
		cut := bytes.LastIndexByte(p[:min(len(p), w.size)], '\n')
		if cut < 0 && len(p) > w.size {
			if cut = bytes.IndexByte(p[w.size:], '\n'); cut >= 0 {
				cut += w.size
			}
		}
		if cut < 0 {
			w.open = append(w.open, p...)
			break
		}
		w.apply(p[:cut+1])
		p = p[cut+1:]
	}
	return n, nil
}

// WriteString is Write of s copied a piece at a time (a strings.Reader
// hands over its whole string, which Write would need as one copy).
func (w *pieceWriter) WriteString(s string) (int, error) {
	n := len(s)
	for len(s) > 0 {
		k := min(len(s), w.size)
		w.str = append(w.str[:0], s[:k]...)
		_, _ = w.Write(w.str)
		s = s[k:]
	}
	return n, nil
}

func (w *pieceWriter) apply(piece []byte) {
	w.l.f.p.ScanPiece(piece, w.l.WantDebug(), w.pc)
	w.l.Apply(piece, w.pc)
}

// readBuf is what ReadLog reads with: a chunk buffer and a Piece. ReadLog
// keeps nothing of them.
type readBuf struct {
	buf []byte
	pc  llamalog.Piece
}

var readBufs = sync.Pool{New: func() any { return &readBuf{buf: make([]byte, chunkSize)} }}

// LogFeed applies a log to a fold piece by piece, in order. A piece is
// whole lines (only the log's last piece may end without a newline) that
// llamalog.Parser.ScanPiece searched, maybe on another goroutine and with
// another piece size: the fold comes out the same however the log is cut,
// the same as applying every line with AddLineBytes. A LogFeed is not safe
// for concurrent use (the fold is not); ScanPiece is.
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
func (l *LogFeed) Parser() *llamalog.Parser { return l.f.p }

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
func (l *LogFeed) Apply(piece []byte, pc *llamalog.Piece) {
	f := l.f
	before := f.st.Lines[l.stream] // unchanged until the piece is marked
	n := pc.Candidates()
	f.st.growRecords(n)
	for i := range n {
		s, nl, sure := pc.Candidate(i)
		e := bytes.IndexByte(piece[s:], '\n')
		if e < 0 {
			e = len(piece) - s
		}
		seq, line := l.lines+nl+1, piece[s:s+e]
		if before.has(seq) {
			continue
		}
		// A line the scan found one of the main anchors in is relevant;
		// any other (a -v marker's, a custom trace pattern's) is checked.
		if sure || f.p.Relevant(line, f.st.DebugSeq == 0) {
			f.addRelevant(l.stream, seq, line)
		}
	}
	l.markPiece(piece, pc)
}

// markPiece enters the piece's lines in the fold's line set.
func (l *LogFeed) markPiece(piece []byte, pc *llamalog.Piece) {
	lines := pc.Newlines()
	if len(piece) > 0 && piece[len(piece)-1] != '\n' {
		lines++ // the log's last line, without a newline
	}
	l.f.markLines(l.stream, l.lines+1, l.lines+lines)
	l.lines += lines
}

// PieceRecords is a piece's candidate lines parsed ahead of the fold
// (ParsePiece), for LogFeed.ApplyParsed. Its zero value is ready to use; a
// PieceRecords serves one goroutine at a time and may be reused for the
// next piece.
type PieceRecords struct {
	lp     lineParser
	names  *nameCache
	cands  []pieceLine
	parsed []parsedLine
}

// pieceLine is one candidate line of a piece, piece[start:end] after nl
// newlines: whether it is relevant while the fold looks for -v markers
// (relDebug) and once it no longer does (rel), and the index of its parse
// in parsed (-1: not parsed, or it gave no record).
type pieceLine struct {
	nl            uint64
	start, end    int
	relDebug, rel bool
	parsed        int
}

// ParsePiece parses the candidate lines of a piece that ScanPiece scanned
// into pc, with p (the feed's Parser), into pr: everything of folding a
// line that depends on the line alone. It touches no fold, so a reader may
// run it on the goroutine that scanned the piece, and leave only
// ApplyParsed to the one that applies the pieces in order. A line that is
// relevant only while the fold looks for -v markers (a scan made while it
// did) is left to ApplyParsed, which folds it only if the fold still
// does: the fold stops looking at its first marker.
func ParsePiece(p *llamalog.Parser, piece []byte, pc *llamalog.Piece, pr *PieceRecords) {
	if pr.names == nil {
		pr.names = new(nameCache)
	}
	n := pc.Candidates()
	pr.cands = slices.Grow(pr.cands[:0], n)[:n]
	pr.parsed = pr.parsed[:0]
	for i := range n {
		s, nl, sure := pc.Candidate(i)
		e := bytes.IndexByte(piece[s:], '\n')
		if e < 0 {
			e = len(piece) - s
		}
		line := piece[s : s+e]
		c := &pr.cands[i]
		*c = pieceLine{nl: nl, start: s, end: s + e, parsed: -1}
		// A line the scan found one of the main anchors in is relevant;
		// any other (a -v marker's, a custom trace pattern's) is checked,
		// for both states of the fold's look for -v markers (a line
		// relevant without them is relevant with them).
		c.rel = sure || p.Relevant(line, false)
		c.relDebug = c.rel || p.Relevant(line, true)
		if c.rel && pr.lp.parse(p, nl, line, pr.names) {
			c.parsed = len(pr.parsed)
			pr.parsed = append(pr.parsed, pr.lp.out)
		}
	}
}

// ApplyParsed is Apply of a piece whose candidate lines ParsePiece parsed
// into pr: the same fold, with only the folding of the parsed lines left
// to do.
func (l *LogFeed) ApplyParsed(piece []byte, pc *llamalog.Piece, pr *PieceRecords) {
	f := l.f
	before := f.st.Lines[l.stream] // unchanged until the piece is marked
	f.st.growRecords(len(pr.parsed))
	for i := range pr.cands {
		c := &pr.cands[i]
		seq := l.lines + c.nl + 1
		if before.has(seq) {
			continue
		}
		switch {
		case c.rel:
			if c.parsed >= 0 {
				pl := &pr.parsed[c.parsed]
				pl.r.Seq = seq
				f.foldParsed(l.stream, seq, pl)
			}
		case c.relDebug && f.st.DebugSeq == 0:
			f.addRelevant(l.stream, seq, piece[c.start:c.end])
		}
	}
	l.markPiece(piece, pc)
}

// Lines is the number of lines in the pieces applied so far.
func (l *LogFeed) Lines() uint64 { return l.lines }

// Close records that every line of the log was read (only the candidates
// were parsed) and returns the number of lines.
func (l *LogFeed) Close() uint64 {
	l.f.markLines(l.stream, 1, l.lines)
	return l.lines
}
