// Package gate implements the Write/Close lifecycle every sink shares:
// Write after Close fails with sinks.ErrClosed, Close waits for the writes
// in flight (bounded by its context) and releases resources exactly once.
package gate

import (
	"context"
	"sync"

	"github.com/gttsplit/gttsplit/pkg/sinks"
)

// Gate counts the calls in flight of one sink and closes it once.
type Gate struct {
	mu       sync.Mutex
	closed   bool
	inflight int
	release  func() error
	done     chan struct{} // closed after release ran
	err      error         // release's error
}

// New returns an open gate; release (may be nil) runs once after Close when
// no call is in flight.
func New(release func() error) *Gate {
	return &Gate{release: release, done: make(chan struct{})}
}

// Enter admits one call, or returns sinks.ErrClosed after Close. Every nil
// return must be paired with Exit.
func (g *Gate) Enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return sinks.ErrClosed
	}
	g.inflight++
	return nil
}

// Exit ends a call admitted by Enter.
func (g *Gate) Exit() {
	g.mu.Lock()
	g.inflight--
	last := g.closed && g.inflight == 0
	g.mu.Unlock()
	if last {
		g.finish()
	}
}

func (g *Gate) finish() {
	if g.release != nil {
		g.err = g.release()
	}
	close(g.done)
}

// Close stops admitting calls and waits until those in flight ended, then
// runs release and returns its error. If ctx ends first, Close returns ctx's
// error and release runs when the last call exits. Later calls wait for the
// release (or their ctx) and return nil.
func (g *Gate) Close(ctx context.Context) error {
	g.mu.Lock()
	first := !g.closed
	g.closed = true
	idle := g.inflight == 0
	g.mu.Unlock()
	if first && idle {
		g.finish()
		return g.err
	}
	select {
	case <-g.done:
		if first {
			return g.err
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
