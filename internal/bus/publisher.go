package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// ErrClosed is returned by Publish and Flush after Close.
var ErrClosed = errors.New("bus: publisher closed")

// Publisher publishes events to JetStream asynchronously, with a disk spool
// for when the broker is away (see the package documentation). Publish,
// Flush, Dropped, Stats, Connected and Close are safe for concurrent use.
//
// The Publisher is the front door: it hands each event to its pump
// (publisher_pump.go), the goroutine that sends the events, and, when the
// broker is away, spools them, drains the spool and holds the run events a
// full disk keeps out (publisher_spool.go). What is dropped is counted, in
// all and by run (publisher_drops.go); what the broker refused for good is
// set aside (publisher_rejected.go).
//
// Lock order: Publisher.mu, then pump.mu, then dropBook.mu. Publish takes
// pump.mu under mu (for reading), the pump takes dropBook.mu under its
// own; none of them is taken after one that comes later in the order.
type Publisher struct {
	nc   *nats.Conn
	dir  string // cfg.Dir()
	log  zerolog.Logger
	pump *pump

	// mu is held for reading while an entry is handed over to the pump,
	// for writing by Close. It comes first: pump.mu and dropBook.mu are
	// taken under it, it is never taken under them.
	mu      sync.RWMutex
	closed  bool
	left    Leftover      // set by Close
	closing chan struct{} // closed by Close: stop waiting to hand over
	abort   chan struct{} // closed when Close's ctx ends

	closeOnce sync.Once
	closeErr  error
}

// NewPublisher opens the spool in cfg.Dir() (draining what an earlier
// process left there) and starts publishing on nc, which it owns from then
// on (Close closes it); on error the caller keeps nc. nc must have no
// reconnect buffer (Connect makes such connections). The stream must exist
// or be created by someone else (EnsureStream); until it does, events are
// spooled.
func NewPublisher(nc *nats.Conn, cfg PublisherConfig, log zerolog.Logger) (*Publisher, error) {
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 500 * time.Millisecond
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = 8 << 20
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("publisher config: %w", err)
	}
	if nc.Opts.ReconnectBufSize >= 0 {
		return nil, errors.New("publisher: connection must have no reconnect buffer (nats.ReconnectBufSize(-1)); use bus.Connect")
	}
	log = log.With().Str("component", "publisher").Logger()
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncTimeout(cfg.NATS.AckTimeout),
		// Abandoned futures (after a failover) linger until they time
		// out; leave them room beyond our own bound.
		jetstream.WithPublishAsyncMaxPending(4*cfg.NATS.MaxInFlight+64),
	)
	if err != nil {
		return nil, fmt.Errorf("publisher: jetstream: %w", err)
	}
	dir := cfg.Dir()
	sp, err := openSpool(dir, cfg.Spool.MaxBytes, cfg.SegmentBytes, log)
	if err != nil {
		return nil, fmt.Errorf("publisher: %w", err)
	}
	p := &Publisher{
		nc: nc, dir: dir, log: log,
		closing: make(chan struct{}),
		abort:   make(chan struct{}),
	}
	p.pump = newPump(nc, js, sp, cfg, dir, log, p.closing, p.abort)
	if !sp.empty() {
		log.Info().Int64("spool_bytes", sp.bytes()).Msg("spool holds events from an earlier run, draining it first")
	}
	go p.pump.run()
	return p, nil
}

// Publish hands ev over for publishing and returns without waiting for the
// broker. ack, if not nil, is called once the event is durable (see the
// package documentation). Publish blocks while max_in_flight events are
// waiting, until ctx ends.
//
// While the broker is connected and nothing is spooled or handed over
// ahead of it, Publish sends the event itself and leaves only its ack to
// the publisher's goroutine; otherwise it hands the event to that
// goroutine, which sends or spools it in order.
func (p *Publisher) Publish(ctx context.Context, ev event.Event, ack func()) error {
	w, err := events.ToWire(ev)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	e := &entry{w: w, ack: ack}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	return p.pump.publish(ctx, e)
}

// Flush waits until every event handed to Publish before the call is
// durable (acknowledged by the broker or in the spool), or dropped.
func (p *Publisher) Flush(ctx context.Context) error {
	b := make(chan struct{})
	if err := p.handOver(ctx, &entry{barrier: b}); err != nil {
		return err
	}
	select {
	case <-b:
		return nil
	case <-p.pump.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Publisher) handOver(ctx context.Context, e *entry) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	return p.pump.handOver(ctx, e)
}

// Dropped returns how many events were dropped because the spool was full
// or the broker rejected them for good.
func (p *Publisher) Dropped() uint64 { return p.pump.n.dropped.Load() }

// Connected reports whether the publisher's connection to the broker is up.
func (p *Publisher) Connected() bool { return connected(p.nc) }

// Stats returns the publisher's counters.
func (p *Publisher) Stats() PublisherStats { return p.pump.n.stats() }

// DrainedRuns returns, by run (as its subject token, the run id of every
// valid run), how many spooled events the broker acknowledged: what a
// spool left by an earlier collector delivered.
func (p *Publisher) DrainedRuns() map[string]int { return p.pump.runs.drainedRuns() }

// DroppedOf returns how many events of the run runID were dropped (see
// Dropped): a spool left by an earlier run may hold events of other runs,
// whose drops are not this run's.
func (p *Publisher) DroppedOf(runID string) uint64 { return p.pump.runs.of(runID).events }

// RunLost reports whether the run-started or run-finished event of runID
// was dropped: then no consumer can ever close that run as it was.
func (p *Publisher) RunLost(runID string) bool { return p.pump.runs.of(runID).runEvents > 0 }

// Close stops accepting events, waits for those in flight and drains the
// spool while the broker is connected, all within ctx; then it writes what
// is still in flight to the spool, closes the spool and drains and closes
// the connection. It is idempotent.
func (p *Publisher) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		close(p.closing)
		p.mu.Lock()
		p.closed = true
		close(p.pump.in)
		p.mu.Unlock()
		select {
		case <-p.pump.done:
		case <-ctx.Done():
			close(p.abort)
			<-p.pump.done
		}
		sp := p.pump.sp // the pump returned: nothing else touches it
		left := Leftover{Events: sp.pending(), Bytes: sp.bytes(), Dir: p.dir}
		if left.Events == 0 {
			left.Bytes = 0
		}
		p.mu.Lock()
		p.left = left
		p.mu.Unlock()
		err := sp.close()
		p.closeErr = errors.Join(err, p.drainConn(ctx))
		st := p.Stats()
		p.log.Info().Uint64("published", st.Published).Uint64("spooled", st.Spooled).
			Uint64("drained", st.Drained).Uint64("dropped", st.Dropped).Int64("spool_bytes", st.SpoolBytes).Int("spool_events", left.Events).
			Msg("publisher closed")
	})
	return p.closeErr
}

// drainConn drains the connection and waits for it to close within ctx.
func (p *Publisher) drainConn(ctx context.Context) error {
	if p.nc.IsClosed() {
		return nil
	}
	if !connected(p.nc) {
		p.nc.Close()
		return nil
	}
	if err := p.nc.Drain(); err != nil {
		p.nc.Close()
		return nil
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !p.nc.IsClosed() {
		select {
		case <-ctx.Done():
			p.nc.Close()
			return nil
		case <-tick.C:
		}
	}
	return nil
}

// Leftover is what a closed Publisher left in its spool.
type Leftover struct {
	Events int    // events not delivered, waiting in the spool
	Bytes  int64  // their size on disk
	Dir    string // the spool directory
}

// Leftover returns what Close left in the spool (zero before Close): the
// next Publisher on the same directory delivers it first.
func (p *Publisher) Leftover() Leftover {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.left
}
