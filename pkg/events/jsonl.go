package events

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"
)

// MaxLineBytes is the longest line a Reader accepts; longer lines are
// counted and skipped with ErrLineTooLong.
const MaxLineBytes = 16 << 20

// Writer appends events to a recorded stream, one structured JSON event per
// line. Each line is written with a single Write call; after a failed write
// the next line starts on a fresh line, so a torn line never swallows a
// later event. A Writer is safe for concurrent use.
type Writer struct {
	mu     sync.Mutex
	w      io.Writer
	f      *os.File // set by OpenWriter
	buf    []byte
	needNL bool // the last write may have left a partial line
	closed bool
}

// NewWriter returns a Writer on w. Close does not close w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// OpenWriter opens (or creates) the recorded stream at path for appending.
// If the file ends in a partial line (a crash mid-write), the first event
// written starts on a new line; the partial line stays a bad line that a
// Reader counts and skips.
func OpenWriter(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open recorded stream: %w", err)
	}
	w := &Writer{w: f, f: f}
	needNL, err := endsMidLine(path)
	if err != nil {
		f.Close()
		return nil, err
	}
	w.needNL = needNL
	return w, nil
}

// endsMidLine reports whether the file at path is non-empty and does not
// end in a newline.
func endsMidLine(path string) (bool, error) {
	r, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("open recorded stream: %w", err)
	}
	defer r.Close()
	st, err := r.Stat()
	if err != nil {
		return false, fmt.Errorf("stat recorded stream: %w", err)
	}
	if st.Size() == 0 {
		return false, nil
	}
	var last [1]byte
	if _, err := r.ReadAt(last[:], st.Size()-1); err != nil {
		return false, fmt.Errorf("read recorded stream: %w", err)
	}
	return last[0] != '\n', nil
}

// Write validates ev and appends it as one line.
func (w *Writer) Write(ev event.Event) error {
	b, err := Marshal(ev)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.New("events: write to closed writer")
	}
	w.buf = w.buf[:0]
	if w.needNL {
		w.buf = append(w.buf, '\n')
	}
	w.buf = append(w.buf, b...)
	w.buf = append(w.buf, '\n')
	n, err := w.w.Write(w.buf)
	if err == nil && n < len(w.buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.needNL = n > 0 || w.needNL
		return fmt.Errorf("write recorded stream: %w", err)
	}
	w.needNL = false
	return nil
}

// Sync commits the file to stable storage when the Writer came from
// OpenWriter; otherwise it does nothing.
func (w *Writer) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil || w.closed {
		return nil
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("sync recorded stream: %w", err)
	}
	return nil
}

// Close closes the file opened by OpenWriter. It is idempotent.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if w.f == nil {
		return nil
	}
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("close recorded stream: %w", err)
	}
	return nil
}

// LineError is a line of a recorded stream that was not a valid event.
type LineError struct {
	Line int // 1-based
	Err  error
}

// Error implements error.
func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Unwrap returns the cause (wrapping ErrInvalid or ErrLineTooLong).
func (e *LineError) Unwrap() error { return e.Err }

// maxKeptErrors bounds Reader.Errors.
const maxKeptErrors = 100

// Reader reads a recorded stream event by event. A bad line (not JSON, not
// a valid CloudEvent, longer than MaxLineBytes) is counted, reported to
// OnError and skipped; blank lines are ignored. Reader checks the CloudEvent
// only; Decode checks the gttsplit type and payload.
//
//	r := events.NewReader(f)
//	for r.Next() {
//		ev := r.Event()
//		...
//	}
//	if err := r.Err(); err != nil { ... } // I/O error
//	skipped := r.Skipped()
type Reader struct {
	// OnError, when set, is called for each bad line.
	OnError func(*LineError)

	br      *bufio.Reader
	line    int
	ev      event.Event
	err     error
	skipped int
	errs    []*LineError
	buf     []byte
}

// NewReader returns a Reader on r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10)}
}

// Next advances to the next valid event. It returns false at the end of the
// input or on a read error (see Err).
func (r *Reader) Next() bool {
	for r.err == nil {
		line, tooLong, err := r.readLine()
		if err != nil && !errors.Is(err, io.EOF) {
			r.err = fmt.Errorf("read recorded stream: %w", err)
			return false
		}
		eof := err != nil
		if line == nil && !tooLong && eof {
			return false
		}
		r.line++
		switch {
		case tooLong:
			r.bad(fmt.Errorf("%w (over %d bytes)", ErrLineTooLong, MaxLineBytes))
		case len(bytes.TrimSpace(line)) == 0:
			// blank line: not an event, not an error
		default:
			ev, perr := Unmarshal(line)
			if perr == nil {
				r.ev = ev
				return true
			}
			r.bad(perr)
		}
		if eof {
			return false
		}
	}
	return false
}

// readLine returns the next line without its "\r\n" or "\n". A line longer
// than MaxLineBytes is consumed and reported as tooLong. At the end of the
// input it returns a nil line and io.EOF (or the final unterminated line and
// io.EOF).
func (r *Reader) readLine() (line []byte, tooLong bool, err error) {
	r.buf = nil // a fresh buffer per line: the parsed event may keep it
	for {
		chunk, err := r.br.ReadSlice('\n')
		if !tooLong {
			if len(r.buf)+len(chunk) > MaxLineBytes+2 {
				tooLong = true
				r.buf = nil
			} else {
				r.buf = append(r.buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(r.buf) == 0 && !tooLong {
				return nil, false, err
			}
			return trimEOL(r.buf), tooLong, err
		}
		return trimEOL(r.buf), tooLong, nil
	}
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

func (r *Reader) bad(err error) {
	le := &LineError{Line: r.line, Err: err}
	r.skipped++
	if len(r.errs) < maxKeptErrors {
		r.errs = append(r.errs, le)
	}
	if r.OnError != nil {
		r.OnError(le)
	}
}

// Event returns the event Next advanced to.
func (r *Reader) Event() event.Event { return r.ev }

// Line returns the 1-based line number of the current event.
func (r *Reader) Line() int { return r.line }

// Skipped returns how many bad lines were skipped so far.
func (r *Reader) Skipped() int { return r.skipped }

// Errors returns the first bad lines (at most 100) with their errors.
func (r *Reader) Errors() []*LineError { return r.errs }

// Err returns the read error that stopped Next, if any; bad lines are not
// errors of the Reader.
func (r *Reader) Err() error { return r.err }
