package runtable

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gttsplit/gttsplit/internal/bus"
)

// Consuming a partition: the owner creates (or updates) the partition's
// durable consumer on the events stream, filtered on the partition's
// subjects, with a pinned priority group, and unpins it so that its own
// pulls are the ones served (a previous owner that was killed or paused
// could hold the pin for pinnedTTL). Messages are handled one at a time,
// in order, on the consumer's own goroutine; before each, the lease is
// checked.

const (
	// ownerGroup is the priority group of every partition consumer.
	ownerGroup = "owner"
	// pinnedTTL: the server moves a pin after this long without a pull
	// (a member that lost its lease and pulled once more may hold it
	// until then). An idle partition's pull outlasts it: when the pin
	// moved meanwhile, the next event ends the pull with a 423, and the
	// partition pulls again at once (unpinned, it is pinned again).
	pinnedTTL = 5 * time.Second
	// pullExpiry is the expiry of a pull request while the partition
	// receives events, idlePullExpiry once idlePulls pulls in a row
	// brought none. A busy partition's pull asks for no server
	// heartbeats, an idle one's does (pull.go: heartbeatOf): one whose
	// heartbeats stop is given up, and still listened to. A pull is not
	// lost to a new leader of its consumer (the servers of a cluster keep
	// the consumer's pull requests, and the new leader ends each with a
	// 409 the client pulls again after) nor to the client's reconnection
	// (the table cuts its pulls when its connection reconnected:
	// Table.rejoin); what is left to the expiry is a pull whose leader
	// died before its followers knew of it: a partition then pulls again
	// at most its expiry and the pull's grace later (pullGrace), an
	// idle one two missed heartbeats later.
	pullExpiry     = 4 * time.Second
	idlePullExpiry = 15 * time.Second
	idlePulls      = 2
	// pullBatch bounds the messages buffered per partition (flow.go
	// sizes each pull, up to it).
	pullBatch = 64
	// stallAfter: a partition whose events wait in the stream but reach
	// it neither as messages nor as the consumer's heartbeats for this
	// long is stalled.
	stallAfter = 5 * time.Second
	// repullAfter is the pause before a partition pulls again after a
	// pull found the consumer without a leader (no responders).
	repullAfter = 250 * time.Millisecond
)

// watchEvery is how often the table checks its consumers and the stream;
// infoEvery how often it asks the broker for the state of a consumer that
// had nothing to deliver at its last info and has received nothing since
// while its pulls were answered (they would have brought any event), and
// for the events stream's and the stores' state while nothing looks
// wrong. A consumer that received events, or whose pull failed or went
// unanswered, is asked every watch. Variables for the tests only
// (export_test.go).
var (
	watchEvery = 2 * time.Second
	infoEvery  = 30 * time.Second
)

// partConsumer is one consumer of a partition: on the events stream, or
// on the legacy stream.
type partConsumer struct {
	stream string
	name   string
	cons   jetstream.Consumer
	stop   context.CancelFunc
	done   chan struct{}
	// unlistened is closed once no pull of the stopped consumer is
	// listened to any more (drainPulls returned).
	unlistened chan struct{}
	// finish stops pulling, not handling: what the pulls bring until the
	// broker ended them is folded (a hand-over: finishConsumers).
	finish context.CancelFunc
	// idle is set while the current pull is a quiet partition's (the
	// pull before it brought nothing, or it is the first): a finish cuts
	// it at once if nothing came on it yet.
	idle atomic.Bool
	// lost is set once the partition's lease is lost (not a hand-over):
	// the consumer pulls no more and hands back, at once, what it holds
	// and what its pulls still bring (lose).
	lost atomic.Bool
	// last is when a message or a heartbeat last came (unix nanos).
	last atomic.Int64
	// pending is the consumer's pending count at the last watch.
	pending atomic.Uint64
	// seq is the stream sequence of the last message that came, behind
	// the pending count it said, at seqAt (unix nanos): where the
	// consumer reads the stream (pullfloor.go).
	seq, behind atomic.Uint64
	seqAt       atomic.Int64
	// msgs counts the messages received; quietAt is msgs when an info
	// last found nothing to deliver (-1: it did not), at infoAt (unix
	// nanos); failing is set when a pull failed since.
	msgs    atomic.Int64
	quietAt atomic.Int64
	infoAt  atomic.Int64
	failing atomic.Bool
	// pulled holds the messages pulled not handled yet, and the pulls
	// listened to; inbox is the prefix of their reply subjects, next the
	// subject pulls are sent to.
	pulled *pulled
	inbox  string
	next   string
	// seen is the highest consumer sequence (the broker's count of its
	// deliveries) of a message that reached c, or the consumer's last
	// delivery when c was made: a stop stops listening once the broker
	// delivered nothing past it (awaitPulls).
	seen atomic.Uint64
	// cut ends the current pull (nil between pulls); guarded by cutMu.
	cutMu sync.Mutex
	cut   context.CancelFunc
}

// setCut records how to end the current pull (nil: none).
func (c *partConsumer) setCut(cancel context.CancelFunc) {
	c.cutMu.Lock()
	defer c.cutMu.Unlock()
	c.cut = cancel
}

// cutPull ends the current pull: the loop pulls again at once.
func (c *partConsumer) cutPull() {
	c.cutMu.Lock()
	defer c.cutMu.Unlock()
	if c.cut != nil {
		c.cut()
	}
}

// sawDelivery records that the broker's delivery dseq reached c.
func (c *partConsumer) sawDelivery(dseq uint64) {
	for {
		cur := c.seen.Load()
		if dseq <= cur || c.seen.CompareAndSwap(cur, dseq) {
			return
		}
	}
}

// lose stops c for good once its partition's lease is lost: no pull is
// sent any more (until the member takes the partition again: a new
// consumer), the current one is no longer waited for, and what was pulled
// and not handled, and what the pulls still bring, goes back at once to
// the stream for the next owner (consume, pulled.drain). Messages folded
// and not acknowledged are the table's to hand back (Table.Lost).
func (c *partConsumer) lose() {
	if c.lost.CompareAndSwap(false, true) {
		c.finish()
		c.cutPull()
	}
}

// backWhy is why c, a consumer of pt, hands a message back once it
// stopped handling: its lease was lost, or it stopped.
func (pt *part) backWhy(c *partConsumer) string {
	if c.lost.Load() {
		return "lost"
	}
	return "stop"
}

// startConsumers creates the partition's consumers and starts consuming.
func (pt *part) startConsumers(ctx context.Context) error {
	t := pt.t
	lanes := t.cfg.Consumer.LaneList()
	var filters []string
	if len(lanes) == 0 {
		filters = bus.PartitionFilters(pt.p, "")
	}
	for _, l := range lanes {
		filters = append(filters, bus.PartitionFilters(pt.p, l)...)
	}
	c, err := pt.consumer(ctx, t.cfg.Stream, filters)
	if err != nil {
		return err
	}
	pt.cons = append(pt.cons, c)
	if t.legacy.Load() {
		var lf []string
		if len(lanes) == 0 {
			lf = []string{bus.LegacyFilter(pt.p, "")}
		}
		for _, l := range lanes {
			lf = append(lf, bus.LegacyFilter(pt.p, l))
		}
		lc, err := pt.consumer(ctx, bus.LegacyStream(t.cfg.Stream), lf)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			t.legacy.Store(false) // retired meanwhile
		} else if err != nil {
			pt.stopConsumers()
			return err
		} else {
			pt.cons = append(pt.cons, lc)
		}
	}
	for _, c := range pt.cons {
		pt.consume(c)
	}
	return nil
}

// consumer creates or updates the partition's durable consumer on stream
// and unpins it.
func (pt *part) consumer(ctx context.Context, stream string, filters []string) (*partConsumer, error) {
	t := pt.t
	name := bus.ConsumerName(t.cfg.Group, pt.p)
	replicas := t.cfg.Replicas
	if replicas <= 1 {
		replicas = 0 // the stream's
	}
	// Each request under its own bound, sent again when unanswered: a
	// partition is often taken because a node died, and a request in
	// flight to it (or to the stream's old leader) is never answered.
	var cons jetstream.Consumer
	err := bus.Retry(ctx, func(ctx context.Context) error {
		if cur, err := t.js.Consumer(ctx, stream, name); err == nil {
			replicas = max(replicas, cur.CachedInfo().Config.Replicas)
		} else if bus.Transient(err) {
			return err
		}
		var err error
		cons, err = t.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable:        name,
			Description:    fmt.Sprintf("gttsplit aggregator, partition %d", pt.p),
			FilterSubjects: filters,
			AckPolicy:      jetstream.AckExplicitPolicy,
			AckWait:        t.cfg.Consumer.AckWait,
			MaxDeliver:     -1,
			MaxAckPending:  t.cfg.Consumer.MaxAckPending,
			DeliverPolicy:  jetstream.DeliverAllPolicy,
			PriorityPolicy: jetstream.PriorityPolicyPinned,
			PriorityGroups: []string{ownerGroup},
			PinnedTTL:      pinnedTTL,
			Replicas:       replicas,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s of %s: %w", name, stream, err)
	}
	// This member holds the lease: any pin left is a previous owner's.
	_ = bus.Retry(ctx, func(ctx context.Context) error {
		st, err := t.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		err = st.UnpinConsumer(ctx, name, ownerGroup)
		if bus.Transient(err) {
			return err
		}
		return nil // (none pinned: nothing to do)
	})
	c := &partConsumer{stream: stream, name: name, cons: cons, pulled: newPulled(),
		inbox: t.js.Conn().NewInbox(), next: fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.%s", stream, name)}
	c.last.Store(time.Now().UnixNano())
	c.quietAt.Store(-1)
	c.seen.Store(cons.CachedInfo().Delivered.Consumer) // earlier owners' deliveries
	return c, nil
}

// consume consumes c until stopped: it pulls as the pinned member of the
// priority group and hands each message to handle, one at a time. Its
// pulls are its own requests (pull.go): a message that comes after the
// table stopped waiting for its pull is handled too, not dropped.
func (pt *part) consume(c *partConsumer) {
	ctx, stop := context.WithCancel(context.Background())
	// pulling ends at a finish (no pull sent any more), a stop, or the
	// lease's loss.
	pulling, finish := context.WithCancel(ctx)
	c.stop, c.finish, c.done, c.unlistened = stop, finish, make(chan struct{}), make(chan struct{})
	t := pt.t
	nc := t.js.Conn()
	in := make(chan *nats.Msg, inboxLen)
	quit, took := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(took)
		pt.listen(c, in, quit)
	}()
	go pt.watchLease(ctx, c)
	t.drains.Add(1)
	go func() {
		defer t.drains.Done()
		// mu is held while a message is handled (it is taken before
		// every lock handle takes: part.mu, the dead letters'); once
		// stopped, a message still delivered is handed back for the next
		// owner at once.
		var mu sync.Mutex
		stopped := false
		handle := func(jm jetstream.Msg, fl *flight) {
			mu.Lock()
			defer mu.Unlock()
			c.last.Store(time.Now().UnixNano())
			c.msgs.Add(1)
			pt.fl.take(fl)
			if fl.delivered > 1 {
				pt.redelivered(fl.seq, fl.delivered, fl)
			}
			if stopped || !held(ctx, pt.lease) {
				_ = jm.Nak()
				pt.handBack(fl, "not held")
				if !stopped && ctx.Err() == nil {
					c.lose() // lost, or in doubt past its bound
				}
				return
			}
			m, err := bus.WrapMsg(jm, nc)
			if err != nil {
				_ = jm.Term()
				pt.fl.done(fl)
				return
			}
			t0 := time.Now()
			err = pt.handle(ctx, m, fl)
			t.flow.handled(time.Since(t0))
			if err != nil {
				if !errors.Is(err, errNotOwned) {
					t.log.Debug().Err(err).Int("partition", pt.p).Str("subject", jm.Subject()).Msg("event not folded; redelivered in a second")
				}
				_ = jm.NakWithDelay(time.Second)
				if !fl.kept {
					pt.handBack(fl, "not folded")
				}
			}
			if !fl.kept {
				pt.fl.done(fl) // settled
			}
		}
		// One pull at a time, sized to what the handler takes a quarter
		// of the ack wait to handle (flow.go); the next once it is
		// handled: no message waits in a
		// buffer for longer. A pull that finds no server to take it (no
		// responders: the consumer has no leader, its node died and the
		// others elect one) is sent again after repullAfter, until a
		// leader takes it.
		empty := 0 // pulls in a row that brought nothing
		first := true
		for pulling.Err() == nil {
			expiry := pullExpiry
			if empty >= idlePulls {
				expiry = idlePullExpiry
			}
			grace := pullGrace
			if e := testPulls.Load(); e != nil {
				expiry, grace = e[0], e[1]
			}
			t.awaitConn(pulling)
			t.holdPull(pulling, c)
			t.gatePull(pulling, pt.p, c)
			t.waitFloor(pulling, c)
			// A finished consumer's pull is waited for until the broker
			// ends it (its expiry and grace at most): its messages on
			// their way are folded, not lost to an ack wait.
			pctx, cancel := context.WithTimeout(ctx, expiry+grace)
			c.idle.Store(first || empty > 0)
			first = false
			c.setCut(cancel)
			if pulling.Err() != nil {
				c.setCut(nil)
				cancel()
				break
			}
			before := c.msgs.Load()
			err := c.pull(nc, in, t.flow.pullSize(), expiry)
			if err == nil {
				for jm, fl := c.pulled.pop(pctx); jm != nil; jm, fl = c.pulled.pop(pctx) {
					if ctx.Err() != nil || c.lost.Load() {
						_ = jm.Nak() // stopped or lost: at once to the next owner
						pt.handBack(fl, pt.backWhy(c))
						continue
					}
					handle(jm, fl)
				}
				err = c.pulled.end()
				if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
					// The server did not end the pull by the grace
					// past its expiry: the next watch asks for the
					// consumer's state.
					c.failing.Store(true)
				}
				if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
					err = nil // cut, given up, or stopped
				}
			}
			c.setCut(nil)
			cancel()
			if err == nil && c.msgs.Load() == before {
				empty++
			} else {
				empty = 0
			}
			if errors.Is(err, jetstream.ErrPinIDMismatch) {
				continue // the pin moved during a long pull: again, unpinned
			}
			if err != nil && ctx.Err() == nil {
				c.failing.Store(true) // the next watch asks the broker
				pause := 200 * time.Millisecond
				if errors.Is(err, nats.ErrNoResponders) {
					t.m.repulls.Inc()
					pause = repullAfter
				}
				t.log.Debug().Err(err).Int("partition", pt.p).Str("stream", c.stream).Msg("partition consumer not ready")
				select {
				case <-pulling.Done():
				case <-time.After(pause):
				}
			}
		}
		// Stopped: what was pulled and not handled goes back at once to
		// the next owner, unless the consumer was finished (not stopped,
		// nor lost): then it is folded first. What its pulls still bring
		// goes back as it comes, until the broker ended them (drain).
		rest := c.pulled.stop()
		for len(rest) > 0 && ctx.Err() == nil && !c.lost.Load() {
			handle(rest[0].jm, rest[0].fl)
			rest = rest[1:]
		}
		mu.Lock()
		stopped = true
		mu.Unlock()
		for _, pm := range rest {
			_ = pm.jm.Nak()
			pt.handBack(pm.fl, pt.backWhy(c))
		}
		close(c.done)
		pt.drainPulls(c)
		close(c.unlistened)
		close(quit)
		<-took
	}()
}

// watchLease stops c at once when the partition's lease is lost (a write
// or a renewal fenced out, or in doubt for a time to live), not only when
// the member tells the table (Table.Lost), which may come later; it
// returns when ctx (c's) ends.
func (pt *part) watchLease(ctx context.Context, c *partConsumer) {
	if pt.lease == nil {
		return
	}
	select {
	case <-pt.lease.Lost():
		if ctx.Err() == nil {
			c.lose() // (a release's lease is lost once the consumer stopped)
			// Nothing of the partition is written any more (its writes
			// are fenced out): what was folded and waits for its run's
			// write goes back at once too, not when the member drops
			// the partition (Table.Lost).
			pt.ckptMu.Lock()
			pt.handBackPending("lost")
			pt.ckptMu.Unlock()
		}
	case <-ctx.Done():
	}
}

// drainPulls listens to the pulls of c, which stopped handling messages,
// until the broker ended them: a pull a finish cut (a quiet one), one
// standing when the lease was lost, or when the table stopped pulling,
// may still bring messages; they are handed back as they come, not
// dropped with the pull's subscription (and delivered again only an ack
// wait later). A stop ends the wait once the broker says nothing
// delivered to c is still on its way (awaitPulls), or at its
// deadline; Close at once.
func (pt *part) drainPulls(c *partConsumer) {
	if f := consumerStopped.Load(); f != nil {
		(*f)(pt.p)
	}
	grace := pullGrace
	if e := testPulls.Load(); e != nil {
		grace = e[1]
	}
	c.pulled.drain(pt.t.unlisten.Done(), grace)
}

// pullGrace is how long a partition waits past its pull's expiry for the
// server's end of it (its messages and its 408 are on their way) before it
// pulls again. A pull given up is still listened to (pull.go): what it
// brings later is handled, with its ack wait counted from when the pull was
// sent, so a longer wait would take nothing more in; it would only delay
// the pull sent again after a pull lost with its consumer's leader (half
// the ack wait, 15 s by default, was longer than the new leader's
// election: no pull found the consumer leaderless to be sent again every
// repullAfter, and a partition whose leader died waited out the grace).
const pullGrace = time.Second

// testPulls, when set (by tests), is every pull's expiry and grace.
var testPulls atomic.Pointer[[2]time.Duration]

// consumerStopped, when set (by tests), is told the partition of each
// consumer that stopped handling messages (what it held handed back, or
// folded after a finish).
var consumerStopped atomic.Pointer[func(p int)]

// stopConsumers stops consuming the partition; the message being handled,
// if any, is handled first.
func (pt *part) stopConsumers() {
	for _, c := range pt.cons {
		if c.stop != nil {
			c.stop()
			<-c.done
		}
	}
}

// awaitPulls waits, after a stop's last checkpoint of the partition,
// until no pull of its consumers is listened to any more: each ended by
// the broker (it brought what it asked for, its expiry, or the 423 of a
// pin the stop dropped: unpinned), or cut once the broker says that
// nothing it delivered is on its way to the consumer (cutSettled): none
// of its deliveries waits for an acknowledgement, or its last delivery
// reached the consumer (what an earlier owner left unacknowledged, which
// waits for its ack wait, does not hold the stop). The broker is asked
// every settledEvery; ctx (the stop's deadline) bounds the wait.
func (pt *part) awaitPulls(ctx context.Context) {
	for _, c := range pt.cons {
		if c.unlistened == nil {
			continue
		}
		for done := false; !done; {
			if !pt.t.js.Conn().IsConnected() {
				// Nothing comes on a connection gone (and a pull's
				// messages are not sent again on the next one): the
				// stop is not held up by a broker that went away.
				c.pulled.cutSettled(false)
			}
			ictx, cancel := context.WithTimeout(ctx, settledAsk)
			if ci, err := c.cons.Info(ictx); err == nil && (ci.NumAckPending == 0 || ci.Delivered.Consumer <= c.seen.Load()) {
				c.pulled.cutSettled(ci.NumPending > 0)
			}
			cancel()
			t := time.NewTimer(settledEvery)
			select {
			case <-c.unlistened:
				done = true
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// settledEvery is how often a stop asks the broker whether what it
// delivered to a stopped consumer is settled (awaitPulls).
// settledAsk bounds one such question.
const (
	settledEvery = 100 * time.Millisecond
	settledAsk   = 2 * time.Second
)

// finishWait bounds a finish (finishConsumers): a pull's expiry and grace,
// twice, for what it brings to be folded.
const finishWait = 2 * (pullExpiry + pullGrace)

// finishConsumers stops pulling on the partition (a hand-over) and folds
// what its pulls bring until the broker ended them, then stops: what the
// partition pulled is folded and written by the release's last checkpoint,
// not handed back (naked) nor lost on its way (delivered again an ack wait
// later). A quiet partition's pull that brought nothing yet is cut at
// once (nothing is likely on its way: a hand-over of partitions with no
// backlog is not held up for a pull's expiry); a busy one's lasts at most
// its expiry and grace. Past finishWait the consumers are stopped: what
// is left goes back at once.
func (pt *part) finishConsumers() {
	for _, c := range pt.cons {
		if c.finish != nil {
			c.finish()
			if c.idle.Load() && c.pulled.none() {
				c.cutPull()
			}
		}
	}
	deadline := time.NewTimer(finishWait)
	defer deadline.Stop()
	for _, c := range pt.cons {
		if c.stop == nil {
			continue
		}
		select {
		case <-c.done:
		case <-deadline.C:
			deadline.Reset(0)
			pt.t.log.Debug().Int("partition", pt.p).Str("stream", c.stream).Msg("partition's pulls not ended in time at its hand-over; what they bring goes to the next owner")
			c.stop()
			<-c.done
		}
	}
	pt.stopConsumers()
}

// unpin drops this member's pin on the partition's consumers, so that its
// next owner is served at once.
func (pt *part) unpin(ctx context.Context) {
	uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, c := range pt.cons {
		if st, err := pt.t.js.Stream(uctx, c.stream); err == nil {
			_ = st.UnpinConsumer(uctx, c.name, ownerGroup)
		}
	}
}

// health is what Ready reports: conditions by name, each reported once it
// lasted missedWatches checks (one slow answer is not a fault).
type health struct {
	// mu is taken last (under a partition's ckptMu): no other lock is
	// taken while it is held.
	mu    sync.Mutex
	conds map[string]string
	seen  map[string]int
}

const missedWatches = 2

func (h *health) set(name, why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conds == nil {
		h.conds, h.seen = map[string]string{}, map[string]int{}
	}
	h.conds[name] = why
}

func (h *health) has(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.conds[name]
	return ok
}

func (h *health) clear(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conds, name)
	delete(h.seen, name)
}

// tick counts one more check for every condition set.
func (h *health) tick() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name := range h.conds {
		h.seen[name]++
	}
}

func (h *health) report() (bool, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var why []string
	for name, w := range h.conds {
		if h.seen[name] >= missedWatches || strings.HasPrefix(name, "store.") {
			if !slices.Contains(why, w) {
				why = append(why, w)
			}
		}
	}
	if len(why) == 0 {
		return true, ""
	}
	sort.Strings(why)
	return false, strings.Join(why, "; ")
}

// Ready says whether the run table's partitions get their events and its
// checkpoints are written, and why not.
// While splits read back from the state bucket (deferred, or not
// delivered before a restart or a hand-over) wait for the sinks, it is
// catching up: not ready.
func (t *Table) Ready() (bool, string) {
	ok, why := t.health.report()
	if d := t.cfg.Deliveries; d != nil {
		if n := d.catchingUp(); n > 0 {
			c := fmt.Sprintf("catching up: %d splits read back from the state bucket wait for the sinks", n)
			if ok {
				return false, c
			}
			return false, why + "; " + c
		}
	}
	return ok, why
}

// watch checks, every watchEvery, the owned partitions' consumers (their
// lag, whether events still reach them) and the events stream (whether it
// has a leader), sets the metrics and readiness, and retires the legacy
// stream once it is drained.
func (t *Table) watch(ctx context.Context) {
	tk := time.NewTicker(watchEvery)
	defer tk.Stop()
	var ws watchState
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		t.watchOnce(ctx, &ws)
	}
}

// quiet says c had nothing to deliver at its last info (less than
// infoEvery ago), has received nothing since and its pulls stood: it has
// nothing to deliver now either (a pull standing would have brought it),
// and the broker need not be asked.
func (c *partConsumer) quiet(now time.Time) bool {
	q := c.quietAt.Load()
	return q >= 0 && q == c.msgs.Load() && !c.failing.Load() && now.Sub(time.Unix(0, c.infoAt.Load())) < infoEvery
}

// info asks the broker for c's state; it reports the events waiting, and
// the partition's stall ("" when it is not stalled).
func (c *partConsumer) info(ctx context.Context, p int, now time.Time) (uint64, string) {
	msgs := c.msgs.Load()
	c.failing.Store(false)
	ci, err := c.cons.Info(ctx)
	idle := time.Since(time.Unix(0, c.last.Load()))
	c.quietAt.Store(-1)
	switch {
	case err != nil:
		c.failing.Store(true)
		if idle > stallAfter {
			return 0, fmt.Sprintf("%d (consumer %s: %v)", p, c.name, err)
		}
		return 0, ""
	case ci.NumPending > 0 && idle > stallAfter:
		c.pending.Store(ci.NumPending)
		return ci.NumPending, fmt.Sprintf("%d (%d events wait, none delivered for %s)", p, ci.NumPending, idle.Round(time.Second))
	case ci.NumPending == 0 && ci.NumAckPending == 0:
		c.last.Store(time.Now().UnixNano()) // nothing to deliver: not stalled
		c.infoAt.Store(now.UnixNano())
		c.quietAt.Store(msgs)
	}
	c.pending.Store(ci.NumPending)
	return ci.NumPending, ""
}

// watchState is what the watch remembers between two watches.
type watchState struct {
	streamAt time.Time // the events stream's state last asked
	limited  bool      // the events stream has a max_bytes
}

// woke says c received events or a pull of it failed since its last info
// found nothing to deliver (or no info did yet): it is asked for its
// state for a reason, not only because its last info aged.
func (c *partConsumer) woke() bool {
	q := c.quietAt.Load()
	return q < 0 || q != c.msgs.Load() || c.failing.Load()
}

// watchOnce is one watch. It asks the broker for a consumer's state
// unless the consumer is quiet, and for the events stream's and the
// stores' state (room.go) every watch while a consumer woke (it received
// events or a pull failed), something is wrong or a store has a limit;
// else every infoEvery. A consumer asked only because its last info aged
// does not ask for the stream's: once the partitions went idle at
// different times (after a fold) their infos come at different watches,
// and each would ask the stream again (three times as often).
func (t *Table) watchOnce(ctx context.Context, ws *watchState) {
	wctx, cancel := context.WithTimeout(ctx, max(watchEvery, 2*time.Second))
	defer cancel()
	var lag uint64
	var stalled []string
	var oldest time.Duration
	now := time.Now()
	asked := false
	for _, pt := range t.parts() {
		oldest = max(oldest, pt.checkpointAge())
		for _, c := range pt.cons {
			if c.quiet(now) {
				c.last.Store(now.UnixNano()) // nothing to deliver: not stalled
				continue
			}
			asked = asked || c.woke()
			n, why := c.info(wctx, pt.p, now)
			lag += n
			if why != "" {
				stalled = append(stalled, why)
			}
		}
	}
	t.m.lag.Set(float64(lag))
	t.m.ckptAge.Set(oldest.Seconds())
	t.m.stalled.Set(float64(len(stalled)))
	if len(stalled) > 0 {
		slices.Sort(stalled)
		t.health.set("stalled", "events do not reach partition "+strings.Join(stalled, ", "))
	} else {
		t.health.clear("stalled")
	}
	// The events stream: without a leader, no event is stored at all.
	limited := t.st.room.max.Load() > 0 || t.cfg.StoreRoom != nil || ws.limited
	if asked || limited || len(stalled) > 0 || now.Sub(ws.streamAt) >= infoEvery || t.health.has("stream") {
		ws.streamAt = now
		var info *jetstream.StreamInfo
		if st, err := t.js.Stream(wctx, t.cfg.Stream); err != nil {
			t.health.set("stream", fmt.Sprintf("events stream %s does not answer: %v (events do not reach the partitions)", t.cfg.Stream, err))
		} else if ci := st.CachedInfo().Cluster; ci != nil && ci.Leader == "" && st.CachedInfo().Config.Replicas > 1 {
			t.health.set("stream", fmt.Sprintf("events stream %s has no leader (events do not reach the partitions)", t.cfg.Stream))
		} else {
			t.health.clear("stream")
			info = st.CachedInfo()
			ws.limited = info.Config.MaxBytes > 0
		}
		t.room(wctx, info)
	}
	t.health.tick()
	if t.legacy.Load() && t.part(0) != nil {
		if gone, err := bus.RetireLegacy(wctx, t.js, t.cfg.Stream, t.cfg.Group, t.cfg.Partitions); err == nil && gone {
			t.legacy.Store(false)
			t.m.legacy.Set(0)
			t.log.Info().Str("stream", bus.LegacyStream(t.cfg.Stream)).Msg("the earlier versions' partitioned stream is drained and deleted")
		}
	}
}
