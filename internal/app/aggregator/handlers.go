package aggregator

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
)

// Handlers runs a bus.Handler on several goroutines. The consumer hands a
// message over and goes on to the next one, so that up to n messages are
// decoded at a time (decoding is most of the cost of folding an event).
// The order in which events fold does not matter: a split is a function
// of the set of events.
type Handlers struct {
	ch  chan bus.Msg
	wg  sync.WaitGroup
	h   bus.Handler
	nak time.Duration
	log zerolog.Logger
	// failLog rate-limits the handler-failed warning.
	failLog bus.LogLimit
}

// DefaultHandlers is the number of handler goroutines Serve runs: two per
// CPU, so that messages are decoded while a flush holds the run table.
func DefaultHandlers() int { return 2 * runtime.GOMAXPROCS(0) }

// StartHandlers starts n goroutines calling h with a context that is not
// cancelled (as the consumer calls its handler). A handler error naks the
// message after nakDelay, as the consumer does. Close stops them.
func StartHandlers(ctx context.Context, n int, h bus.Handler, nakDelay time.Duration, log zerolog.Logger) *Handlers {
	p := &Handlers{ch: make(chan bus.Msg), h: h, nak: nakDelay, log: log}
	hctx := context.WithoutCancel(ctx)
	for range max(n, 1) {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for m := range p.ch {
				p.handle(hctx, m)
			}
		}()
	}
	return p
}

func (p *Handlers) handle(ctx context.Context, m bus.Msg) {
	if err := p.h(ctx, m); err != nil {
		md := m.Metadata()
		p.failLog.Event(p.log.Warn).Str("error", bus.Clip(err.Error(), 1024)).Str("subject", m.Subject()).Uint64("stream_seq", md.StreamSeq).
			Uint64("delivered", md.NumDelivered).Msg("handler failed, message will be redelivered")
		_ = m.NakWithDelay(p.nak)
	}
}

// Handle is the consumer's handler: it waits for a free goroutine and hands
// m to it. It must not be called after Close.
func (p *Handlers) Handle(_ context.Context, m bus.Msg) error {
	p.ch <- m
	return nil
}

// Close waits until every message handed over was handled, and stops the
// goroutines. Call it once, after the consumer returned.
func (p *Handlers) Close() {
	close(p.ch)
	p.wg.Wait()
}
