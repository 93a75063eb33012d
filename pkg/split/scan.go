package split

import (
	"bytes"
	"io"
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
	lines := pc.Newlines()
	if len(piece) > 0 && piece[len(piece)-1] != '\n' {
		lines++ // the log's last line, without a newline
	}
	f.markLines(l.stream, l.lines+1, l.lines+lines)
	l.lines += lines
}

// Lines is the number of lines in the pieces applied so far.
func (l *LogFeed) Lines() uint64 { return l.lines }

// Close records that every line of the log was read (only the candidates
// were parsed) and returns the number of lines.
func (l *LogFeed) Close() uint64 {
	l.f.markLines(l.stream, 1, l.lines)
	return l.lines
}
