package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/gttsplit/gttsplit/pkg/conf"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// ErrClosed is returned by Publish and Flush after Close.
var ErrClosed = errors.New("bus: publisher closed")

// maxHeadAttempts is how often a spooled event may be answered with a
// server error before it is dropped.
const maxHeadAttempts = 5

// maxRetryInterval caps the backoff between drain attempts.
const maxRetryInterval = 10 * time.Second

// maxPatience caps how often a slow broker doubles the ack timeout (to
// 8 × AckTimeout).
const maxPatience = 3

// PublisherConfig is what NewPublisher needs: the keys it reads, and what
// the program decides.
type PublisherConfig struct {
	// NATS gives MaxInFlight, the bound on the events awaiting the
	// broker's ack, and AckTimeout, how long one may await it before it
	// counts as lost and goes to the spool.
	NATS Config
	// Spool gives the spools' directory and MaxBytes.
	Spool SpoolConfig
	// Name is this publisher's spool, a directory of Spool.Root() (the
	// collector's lane); "" is Spool.Root() itself. One publisher at a
	// time uses a spool.
	Name string
	// BackPressure, when positive, makes an ack timeout while the
	// connection is up what it is, a slow broker, for that long: the
	// events in flight are sent again (same ids, so a copy the broker
	// already stored is dropped as a duplicate) and waited for longer,
	// and Publish blocks meanwhile, instead of going to the spool. A
	// replay, which has no source to hold up, sets it to its shutdown
	// timeout. Zero spools them at once (run and attach: a child's or a
	// log's output is never held up).
	BackPressure time.Duration
	// RetryInterval is how often the publisher looks for the broker while
	// events are spooled; after failed attempts it backs off up to 10s.
	// Zero is 500ms.
	RetryInterval time.Duration
	// SegmentBytes is the size at which the spool starts a new segment
	// file. Zero is 8 MiB.
	SegmentBytes int64
}

// DefaultPublisherConfig returns the keys' defaults.
func DefaultPublisherConfig() PublisherConfig {
	return PublisherConfig{NATS: DefaultConfig(), Spool: DefaultSpoolConfig()}
}

// Dir is the publisher's spool directory.
func (c PublisherConfig) Dir() string { return filepath.Join(c.Spool.Root(), c.Name) }

// validate checks the keys the publisher reads (their sections' Validate).
func (c PublisherConfig) validate() error {
	var errs []error
	for _, fe := range conf.Within("nats", c.NATS.Validate()) {
		errs = append(errs, fe)
	}
	for _, fe := range conf.Within("spool", c.Spool.Validate()) {
		errs = append(errs, fe)
	}
	return errors.Join(errs...)
}

// PublisherStats counts what happened to the events handed to Publish.
type PublisherStats struct {
	Published    uint64 // acknowledged by the broker when sent directly
	Spooled      uint64 // written to the spool
	Drained      uint64 // spooled events later acknowledged by the broker
	Dropped      uint64 // neither delivered nor spooled (see Dropped)
	Rejected     uint64 // of Dropped: refused by the broker, set aside in RejectedDir
	SpoolBytes   int64  // size of the spool on disk
	SpoolCorrupt uint64 // corrupt or torn spool records cut off
}

// Publisher publishes events to JetStream asynchronously, with a disk spool
// for when the broker is away (see the package documentation). Publish,
// Flush, Dropped, Stats, Connected and Close are safe for concurrent use.
type Publisher struct {
	nc *nats.Conn
	js jetstream.JetStream
	// slow are JetStream contexts with longer ack timeouts (AckTimeout
	// doubled once, twice, ...), made when a slow broker needs them; under
	// sm.
	slow [maxPatience]jetstream.JetStream
	cfg  PublisherConfig
	dir  string // cfg.Dir()
	log  zerolog.Logger
	sp   *spool

	// mu is held for reading while an entry is handed over. Lock order:
	// mu, then sm, then dropMu (Publish takes sm under mu, the pump
	// dropMu under sm); mu must not be taken after sm or dropMu.
	mu      sync.RWMutex
	closed  bool
	in      chan *entry
	kick    chan struct{} // Publish put the first entry in flight: look at it
	closing chan struct{} // closed by Close: stop waiting to hand over
	abort   chan struct{} // closed when Close's ctx ends
	done    chan struct{} // closed when the pump returned

	// sm guards the pump's state, which Publish's direct path shares:
	// the pump holds it while it acts, never while it waits. sm must not
	// be taken after dropMu.
	sm     sync.Mutex
	st     *pump
	queued int           // entries handed over on in, not yet taken
	direct uint64        // events Publish sent itself (for tests)
	room   chan struct{} // closed when a direct Publish waiting for room may retry

	closeOnce sync.Once
	closeErr  error

	published, spooled, drained, dropped, corrupt, rejected atomic.Uint64
	spoolBytes, rejectedBytes                               atomic.Int64
	dropLog                                                 LogLimit
	slowLog                                                 LogLimit // the slow broker's warning (Every: a minute)
	left                                                    Leftover // set by Close, under mu
	// dropMu is taken last: nothing is locked while it is held.
	dropMu      sync.Mutex
	dropRuns    map[string]runDrops // by run token
	drainedRuns map[string]int      // by run token, under dropMu
}

// entry is one event (or a Flush barrier) on its way.
type entry struct {
	w       events.Wire
	ack     func()
	barrier chan struct{} // set for a Flush marker
	fut     jetstream.PubAckFuture
	fromSp  bool                     // read from the spool
	pos     spoolPos                 // spool position after this record (fromSp)
	dropped error                    // resolved: rejected for good, with this error
	okc     <-chan *jetstream.PubAck // fut's, once asked (results)
	errc    <-chan error
}

// results returns the channels of the entry's future; each call of
// the future's own methods takes the client's lock.
func (e *entry) results() (<-chan *jetstream.PubAck, <-chan error) {
	if e.okc == nil {
		e.okc, e.errc = e.fut.Ok(), e.fut.Err()
	}
	return e.okc, e.errc
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
		nc: nc, js: js, cfg: cfg, dir: dir, log: log, sp: sp,
		in:      make(chan *entry, cfg.NATS.MaxInFlight),
		kick:    make(chan struct{}, 1),
		closing: make(chan struct{}),
		abort:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	p.st = &pump{spooling: !sp.empty(), backoff: cfg.RetryInterval, window: 1}
	p.slowLog.Every = time.Minute
	p.corrupt.Store(uint64(sp.corrupt))
	p.spoolBytes.Store(sp.bytes())
	p.rejectedBytes.Store(dirBytes(filepath.Join(dir, RejectedDir)))
	if !sp.empty() {
		log.Info().Int64("spool_bytes", sp.bytes()).Msg("spool holds events from an earlier run, draining it first")
	}
	go p.run()
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
	for {
		p.sm.Lock()
		st := p.st
		if st.spooling || p.queued > 0 || !p.nc.IsConnected() {
			break // the pump sends, spools or fails over, in order
		}
		if len(st.inflight) >= st.window {
			// Wait for room: for the pump to make some, or for the
			// head's ack, which Publish then settles itself (one
			// wake-up less on the way back to sending).
			if p.room == nil {
				p.room = make(chan struct{})
			}
			room := p.room
			head := st.inflight[0]
			var okc <-chan *jetstream.PubAck
			if head.fut != nil {
				okc, _ = head.results()
			}
			p.sm.Unlock()
			select {
			case <-room:
			case <-okc:
				p.sm.Lock()
				if len(st.inflight) > 0 && st.inflight[0] == head {
					p.headAcked(st)
					p.settleAcked(st)
					p.wakeRoom(st)
				} // else: failed over meanwhile, the event is in the spool
				p.sm.Unlock()
				// The pump calls the acks that came due, and waits on
				// the new head.
				p.kickPump()
			case <-p.closing:
				return ErrClosed
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		fut, err := p.send(w)
		if err != nil {
			break // not sent: the pump tries again and fails over or drops
		}
		e.fut = fut
		p.direct++
		st.inflight = append(st.inflight, e)
		first := len(st.inflight) == 1
		p.sm.Unlock()
		if first {
			p.kickPump()
		}
		return nil
	}
	p.queued++
	p.sm.Unlock()
	return p.handOverQueued(ctx, e)
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
	case <-p.done:
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
	p.sm.Lock()
	p.queued++
	p.sm.Unlock()
	return p.handOverQueued(ctx, e)
}

// handOverQueued sends e, counted in queued, to the pump; under mu for
// reading.
func (p *Publisher) handOverQueued(ctx context.Context, e *entry) error {
	var err error
	select {
	case p.in <- e:
		return nil
	case <-p.closing:
		err = ErrClosed
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.sm.Lock()
	p.queued--
	p.sm.Unlock()
	return err
}

// Dropped returns how many events were dropped because the spool was full
// or the broker rejected them for good.
func (p *Publisher) Dropped() uint64 { return p.dropped.Load() }

// Connected reports whether the publisher's connection to the broker is up.
func (p *Publisher) Connected() bool { return p.nc.IsConnected() }

// Stats returns the publisher's counters.
func (p *Publisher) Stats() PublisherStats {
	return PublisherStats{
		Published:    p.published.Load(),
		Spooled:      p.spooled.Load(),
		Drained:      p.drained.Load(),
		Dropped:      p.dropped.Load(),
		Rejected:     p.rejected.Load(),
		SpoolBytes:   p.spoolBytes.Load(),
		SpoolCorrupt: p.corrupt.Load(),
	}
}

// Close stops accepting events, waits for those in flight and drains the
// spool while the broker is connected, all within ctx; then it writes what
// is still in flight to the spool, closes the spool and drains and closes
// the connection. It is idempotent.
func (p *Publisher) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		close(p.closing)
		p.mu.Lock()
		p.closed = true
		close(p.in)
		p.mu.Unlock()
		select {
		case <-p.done:
		case <-ctx.Done():
			close(p.abort)
			<-p.done
		}
		left := Leftover{Events: p.sp.pending(), Bytes: p.sp.bytes(), Dir: p.dir}
		if left.Events == 0 {
			left.Bytes = 0
		}
		p.mu.Lock()
		p.left = left
		p.mu.Unlock()
		err := p.sp.close()
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
	if !p.nc.IsConnected() {
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

// pump is the state of the publisher's goroutine, under Publisher.sm:
// run acts on it; Publish's direct path appends to inflight and, waiting
// for room, settles the head's ack (the pump calls the callbacks).
type pump struct {
	spooling bool     // events go to the spool (it is not empty)
	inflight []*entry // in publish order
	// window bounds inflight: 1 until the first ack after a start or a
	// failure, max_in_flight after. A failure that hits one event but not
	// the next (no responders while the stream is being created or
	// recovered) would otherwise let a later event overtake it.
	window   int
	inClosed bool
	aborted  bool
	nextTry  time.Time
	backoff  time.Duration
	headErrs int // server errors in a row for the spool's first record
	// patience is how often the ack timeout was doubled for a broker that
	// answered late while connected (0: AckTimeout); it stays raised.
	patience int
	// slowSince is when the acks of a slow broker began to time out (zero
	// while they come in time): BackPressure counts from it.
	slowSince  time.Time
	fullStreak bool // the spool was full and has not accepted since
	fullDrops  uint64
	// held are run events (start, finish) that a full disk kept out of
	// the spool even with its reserve: kept in memory, in order, and
	// tried again (the spool first, the broker directly once the spool
	// is empty) until they are durable or the publisher closes.
	held      []*entry
	heldTry   time.Time // when the spool was last tried for them
	acks      []func()  // ack callbacks and barrier releases due, called by run outside sm, in order
	spareAcks []func()  // the pump's other acks buffer (not under sm)
}

func (p *Publisher) run() {
	defer close(p.done)
	st := p.st
	tick := time.NewTicker(p.cfg.RetryInterval)
	defer tick.Stop()
	for {
		p.sm.Lock()
		p.resolveMarkers(st)
		if st.spooling {
			p.fill(st)
			p.resolveMarkers(st)
		}
		if len(st.held) > 0 && time.Since(st.heldTry) >= p.cfg.RetryInterval {
			p.toSpool(st, nil) // room on the disk again?
		}
		if st.aborted {
			p.abandon(st)
			p.loseHeld(st)
			p.unlockPump(st)
			return
		}
		if st.inClosed && len(st.inflight) == 0 &&
			(!st.spooling || (p.sp.empty() && len(st.held) == 0) || !p.nc.IsConnected()) {
			p.loseHeld(st)
			p.unlockPump(st)
			return
		}
		var in <-chan *entry
		if !st.inClosed && (st.spooling || len(st.inflight) < st.window) {
			in = p.in
		}
		var okc <-chan *jetstream.PubAck
		var errc <-chan error
		if len(st.inflight) > 0 {
			okc, errc = st.inflight[0].results()
		}
		p.unlockPump(st)
		select {
		case e, ok := <-in:
			p.sm.Lock()
			if !ok {
				st.inClosed = true
			} else {
				p.queued--
				p.accept(st, e)
				p.acceptMore(st)
			}
			p.unlockPump(st)
		case <-okc:
			p.sm.Lock()
			p.headAcked(st)
			p.settleAcked(st)
			p.unlockPump(st)
		case err := <-errc:
			p.sm.Lock()
			p.headFailed(st, err)
			p.unlockPump(st)
		case <-p.kick:
		case <-tick.C:
		case <-p.abort:
			p.sm.Lock()
			st.aborted = true
			p.sm.Unlock()
		}
	}
}

// release closes a Flush barrier after the ack callbacks due before it.
func (st *pump) release(b chan struct{}) {
	st.acks = append(st.acks, func() { close(b) })
}

// unlockPump wakes the direct Publish calls waiting for room (wakeRoom),
// releases sm, then calls the ack callbacks that came due, in order. Only
// run calls it.
func (p *Publisher) unlockPump(st *pump) {
	p.wakeRoom(st)
	acks := st.acks
	st.acks, st.spareAcks = st.spareAcks, nil
	p.sm.Unlock()
	for i, ack := range acks {
		ack()
		acks[i] = nil
	}
	st.spareAcks = acks[:0] // only the pump touches it
}

// wakeRoom lets the direct Publish calls that wait for room retry when
// there may be room (or they must hand over); under sm.
func (p *Publisher) wakeRoom(st *pump) {
	if p.room != nil && (st.spooling || st.inClosed || len(st.inflight) < st.window) {
		close(p.room)
		p.room = nil
	}
}

// kickPump wakes the pump to look at its state again.
func (p *Publisher) kickPump() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// acceptMore takes, without waiting, what else was handed over while the
// window has room in direct mode: one wake-up of the pump for many events.
func (p *Publisher) acceptMore(st *pump) {
	for !st.inClosed && !st.spooling && len(st.inflight) < st.window {
		select {
		case e, ok := <-p.in:
			if !ok {
				st.inClosed = true
				return
			}
			p.queued--
			p.accept(st, e)
		default:
			return
		}
	}
}

// settleAcked handles, without waiting, the acks already there for the
// entries after the head (the broker acks in batches).
func (p *Publisher) settleAcked(st *pump) {
	for {
		p.resolveMarkers(st)
		if len(st.inflight) == 0 {
			return
		}
		okc, errc := st.inflight[0].results()
		select {
		case <-okc:
			p.headAcked(st)
		case err := <-errc:
			p.headFailed(st, err)
			return
		default:
			return
		}
	}
}

// resolveMarkers pops the barriers and dropped entries at the head.
func (p *Publisher) resolveMarkers(st *pump) {
	for len(st.inflight) > 0 && st.inflight[0].fut == nil {
		e := st.inflight[0]
		st.inflight = st.inflight[1:]
		switch {
		case e.barrier != nil:
			st.release(e.barrier)
		case e.dropped != nil:
			// Counted when it reaches the head, so a re-read after an
			// interrupted drain does not count it twice.
			p.drop(e.w, e.dropped)
			p.commit(st, e.pos)
		}
	}
}

// accept takes one entry from Publish or Flush.
func (p *Publisher) accept(st *pump, e *entry) {
	if e.barrier != nil {
		if !st.spooling && len(st.inflight) > 0 {
			st.inflight = append(st.inflight, e)
		} else {
			st.release(e.barrier) // everything before it is durable already
		}
		return
	}
	if st.spooling {
		batch := []*entry{e}
		// Take what else is waiting, to sync the spool once for all.
	more:
		for len(batch) < p.cfg.NATS.MaxInFlight {
			select {
			case e2, ok := <-p.in:
				if !ok {
					st.inClosed = true
					break more
				}
				p.queued--
				batch = append(batch, e2)
			default:
				break more
			}
		}
		p.toSpool(st, batch)
		return
	}
	if !p.nc.IsConnected() {
		p.failover(st, e, nats.ErrDisconnected)
		return
	}
	fut, err := p.send(e.w)
	switch {
	case err == nil:
		e.fut = fut
		st.inflight = append(st.inflight, e)
	case permanent(err):
		p.drop(e.w, err)
	default:
		p.failover(st, e, err)
	}
}

// send publishes one event asynchronously, waiting for its ack as long as
// the broker's patience level says; under sm.
func (p *Publisher) send(w events.Wire) (jetstream.PubAckFuture, error) {
	// The header as Header.Set and WithMsgID write it (the keys are in
	// canonical form), in one map.
	msg := &nats.Msg{Subject: w.Subject, Data: w.Data, Header: nats.Header{
		"Content-Type":        structuredContentType,
		jetstream.MsgIDHeader: {w.ID},
	}}
	js := p.js
	if k := p.st.patience; k > 0 {
		if p.slow[k-1] == nil {
			var err error
			p.slow[k-1], err = jetstream.New(p.nc,
				jetstream.WithPublishAsyncTimeout(p.cfg.NATS.AckTimeout<<k),
				jetstream.WithPublishAsyncMaxPending(4*p.cfg.NATS.MaxInFlight+64))
			if err != nil {
				return nil, err
			}
		}
		js = p.slow[k-1]
	}
	return js.PublishMsgAsync(msg, noRetries)
}

// structuredContentType is the Content-Type header's value (shared: a
// header's values are only read).
var structuredContentType = []string{events.StructuredContentType}

// noRetries: no retries inside nats.go on "no responders": a retried
// event would land after the ones sent meanwhile. The pump retries, in
// order.
var noRetries = jetstream.WithRetryAttempts(0)

// headAcked handles the broker's ack of the first entry in flight.
func (p *Publisher) headAcked(st *pump) {
	e := st.inflight[0]
	st.inflight = st.inflight[1:]
	st.backoff = p.cfg.RetryInterval
	st.slowSince = time.Time{}
	if st.patience > 0 {
		// A broker that was slow gets its room back one event at a time.
		st.window = min(st.window+1, p.cfg.NATS.MaxInFlight)
	} else {
		st.window = p.cfg.NATS.MaxInFlight
	}
	if e.fromSp {
		st.headErrs = 0
		p.drained.Add(1)
		p.noteDrained(e.w)
		p.commit(st, e.pos)
		return
	}
	p.published.Add(1)
	if e.ack != nil {
		st.acks = append(st.acks, e.ack)
	}
}

// headFailed handles a failed publish of the first entry in flight.
func (p *Publisher) headFailed(st *pump, err error) {
	e := st.inflight[0]
	slow := errors.Is(err, jetstream.ErrAsyncPublishTimeout) && p.nc.IsConnected()
	if slow && st.patience < maxPatience {
		// Connected, and the ack is late: the broker is slow, not away.
		// Later sends (the spool's drain included) wait longer.
		st.patience++
	}
	if slow && p.waitSlow(st, err) {
		return
	}
	if permanent(err) {
		st.inflight = st.inflight[1:]
		p.drop(e.w, err)
		if e.fromSp {
			p.commit(st, e.pos)
		}
		return
	}
	if !e.fromSp {
		// Direct mode: this event and every one after it go to the spool.
		rest := st.inflight
		st.inflight = nil
		p.failoverAll(st, rest, err)
		return
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && !StoreFull(err) {
		// A full store is the broker being unavailable for a while: it is
		// tried again for as long as it lasts, never set aside.
		st.headErrs++
		if st.headErrs >= maxHeadAttempts {
			st.headErrs = 0
			st.inflight = st.inflight[1:]
			p.drop(e.w, err)
			p.commit(st, e.pos)
		}
	}
	p.stopDrain(st, err)
}

// waitSlow takes a late ack of a connected broker as back-pressure when
// BackPressure allows (for that long since acks began to be late): every
// event in flight is sent again (the broker drops a copy it has as a
// duplicate) and waited for at the raised patience, and the window shrinks
// so that Publish waits. It reports whether it did; else the head fails
// as before (to the spool).
func (p *Publisher) waitSlow(st *pump, err error) bool {
	if p.cfg.BackPressure <= 0 {
		return false
	}
	now := time.Now()
	if st.slowSince.IsZero() {
		st.slowSince = now
		if ev := p.slowLog.Event(p.log.Warn); ev != nil {
			ev.Err(err).Int("in_flight", len(st.inflight)).Dur("ack_timeout", p.cfg.NATS.AckTimeout<<st.patience).
				Msg("the broker is slow (acks late while connected): sending again and waiting for it rather than spooling")
		}
	} else if now.Sub(st.slowSince) > p.cfg.BackPressure {
		return false
	}
	for _, e := range st.inflight {
		if e.fut == nil {
			continue // a barrier or an entry resolved as dropped
		}
		fut, serr := p.send(e.w)
		if serr != nil {
			return false
		}
		e.fut, e.okc, e.errc = fut, nil, nil
	}
	st.window = max(1, len(st.inflight)/2)
	return true
}

// fill sends spooled events while the broker is connected, and the held
// run events once the spool is empty.
func (p *Publisher) fill(st *pump) {
	if st.aborted || time.Now().Before(st.nextTry) || !p.nc.IsConnected() {
		return
	}
	if len(st.held) > 0 && p.sp.empty() && len(st.inflight) == 0 {
		// The disk is still full, the broker is there: send them
		// directly (a failure puts them back).
		held := st.held
		st.held = nil
		for i, e := range held {
			fut, err := p.send(e.w)
			if err != nil {
				st.held = append(st.held, held[i:]...)
				st.nextTry = time.Now().Add(st.backoff)
				return
			}
			e.fut, e.okc, e.errc = fut, nil, nil
			st.inflight = append(st.inflight, e)
		}
		return
	}
	for len(st.inflight) < st.window {
		w, pos, ok := p.sp.next()
		p.corrupt.Store(uint64(p.sp.corrupt))
		if !ok {
			break
		}
		fut, err := p.send(w)
		switch {
		case err == nil:
			st.inflight = append(st.inflight, &entry{w: w, fut: fut, fromSp: true, pos: pos})
		case permanent(err):
			st.inflight = append(st.inflight, &entry{w: w, fromSp: true, pos: pos, dropped: err})
		default:
			p.stopDrain(st, err)
			return
		}
	}
	if p.sp.empty() && len(st.inflight) == 0 && len(st.held) == 0 {
		p.backToDirect(st)
	}
}

// stopDrain forgets the spooled events in flight (they stay in the spool)
// and backs off before the next attempt.
func (p *Publisher) stopDrain(st *pump, err error) {
	st.inflight = st.inflight[:0]
	st.window = 1
	p.sp.rewind()
	st.nextTry = time.Now().Add(st.backoff)
	p.log.Debug().Err(err).Dur("retry_in", st.backoff.Round(time.Millisecond)).Msg("spool drain interrupted")
	st.backoff = min(2*st.backoff, maxRetryInterval)
}

// commit acknowledges spooled records up to pos.
func (p *Publisher) commit(st *pump, pos spoolPos) {
	if err := p.sp.commit(pos); err != nil {
		p.log.Error().Err(err).Msg("spool bookkeeping failed")
	}
	p.spoolBytes.Store(p.sp.bytes())
	if st.spooling && p.sp.empty() && len(st.inflight) == 0 && len(st.held) == 0 {
		p.backToDirect(st)
	}
}

func (p *Publisher) backToDirect(st *pump) {
	st.spooling = false
	st.headErrs = 0
	st.backoff = p.cfg.RetryInterval
	p.log.Info().Uint64("drained", p.drained.Load()).Msg("spool drained, publishing directly")
}

// failover switches to spooling with one more entry after those in flight.
func (p *Publisher) failover(st *pump, e *entry, err error) {
	rest := st.inflight
	st.inflight = nil
	p.failoverAll(st, append(rest, e), err)
}

// failoverAll writes entries (in order) to the spool and switches to
// spooling.
func (p *Publisher) failoverAll(st *pump, entries []*entry, err error) {
	st.spooling = true
	st.window = 1
	st.nextTry = time.Now().Add(st.backoff)
	p.log.Warn().Err(err).Int("in_flight", len(entries)).Msg("broker unavailable, spooling events")
	p.toSpool(st, entries)
}

// toSpool appends entries to the spool, after the held run events, syncs
// once, then acks them and releases the barriers among them, in order. A
// run event a full disk keeps out is held (see pump.held); a barrier is
// released all the same.
func (p *Publisher) toSpool(st *pump, entries []*entry) {
	if len(st.held) > 0 {
		entries = append(st.held[:len(st.held):len(st.held)], entries...)
		st.held = nil
		st.heldTry = time.Now()
	}
	written := make([]bool, len(entries))
	for i, e := range entries {
		if e.barrier != nil {
			continue
		}
		run := isRunEvent(e.w)
		err := p.sp.append(e.w, run)
		switch {
		case err == nil:
			written[i] = true
			if st.fullStreak {
				st.fullStreak = false
				p.log.Info().Uint64("dropped", st.fullDrops).Msg("spool accepts events again")
			}
		case errors.Is(err, errDiskFull) && run:
			st.held = append(st.held, e)
			p.spoolRefused(st, err, false)
		case errors.Is(err, errSpoolFull), errors.Is(err, errDiskFull):
			p.countDrop(e.w)
			p.spoolRefused(st, err, true)
		default:
			p.countDrop(e.w)
			p.log.Error().Err(err).Str("id", Clip(e.w.ID, 256)).Msg("cannot spool event, dropped")
		}
	}
	if err := p.sp.sync(); err != nil {
		// Not durable after all: do not ack (the source keeps its
		// position); a run event is held, the others are dropped.
		p.log.Error().Err(err).Msg("cannot sync spool")
		for i := range written {
			if written[i] {
				written[i] = false
				if isRunEvent(entries[i].w) {
					st.held = append(st.held, entries[i])
				} else {
					p.countDrop(entries[i].w)
				}
			}
		}
	}
	p.spoolBytes.Store(p.sp.bytes())
	for i, e := range entries {
		switch {
		case e.barrier != nil:
			st.release(e.barrier)
		case written[i]:
			p.spooled.Add(1)
			if e.ack != nil {
				st.acks = append(st.acks, e.ack)
			}
		}
	}
}

// spoolRefused counts an event the spool did not take (dropped, or a run
// event held) and says so once per episode: until the spool takes an
// event again.
func (p *Publisher) spoolRefused(st *pump, err error, dropped bool) {
	if dropped {
		st.fullDrops++
	}
	if st.fullStreak {
		return
	}
	st.fullStreak = true
	st.fullDrops = 0
	if dropped {
		st.fullDrops = 1
	}
	if errors.Is(err, errDiskFull) {
		p.log.Warn().Err(err).Str("spool", p.dir).
			Msg("spool disk full, dropping new events until there is room or the broker is back; run starts and finishes go to the spool's reserve, else are kept in memory")
		return
	}
	p.log.Warn().Int64("max_bytes", p.cfg.Spool.MaxBytes).
		Msg("spool full, dropping new events until the broker drains it")
}

// loseHeld runs when the pump returns: the held run events are tried on
// the spool a last time; those still held are lost, counted as dropped and
// said, each with its run.
func (p *Publisher) loseHeld(st *pump) {
	if len(st.held) == 0 {
		return
	}
	p.toSpool(st, nil)
	for _, e := range st.held {
		p.countDrop(e.w)
		p.log.Error().Str("run_id", runOf(e.w)).Str("id", Clip(e.w.ID, 256)).
			Msg("a run's start or finish was neither delivered nor spooled (the spool's disk is full): that run is lost")
	}
	st.held = nil
}

// abandon runs when Close's ctx ended: direct entries still in flight, and
// those handed over but not yet taken, go to the spool; spooled ones stay
// there.
func (p *Publisher) abandon(st *pump) {
	var direct []*entry
	for _, e := range st.inflight {
		if !e.fromSp {
			direct = append(direct, e)
		}
	}
	st.inflight = nil
	if !st.inClosed {
		for e := range p.in { // closed by Close before it aborts
			p.queued--
			direct = append(direct, e)
		}
	}
	if len(direct) > 0 {
		p.toSpool(st, direct)
	}
}

// drop counts an event that will never be delivered. An event the broker
// refused (err is not nil) is set aside in the spool's rejected/ directory
// with the reason, so that it is kept for a look, not lost silently.
func (p *Publisher) drop(w events.Wire, err error) {
	p.countDrop(w)
	path, serr := p.setAside(w, err)
	if serr == nil {
		p.rejected.Add(1)
	}
	ev := p.dropLog.Event(p.log.Warn)
	if ev == nil {
		return
	}
	ev = ev.Str("error", Clip(err.Error(), 1024)).Str("id", Clip(w.ID, 256)).Str("subject", w.Subject).Int("bytes", len(w.Data))
	if serr != nil {
		ev = ev.Str("set_aside_error", serr.Error())
	} else {
		ev = ev.Str("set_aside", path)
	}
	ev.Msg("event rejected by the broker for good, dropped and set aside")
}

// isRunEvent reports a run-started or run-finished event (subject
// gttsplit.run.…), which may use the spool's reserve.
func isRunEvent(w events.Wire) bool {
	return strings.HasPrefix(w.Subject, events.SubjectRoot+"."+string(events.KindRun)+".")
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

// runOf returns the run token of an event's subject.
func runOf(w events.Wire) string { return w.Subject[strings.LastIndexByte(w.Subject, '.')+1:] }

// countDrop counts a dropped event, in all and for its run.
func (p *Publisher) countDrop(w events.Wire) {
	p.dropped.Add(1)
	run := runOf(w)
	p.dropMu.Lock()
	if p.dropRuns == nil {
		p.dropRuns = map[string]runDrops{}
	}
	d := p.dropRuns[run]
	d.events++
	if isRunEvent(w) {
		d.runEvents++
	}
	p.dropRuns[run] = d
	p.dropMu.Unlock()
}

// noteDrained counts a spooled event the broker acknowledged, for its run.
func (p *Publisher) noteDrained(w events.Wire) {
	p.dropMu.Lock()
	if p.drainedRuns == nil {
		p.drainedRuns = map[string]int{}
	}
	p.drainedRuns[runOf(w)]++
	p.dropMu.Unlock()
}

// DrainedRuns returns, by run (as its subject token, the run id of every
// valid run), how many spooled events the broker acknowledged: what a
// spool left by an earlier collector delivered.
func (p *Publisher) DrainedRuns() map[string]int {
	p.dropMu.Lock()
	defer p.dropMu.Unlock()
	return maps.Clone(p.drainedRuns)
}

// runDrops counts the dropped events of a run.
type runDrops struct {
	events    uint64 // all of them
	runEvents uint64 // its run-started and run-finished events
}

// DroppedOf returns how many events of the run runID were dropped (see
// Dropped): a spool left by an earlier run may hold events of other runs,
// whose drops are not this run's.
func (p *Publisher) DroppedOf(runID string) uint64 {
	p.dropMu.Lock()
	defer p.dropMu.Unlock()
	return p.dropRuns[events.Token(runID)].events
}

// RunLost reports whether the run-started or run-finished event of runID
// was dropped: then no consumer can ever close that run as it was.
func (p *Publisher) RunLost(runID string) bool {
	p.dropMu.Lock()
	defer p.dropMu.Unlock()
	return p.dropRuns[events.Token(runID)].runEvents > 0
}

// RejectedDir is the directory, inside the spool directory, where events
// the broker refused for good are set aside: one JSON file each,
// {"rejected_at","reason","subject","id","bytes","event"}, "event" being
// the structured event as it was sent (a string when it is not JSON).
// The publisher never reads them again; remove them once looked at. It
// stops writing there when the files add up to spool.max_bytes.
const RejectedDir = "rejected"

type rejectedRecord struct {
	RejectedAt time.Time       `json:"rejected_at"`
	Reason     string          `json:"reason"`
	Subject    string          `json:"subject"`
	ID         string          `json:"id"`
	Bytes      int             `json:"bytes"`
	Event      json.RawMessage `json:"event"`
}

// setAside writes w to RejectedDir and returns the file's path.
func (p *Publisher) setAside(w events.Wire, reason error) (string, error) {
	dir := filepath.Join(p.dir, RejectedDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if p.rejectedBytes.Load() >= p.cfg.Spool.MaxBytes {
		return "", fmt.Errorf("%s holds %d bytes, the spool's max_bytes: not written", dir, p.rejectedBytes.Load())
	}
	raw := json.RawMessage(w.Data)
	if !json.Valid(w.Data) {
		b, _ := json.Marshal(string(w.Data))
		raw = b
	}
	b, err := json.Marshal(rejectedRecord{RejectedAt: time.Now().UTC(), Reason: Clip(reason.Error(), 1024),
		Subject: w.Subject, ID: Clip(w.ID, 256), Bytes: len(w.Data), Event: raw})
	if err != nil {
		return "", err
	}
	b = append(b, '\n')
	f, err := os.CreateTemp(dir, time.Now().UTC().Format("20060102T150405.000000000Z")+"-*.json")
	if err != nil {
		return "", err
	}
	_, werr := f.Write(b)
	serr := f.Sync()
	if cerr := f.Close(); werr == nil && serr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = serr
	}
	if werr != nil {
		_ = os.Remove(f.Name())
		return "", werr
	}
	p.rejectedBytes.Add(int64(len(b)))
	return f.Name(), nil
}

// dirBytes sums the sizes of the regular files in dir (0 when it does not
// exist).
func dirBytes(dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

// permanent reports errors that re-sending cannot fix: the event is over
// the broker's max_payload, or the broker answered 400 (a bad request:
// e.g. headers over 64 KB from a huge Nats-Msg-Id), but not that its
// store is full (storeFull), which passes.
func permanent(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && !StoreFull(err) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum || apiErr.Code == 400)
}

// JetStream error codes of a broker whose store (or the account's share of
// it) is full.
const (
	errCodeAccountResourcesExceeded jetstream.ErrorCode = 10002 // 400 resource limits exceeded for account
	errCodeInsufficientResources    jetstream.ErrorCode = 10023 // 503 insufficient resources
	errCodeMemoryResourcesExceeded  jetstream.ErrorCode = 10028 // 500 insufficient memory resources available
	errCodeStorageResourcesExceeded jetstream.ErrorCode = 10047 // 500 insufficient storage resources available
	errCodeStreamStoreFailed        jetstream.ErrorCode = 10077 // 503 the stream's store failed: "maximum bytes exceeded" with discard new, ...
)

// StoreFull reports the answer of a broker that is there but cannot store
// the event now: the server's or the account's JetStream store is full
// (503 "insufficient resources", err_code 10023, is what a full server
// store answers), or a stream that discards new events reached its
// maximum messages or bytes. Room comes back (a purge, a raised limit, max
// age), so the event is spooled and tried again, like one sent while the
// broker is away.
func StoreFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case errCodeAccountResourcesExceeded, errCodeInsufficientResources, errCodeMemoryResourcesExceeded, errCodeStorageResourcesExceeded:
		return true
	case errCodeStreamStoreFailed:
		return strings.Contains(apiErr.Description, "exceeded") // not "message too large"
	}
	return false
}
