package procwrap

import (
	"bytes"
	"context"
	"io"
	"sync"
	"time"

	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/rs/zerolog"
)

// lineOverhead is what one buffered line costs besides its text.
const lineOverhead = 64

// lineQueue holds captured lines until the pump emits them. It owns the
// run's line counter. Producers (the two capture writers) never block on it.
type lineQueue struct {
	mu       sync.Mutex
	seq      uint64
	lines    []split.Line
	head     int
	bytes    int
	maxBytes int
	batch    int
	onLine   func([]byte)
	dropped  uint64
	closed   bool
	refused  bool
	notify   chan struct{}
}

func newLineQueue(maxBytes, batch int) *lineQueue {
	return &lineQueue{maxBytes: maxBytes, batch: batch, notify: make(chan struct{}, 1)}
}

// newLineQueueHook is newLineQueue with a hook called on every line as it
// is captured.
func newLineQueueHook(maxBytes, batch int, onLine func([]byte)) *lineQueue {
	q := newLineQueue(maxBytes, batch)
	q.onLine = onLine
	return q
}

func (q *lineQueue) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// addLocked numbers one line and buffers it, or counts it as dropped when
// the buffer is full. The caller holds q.mu.
func (q *lineQueue) addLocked(stream string, text []byte, now time.Time) {
	q.seq++
	if q.onLine != nil {
		q.onLine(text)
	}
	size := len(text) + lineOverhead
	if q.refused || q.closed || q.bytes+size > q.maxBytes {
		q.dropped++
		return
	}
	q.lines = append(q.lines, split.Line{Stream: stream, Seq: q.seq, Text: string(text), Time: now})
	q.bytes += size
	// Wake the pump when a batch may start (first line) or is full.
	if n := len(q.lines) - q.head; n == 1 || n == q.batch {
		q.wake()
	}
}

// take removes the next batch when one is due: batch lines are waiting, or
// the oldest waited batchDelay, or the queue is closed. Otherwise it returns
// how long until the oldest line is due (0: nothing waits). done reports a
// closed, empty queue.
func (q *lineQueue) take(batchDelay time.Duration, now time.Time) (batch []split.Line, wait time.Duration, done bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.lines) - q.head
	if n == 0 {
		return nil, 0, q.closed
	}
	if n < q.batch && !q.closed {
		if age := now.Sub(q.lines[q.head].Time); age < batchDelay {
			return nil, batchDelay - age, false
		}
	}
	n = min(n, q.batch)
	batch = make([]split.Line, n)
	copy(batch, q.lines[q.head:q.head+n])
	for i := q.head; i < q.head+n; i++ {
		q.bytes -= len(q.lines[i].Text) + lineOverhead
		q.lines[i] = split.Line{}
	}
	q.head += n
	switch {
	case q.head == len(q.lines):
		q.lines, q.head = q.lines[:0], 0
	case q.head >= 1024 && 2*q.head >= len(q.lines):
		q.lines = q.lines[:copy(q.lines, q.lines[q.head:])]
		q.head = 0
	}
	return batch, 0, false
}

// close marks the end of input: no more lines will be added.
func (q *lineQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wake()
}

// refuse stops capturing: waiting and future lines count as dropped, and
// so do the lost lines taken but not emitted.
func (q *lineQueue) refuse(lost int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refused = true
	q.dropped += uint64(len(q.lines)-q.head) + uint64(lost)
	clear(q.lines)
	q.lines, q.head, q.bytes = q.lines[:0], 0, 0
}

func (q *lineQueue) droppedLines() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}

func (q *lineQueue) lastSeq() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.seq
}

// capture is the io.Writer exec copies one of the child's streams into. It
// passes every chunk through unchanged, then splits it into lines.
type capture struct {
	q       *lineQueue
	stream  string
	out     io.Writer
	max     int
	log     zerolog.Logger
	outDead bool   // only touched by exec's copying goroutine of this stream
	partial []byte // guarded by q.mu
}

// Write never fails, so the child's output keeps flowing whatever happens
// to the passthrough writer or the downstream.
func (c *capture) Write(p []byte) (int, error) {
	if !c.outDead {
		if _, err := c.out.Write(p); err != nil {
			c.outDead = true
			c.log.Warn().Err(err).Str("stream", c.stream).Msg("passthrough failed; still capturing")
		}
	}
	now := time.Now()
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			c.appendPartialLocked(rest, now)
			break
		}
		if len(c.partial) == 0 && i <= c.max {
			c.q.addLocked(c.stream, rest[:i], now)
		} else {
			c.appendPartialLocked(rest[:i], now)
			c.q.addLocked(c.stream, c.partial, now)
			c.partial = c.partial[:0]
		}
		rest = rest[i+1:]
	}
	return len(p), nil
}

// appendPartialLocked adds b to the unfinished line, capturing max-sized
// pieces of an overlong line as they fill.
func (c *capture) appendPartialLocked(b []byte, now time.Time) {
	for len(c.partial)+len(b) > c.max {
		k := c.max - len(c.partial)
		c.partial = append(c.partial, b[:k]...)
		c.q.addLocked(c.stream, c.partial, now)
		c.partial = c.partial[:0]
		b = b[k:]
	}
	c.partial = append(c.partial, b...)
}

// flushLocked captures an unfinished last line. The caller holds q.mu.
func (c *capture) flushLocked() {
	if len(c.partial) > 0 {
		c.q.addLocked(c.stream, c.partial, time.Now())
		c.partial = nil
	}
}

// pump moves batches from the queue to the downstream. pending holds
// records taken but not yet accepted, so a failed emit can be retried under
// another context.
type pump struct {
	q          *lineQueue
	emit       sources.Emit
	batchLines int
	batchDelay time.Duration
	pending    []sources.Record
	timer      *time.Timer
}

// run emits until the queue is closed and empty (nil) or an emit fails or
// ctx is done (that error).
func (p *pump) run(ctx context.Context) error {
	defer func() {
		if p.timer != nil {
			p.timer.Stop()
		}
	}()
	for {
		for len(p.pending) > 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := p.emit(ctx, p.pending[0]); err != nil {
				return err
			}
			p.pending[0] = sources.Record{}
			p.pending = p.pending[1:]
		}
		batch, wait, done := p.q.take(p.batchDelay, time.Now())
		if done {
			return nil
		}
		if batch != nil {
			p.pending = byStream(batch)
			continue
		}
		var due <-chan time.Time
		if wait > 0 {
			if p.timer == nil {
				p.timer = time.NewTimer(wait)
			} else {
				p.timer.Reset(wait)
			}
			due = p.timer.C
		}
		select {
		case <-p.q.notify:
		case <-due:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pendingLines counts the lines taken from the queue but not yet emitted.
func (p *pump) pendingLines() int {
	n := 0
	for _, r := range p.pending {
		n += len(r.Lines)
	}
	return n
}

// byStream splits a batch into one record per stream, in the order of each
// stream's first line.
func byStream(batch []split.Line) []sources.Record {
	var recs []sources.Record
	idx := map[string]int{}
	for _, l := range batch {
		i, ok := idx[l.Stream]
		if !ok {
			i = len(recs)
			idx[l.Stream] = i
			recs = append(recs, sources.Record{})
		}
		recs[i].Lines = append(recs[i].Lines, l)
	}
	return recs
}
