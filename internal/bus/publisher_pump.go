package bus

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// maxHeadAttempts is how often a spooled event may be answered with a
// server error before it is dropped.
const maxHeadAttempts = 5

// maxRetryInterval caps the backoff between drain attempts.
const maxRetryInterval = 10 * time.Second

// maxPatience caps how often a slow broker doubles the ack timeout (to
// 8 × AckTimeout).
const maxPatience = 3

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

// pump is the publisher's goroutine (run) and the state it acts on: the
// entries in flight to the broker, in publish order, the switch between
// publishing directly and spooling, the run events a full disk holds back.
// It owns its lock, mu: the pump holds it while it acts, never while it
// waits. Publish's direct path (publish) takes it too: it sends, appends
// to inflight and, waiting for room, settles the head's ack (the pump
// calls the callbacks). The spool side of its work is publisher_spool.go.
type pump struct {
	// Set by newPump, then only read.
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg PublisherConfig
	dir string // cfg.Dir()
	log zerolog.Logger

	in      chan *entry     // handed over by Publish and Flush; closed by Close
	kick    chan struct{}   // Publish put the first entry in flight: look at it
	closing <-chan struct{} // Close began: stop waiting to hand over
	abort   <-chan struct{} // Close's ctx ended
	done    chan struct{}   // closed when run returned

	// Safe for concurrent use on their own.
	n       counters    // what Stats reads
	runs    dropBook    // drops and drains by run
	aside   rejectedDir // where what the broker refused for good goes
	dropLog LogLimit

	// mu guards everything below (and sp while run runs). Lock order:
	// Publisher.mu, then mu, then dropBook.mu: mu is taken under
	// Publisher.mu (Publish) or alone (run), and dropBook.mu under it.
	mu       sync.Mutex
	sp       *spool
	queued   int           // entries handed over on in, not yet taken
	direct   uint64        // events Publish sent itself (for tests)
	room     chan struct{} // closed when a direct Publish waiting for room may retry
	spooling bool          // events go to the spool (it is not empty)
	inflight []*entry      // in publish order
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
	slow     slowBroker
	full     fullEpisode
	// noStream is set once "no stream" was said, until the spool drains.
	noStream bool
	// held are run events (start, finish) that a full disk kept out of
	// the spool even with its reserve: kept in memory, in order, and
	// tried again (the spool first, the broker directly once the spool
	// is empty) until they are durable or the publisher closes.
	held    []*entry
	heldTry time.Time // when the spool was last tried for them
	acks    []func()  // ack callbacks and barrier releases due, called by run outside mu, in order

	spareAcks []func() // run's other acks buffer (only run touches it, not under mu)
}

// slowBroker is the pump's patience with a broker that acks late while
// connected; under pump.mu.
type slowBroker struct {
	// level is how often the ack timeout was doubled (0: AckTimeout); it
	// stays raised.
	level int
	// since is when the acks began to time out (zero while they come in
	// time): BackPressure counts from it.
	since time.Time
	// js are JetStream contexts with longer ack timeouts (AckTimeout
	// doubled once, twice, ...), made when a level first needs one.
	js  [maxPatience]jetstream.JetStream
	log LogLimit // the slow broker's warning (Every: a minute)
}

func newPump(nc *nats.Conn, js jetstream.JetStream, sp *spool, cfg PublisherConfig, dir string, log zerolog.Logger,
	closing, abort <-chan struct{}) *pump {
	pm := &pump{
		nc: nc, js: js, cfg: cfg, dir: dir, log: log, sp: sp,
		in:       make(chan *entry, cfg.NATS.MaxInFlight),
		kick:     make(chan struct{}, 1),
		closing:  closing,
		abort:    abort,
		done:     make(chan struct{}),
		aside:    rejectedDir{dir: dir, max: cfg.Spool.MaxBytes},
		spooling: !sp.empty(), backoff: cfg.RetryInterval, window: 1,
	}
	pm.slow.log.Every = time.Minute
	pm.n.corrupt.Store(uint64(sp.corrupt))
	pm.n.spoolBytes.Store(sp.bytes())
	pm.aside.loadBytes()
	return pm
}

// publish is Publish's path under Publisher.mu: it sends e itself while
// the broker is connected and nothing is spooled or handed over ahead of
// it, waiting for room in the window; else it hands e over to run.
func (pm *pump) publish(ctx context.Context, e *entry) error {
	for {
		pm.mu.Lock()
		if pm.spooling || pm.queued > 0 || !connected(pm.nc) {
			break // the pump sends, spools or fails over, in order
		}
		if len(pm.inflight) >= pm.window {
			// Wait for room: for the pump to make some, or for the
			// head's ack, which Publish then settles itself (one
			// wake-up less on the way back to sending).
			if pm.room == nil {
				pm.room = make(chan struct{})
			}
			room := pm.room
			head := pm.inflight[0]
			var okc <-chan *jetstream.PubAck
			if head.fut != nil {
				okc, _ = head.results()
			}
			pm.mu.Unlock()
			select {
			case <-room:
			case <-okc:
				pm.mu.Lock()
				if len(pm.inflight) > 0 && pm.inflight[0] == head {
					pm.headAcked()
					pm.settleAcked()
					pm.wakeRoom()
				} // else: failed over meanwhile, the event is in the spool
				pm.mu.Unlock()
				// The pump calls the acks that came due, and waits on
				// the new head.
				pm.wake()
			case <-pm.closing:
				return ErrClosed
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		fut, err := pm.send(e.w)
		if err != nil {
			break // not sent: the pump tries again and fails over or drops
		}
		e.fut = fut
		pm.direct++
		pm.inflight = append(pm.inflight, e)
		first := len(pm.inflight) == 1
		pm.mu.Unlock()
		if first {
			pm.wake()
		}
		return nil
	}
	pm.queued++
	pm.mu.Unlock()
	return pm.handOverQueued(ctx, e)
}

// handOver sends e to run; under Publisher.mu for reading.
func (pm *pump) handOver(ctx context.Context, e *entry) error {
	pm.mu.Lock()
	pm.queued++
	pm.mu.Unlock()
	return pm.handOverQueued(ctx, e)
}

// handOverQueued sends e, counted in queued, to run; under Publisher.mu
// for reading.
func (pm *pump) handOverQueued(ctx context.Context, e *entry) error {
	var err error
	select {
	case pm.in <- e:
		return nil
	case <-pm.closing:
		err = ErrClosed
	case <-ctx.Done():
		err = ctx.Err()
	}
	pm.mu.Lock()
	pm.queued--
	pm.mu.Unlock()
	return err
}

// run is the publisher's goroutine: it takes what Publish and Flush hand
// over, waits for the acks of the head of inflight, drains the spool while
// the broker is there, and returns once Close closed in and everything is
// settled (or Close's ctx ended).
func (pm *pump) run() {
	defer close(pm.done)
	tick := time.NewTicker(pm.cfg.RetryInterval)
	defer tick.Stop()
	for {
		pm.mu.Lock()
		pm.resolveMarkers()
		if pm.spooling {
			pm.fill()
			pm.resolveMarkers()
		}
		if len(pm.held) > 0 && time.Since(pm.heldTry) >= pm.cfg.RetryInterval {
			pm.toSpool(nil) // room on the disk again?
		}
		if pm.aborted {
			pm.abandon()
			pm.loseHeld()
			pm.unlock()
			return
		}
		if pm.inClosed && len(pm.inflight) == 0 &&
			(!pm.spooling || (pm.sp.empty() && len(pm.held) == 0) || !connected(pm.nc)) {
			pm.loseHeld()
			pm.unlock()
			return
		}
		var in <-chan *entry
		if !pm.inClosed && (pm.spooling || len(pm.inflight) < pm.window) {
			in = pm.in
		}
		var okc <-chan *jetstream.PubAck
		var errc <-chan error
		if len(pm.inflight) > 0 {
			okc, errc = pm.inflight[0].results()
		}
		pm.unlock()
		select {
		case e, ok := <-in:
			pm.mu.Lock()
			if !ok {
				pm.inClosed = true
			} else {
				pm.queued--
				pm.accept(e)
				pm.acceptMore()
			}
			pm.unlock()
		case <-okc:
			pm.mu.Lock()
			pm.headAcked()
			pm.settleAcked()
			pm.unlock()
		case err := <-errc:
			pm.mu.Lock()
			pm.headFailed(err)
			pm.unlock()
		case <-pm.kick:
		case <-tick.C:
		case <-pm.abort:
			pm.mu.Lock()
			pm.aborted = true
			pm.mu.Unlock()
		}
	}
}

// release closes a Flush barrier after the ack callbacks due before it;
// under mu.
func (pm *pump) release(b chan struct{}) {
	pm.acks = append(pm.acks, func() { close(b) })
}

// unlock wakes the direct Publish calls waiting for room (wakeRoom),
// releases mu, then calls the ack callbacks that came due, in order. Only
// run calls it.
func (pm *pump) unlock() {
	pm.wakeRoom()
	acks := pm.acks
	pm.acks, pm.spareAcks = pm.spareAcks, nil
	pm.mu.Unlock()
	for i, ack := range acks {
		ack()
		acks[i] = nil
	}
	pm.spareAcks = acks[:0] // only run touches it
}

// wakeRoom lets the direct Publish calls that wait for room retry when
// there may be room (or they must hand over); under mu.
func (pm *pump) wakeRoom() {
	if pm.room != nil && (pm.spooling || pm.inClosed || len(pm.inflight) < pm.window) {
		close(pm.room)
		pm.room = nil
	}
}

// wake wakes run to look at its state again.
func (pm *pump) wake() {
	select {
	case pm.kick <- struct{}{}:
	default:
	}
}

// acceptMore takes, without waiting, what else was handed over while the
// window has room in direct mode: one wake-up of the pump for many events.
func (pm *pump) acceptMore() {
	for !pm.inClosed && !pm.spooling && len(pm.inflight) < pm.window {
		select {
		case e, ok := <-pm.in:
			if !ok {
				pm.inClosed = true
				return
			}
			pm.queued--
			pm.accept(e)
		default:
			return
		}
	}
}

// settleAcked handles, without waiting, the acks already there for the
// entries after the head (the broker acks in batches).
func (pm *pump) settleAcked() {
	for {
		pm.resolveMarkers()
		if len(pm.inflight) == 0 {
			return
		}
		okc, errc := pm.inflight[0].results()
		select {
		case <-okc:
			pm.headAcked()
		case err := <-errc:
			pm.headFailed(err)
			return
		default:
			return
		}
	}
}

// resolveMarkers pops the barriers and dropped entries at the head.
func (pm *pump) resolveMarkers() {
	for len(pm.inflight) > 0 && pm.inflight[0].fut == nil {
		e := pm.inflight[0]
		pm.inflight = pm.inflight[1:]
		switch {
		case e.barrier != nil:
			pm.release(e.barrier)
		case e.dropped != nil:
			// Counted when it reaches the head, so a re-read after an
			// interrupted drain does not count it twice.
			pm.drop(e.w, e.dropped)
			pm.commit(e.pos)
		}
	}
}

// accept takes one entry from Publish or Flush.
func (pm *pump) accept(e *entry) {
	if e.barrier != nil {
		if !pm.spooling && len(pm.inflight) > 0 {
			pm.inflight = append(pm.inflight, e)
		} else {
			pm.release(e.barrier) // everything before it is durable already
		}
		return
	}
	if pm.spooling {
		batch := []*entry{e}
		// Take what else is waiting, to sync the spool once for all.
	more:
		for len(batch) < pm.cfg.NATS.MaxInFlight {
			select {
			case e2, ok := <-pm.in:
				if !ok {
					pm.inClosed = true
					break more
				}
				pm.queued--
				batch = append(batch, e2)
			default:
				break more
			}
		}
		pm.toSpool(batch)
		return
	}
	if !connected(pm.nc) {
		pm.failover(e, nats.ErrDisconnected)
		return
	}
	fut, err := pm.send(e.w)
	switch {
	case err == nil:
		e.fut = fut
		pm.inflight = append(pm.inflight, e)
	case permanent(err):
		pm.drop(e.w, err)
	default:
		pm.failover(e, err)
	}
}

// send publishes one event asynchronously, waiting for its ack as long as
// the broker's patience level says; under mu.
func (pm *pump) send(w events.Wire) (jetstream.PubAckFuture, error) {
	// The header as Header.Set and WithMsgID write it (the keys are in
	// canonical form), in one map.
	msg := &nats.Msg{Subject: w.Subject, Data: w.Data, Header: nats.Header{
		"Content-Type":        structuredContentType,
		jetstream.MsgIDHeader: {w.ID},
	}}
	js := pm.js
	if k := pm.slow.level; k > 0 {
		if pm.slow.js[k-1] == nil {
			var err error
			pm.slow.js[k-1], err = jetstream.New(pm.nc,
				jetstream.WithPublishAsyncTimeout(pm.cfg.NATS.AckTimeout<<k),
				jetstream.WithPublishAsyncMaxPending(4*pm.cfg.NATS.MaxInFlight+64))
			if err != nil {
				return nil, err
			}
		}
		js = pm.slow.js[k-1]
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
func (pm *pump) headAcked() {
	e := pm.inflight[0]
	pm.inflight = pm.inflight[1:]
	pm.backoff = pm.cfg.RetryInterval
	pm.slow.since = time.Time{}
	if pm.slow.level > 0 {
		// A broker that was slow gets its room back one event at a time.
		pm.window = min(pm.window+1, pm.cfg.NATS.MaxInFlight)
	} else {
		pm.window = pm.cfg.NATS.MaxInFlight
	}
	if e.fromSp {
		pm.headErrs = 0
		pm.n.drained.Add(1)
		pm.runs.noteDrained(e.w)
		pm.commit(e.pos)
		return
	}
	pm.n.published.Add(1)
	if e.ack != nil {
		pm.acks = append(pm.acks, e.ack)
	}
}

// headFailed handles a failed publish of the first entry in flight.
func (pm *pump) headFailed(err error) {
	e := pm.inflight[0]
	pm.sayNoStream(e.w, err)
	slow := errors.Is(err, jetstream.ErrAsyncPublishTimeout) && connected(pm.nc)
	if slow && pm.slow.level < maxPatience {
		// Connected, and the ack is late: the broker is slow, not away.
		// Later sends (the spool's drain included) wait longer.
		pm.slow.level++
	}
	if slow && pm.waitSlow(err) {
		return
	}
	if permanent(err) {
		pm.inflight = pm.inflight[1:]
		pm.drop(e.w, err)
		if e.fromSp {
			pm.commit(e.pos)
		}
		return
	}
	if !e.fromSp {
		// Direct mode: this event and every one after it go to the spool.
		rest := pm.inflight
		pm.inflight = nil
		pm.failoverAll(rest, err)
		return
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && !StoreFull(err) {
		// A full store is the broker being unavailable for a while: it is
		// tried again for as long as it lasts, never set aside.
		pm.headErrs++
		if pm.headErrs >= maxHeadAttempts {
			pm.headErrs = 0
			pm.inflight = pm.inflight[1:]
			pm.drop(e.w, err)
			pm.commit(e.pos)
		}
	}
	pm.stopDrain(err)
}

// waitSlow takes a late ack of a connected broker as back-pressure when
// BackPressure allows (for that long since acks began to be late): every
// event in flight is sent again (the broker drops a copy it has as a
// duplicate) and waited for at the raised patience, and the window shrinks
// so that Publish waits. It reports whether it did; else the head fails
// as before (to the spool).
func (pm *pump) waitSlow(err error) bool {
	if pm.cfg.BackPressure <= 0 {
		return false
	}
	now := time.Now()
	if pm.slow.since.IsZero() {
		pm.slow.since = now
		if ev := pm.slow.log.Event(pm.log.Warn); ev != nil {
			ev.Err(err).Int("in_flight", len(pm.inflight)).Dur("ack_timeout", pm.cfg.NATS.AckTimeout<<pm.slow.level).
				Msg("the broker is slow (acks late while connected): sending again and waiting for it rather than spooling")
		}
	} else if now.Sub(pm.slow.since) > pm.cfg.BackPressure {
		return false
	}
	for _, e := range pm.inflight {
		if e.fut == nil {
			continue // a barrier or an entry resolved as dropped
		}
		fut, serr := pm.send(e.w)
		if serr != nil {
			return false
		}
		e.fut, e.okc, e.errc = fut, nil, nil
	}
	pm.window = max(1, len(pm.inflight)/2)
	return true
}

// sayNoStream says, once until the spool drains, that a connected broker
// has no stream for the events: a collector creates none (its credential
// may not), so they wait in the spool until the aggregator (or an
// operator) creates it.
func (pm *pump) sayNoStream(w events.Wire, err error) {
	if pm.noStream || !connected(pm.nc) ||
		!(errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)) {
		return
	}
	pm.noStream = true
	pm.log.Warn().Str("subject", w.Subject).Str("stream", pm.cfg.NATS.Stream).
		Msg("no stream takes the events: the events stream does not exist yet (the aggregator creates it when it starts, or an operator does) or has no leader; spooling until it does")
}

// drop counts an event that will never be delivered. An event the broker
// refused (err is not nil) is set aside in the spool's rejected/ directory
// with the reason, so that it is kept for a look, not lost silently.
func (pm *pump) drop(w events.Wire, err error) {
	pm.countDrop(w)
	path, serr := pm.aside.setAside(w, err)
	if serr == nil {
		pm.n.rejected.Add(1)
	}
	ev := pm.dropLog.Event(pm.log.Warn)
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

// countDrop counts a dropped event, in all and for its run.
func (pm *pump) countDrop(w events.Wire) {
	pm.n.dropped.Add(1)
	pm.runs.noteDropped(w)
}
