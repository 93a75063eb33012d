package runtable

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Flow control: JetStream delivers a message again once consumer.ack_wait
// passed since it was delivered without an acknowledgement or a progress
// acknowledgement. A message waits in three places here: pulled and not
// handed to the partition's handler yet, in the handler's hand (waiting
// for its run while the run's close is written, folding), and folded,
// waiting for the checkpoint that writes its run. On a loaded machine the
// time each takes grows many times over; so
//
//   - every message delivered to a partition is in its ledger from the
//     moment it comes until it is settled (acknowledged, handed back,
//     dead-lettered), with the time its ack wait last started: when it
//     came, or when its progress was last acknowledged. Every tenth of the
//     ack wait a goroutine of the table's own acknowledges the progress of
//     those that waited progressAfter (Table.progress), wherever they
//     are. The ledger has its own lock, held for a few assignments: a
//     fold or a checkpoint holding the partition's lock (part.mu) for a
//     long time, as they do on a loaded machine, does not hold the
//     progress acknowledgements back, and a message's ack wait is counted
//     from when it came, not from when it was folded;
//   - when the table's connection was replaced (the client found it stale:
//     pings unanswered; or the server went away), the progress
//     acknowledgements sent on the old one since it stopped answering
//     are lost, and the broker may already count some of those messages'
//     ack wait as run out (they wait on its redelivery queue for the next
//     pull). The table then restarts the ack wait of every message in its
//     ledgers at once (Table.rejoin), with a negative acknowledgement
//     delayed by the whole ack wait: for a message still waiting it is a
//     progress acknowledgement, and one on the redelivery queue it takes
//     off it (a progress acknowledgement does not). Only then are the
//     partitions' pulls cut and sent again on the new connection: what
//     the old pulls had brought and the table held is not delivered
//     again; what the broker sent on them and never arrived is, once, after
//     the ack wait (the client cannot name it);
//   - a partition pulls once the messages of its last pull were handled,
//     and asks for no more than the handler is measured to handle in a
//     quarter of the ack wait (pullSize, from a moving average of the
//     handler's wall time a message, which counts the machine's load).
//
// A progress acknowledgement is a message to the broker (and a write of
// the consumer's state on every replica): only a message that nears the
// ack wait gets one. One that waited 40 % of it is acknowledged at the
// latest half-way into it (the goroutine's tenth): half the ack wait is
// left for the acknowledgement to reach a loaded broker.

const (
	// initialHandle is a message's handling time before any was
	// measured.
	initialHandle = 5 * time.Millisecond
	// flowAlpha weighs a new measurement in the moving average.
	flowAlpha = 0.05
	// minPull is the least a pull asks for.
	minPull = 1
)

// flow is the table's flow control.
type flow struct {
	ackWait time.Duration
	maxPull int // pullBatch, or less with a smaller consumer.max_ack_pending
	// perMsg is the moving average of the handler's wall time a message
	// (nanoseconds).
	perMsg atomic.Int64
}

func newFlow(ackWait time.Duration, maxAck int) *flow {
	f := &flow{ackWait: ackWait, maxPull: max(min(maxAck, pullBatch), minPull)}
	f.perMsg.Store(int64(initialHandle))
	return f
}

// handled records a message handled in d.
func (f *flow) handled(d time.Duration) {
	old := float64(f.perMsg.Load())
	f.perMsg.Store(int64(old + flowAlpha*(float64(d)-old)))
}

// pullSize is how many messages one pull asks for: what the handler takes
// a quarter of the ack wait to handle, at the measured speed.
func (f *flow) pullSize() int {
	n := int64(f.ackWait/4) / max(f.perMsg.Load(), 1)
	return int(max(min(n, int64(f.maxPull)), minPull))
}

// progressAfter is how long a message waits before its progress is
// acknowledged, and progressEvery how often the waiting ones are looked
// at.
func (f *flow) progressAfter() time.Duration { return f.ackWait * 2 / 5 }
func (f *flow) progressEvery() time.Duration { return max(f.ackWait/10, 10*time.Millisecond) }

// writeGrace is how long a message waits before its progress is
// acknowledged while a write of its run's state that holds it is under
// way (its acknowledgement comes with the write): the latest a message
// gets one otherwise, progressAfter and a look of the goroutine.
func (f *flow) writeGrace() time.Duration { return f.progressAfter() + f.progressEvery() }

// progressBeforeWrite is how many progress acknowledgements a folded
// message waiting for its run's write gets before that write is due
// (checkpoint.go: toWrite). A progress acknowledgement costs the broker
// one replicated update of the consumer's state; a run's write, a
// replicated store of its state in the bucket (and the removal of the
// one before): while a backlog's interleaved runs fold, each run was
// written every 40 % of the ack wait, a write a run every 4 s for as
// long as the fold lasts, where its few messages waiting in that time
// can instead have their progress acknowledged twice.
const progressBeforeWrite = 2

// ahead is how much longer than writeBy a message whose progress was
// acknowledged progressed times since it came may wait for its run's
// write: the progress acknowledgements it gets meanwhile.
func (f *flow) ahead(progressed int) time.Duration {
	return time.Duration(max(progressBeforeWrite-progressed, 0)) * f.progressAfter()
}

// waited is how long f waited for its run's write at now: since its ack
// wait last started, less what ahead (nil: nothing) allows it for the
// progress acknowledgements it still gets before that write is due. The
// ledger's lock is held.
func (f *flight) waited(now time.Time, ahead func(int) time.Duration) time.Duration {
	w := now.Sub(f.at)
	if ahead != nil {
		w -= ahead(f.progressed)
	}
	return w
}

// maxLate bounds how late a partition's writes are taken to start
// (checkpoint.go: late): twice it takes at most a quarter off
// progressAfter.
func (f *flow) maxLate() time.Duration { return f.progressAfter() / 8 }

// acker is what acknowledges a message in flight: the delivered message,
// or its AckRef once folded (the message's data is let go).
type acker interface{ InProgress() error }

// flight is a message in a partition's ledger.
type flight struct {
	// ack and at are guarded by the ledger's lock; at is when the
	// message's ack wait last started (it came, or its progress was
	// acknowledged).
	ack acker
	at  time.Time
	i   int // its index in ledger.fs; -1 once settled
	// reply is the message's acknowledgement subject (Table.rejoin).
	reply string
	// kept is set by the handler when it leaves the message waiting
	// for a checkpoint (read by the handler's goroutine only).
	kept bool
	// writing is set (under the ledger's lock) while a checkpoint writes
	// a state of the message's run that holds it: the write's
	// acknowledgement is on its way, so its progress is acknowledged
	// only once it waited writeGrace.
	writing bool
	// delivered is how many times JetStream delivered the message, this
	// delivery included (set once, when it came).
	delivered uint64
	// progressed is how many progress acknowledgements it got (guarded
	// by the ledger's lock).
	progressed int
	// What a redelivery of the message is traced to (redeliver.go),
	// guarded by the ledger's lock: its stream sequence, when it came,
	// the longest it waited between two starts of its ack wait as this
	// client saw it, the writes holding it that failed, and whether the
	// handler took it.
	seq     uint64
	came    time.Time
	longest time.Duration
	fails   int
	inHand  bool
}

// ledger is a partition's messages in flight: delivered and not settled.
type ledger struct {
	// mu is a leaf lock: nothing is taken, nothing sent while it is held.
	mu sync.Mutex
	fs []*flight
	// settled is the messages settled last, for tracing a redelivery
	// (redeliver.go).
	settled settledRing
}

// addSeq enters a message of stream sequence seq, delivered for the
// delivered-th time, that came at at, acknowledged on subject reply.
func (l *ledger) addSeq(a acker, reply string, seq, delivered uint64, at time.Time) *flight {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := &flight{ack: a, at: at, i: len(l.fs), reply: reply, seq: seq, delivered: delivered, came: at}
	l.fs = append(l.fs, f)
	return f
}

// folded says f waits for a checkpoint, acknowledged through a from now.
func (l *ledger) folded(f *flight, a acker) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f.kept = true
	f.ack = a
}

// done takes a message acknowledged (or terminated) out (again: nothing).
func (l *ledger) done(f *flight) { l.doneAs(f, settledAcked) }

// handBack takes a message negatively acknowledged out: handed back to
// the stream, delivered again (to this member or its partition's next
// owner).
func (l *ledger) handBack(f *flight) { l.doneAs(f, settledHandedBack) }

// doneAs takes a settled message out (again: nothing), how it was settled.
func (l *ledger) doneAs(f *flight, how settledHow) {
	if f == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if f.i < 0 {
		return
	}
	l.settled.add(f, how, time.Now())
	last := len(l.fs) - 1
	l.fs[f.i] = l.fs[last]
	l.fs[f.i].i = f.i
	l.fs[last] = nil
	l.fs = l.fs[:last]
	f.i = -1
}

// setWriting marks fs as held by a write under way (on) or not; it
// returns the longest any of them has waited for its write, past what
// ahead (nil: nothing) allows it for its progress acknowledgements to
// come.
func (l *ledger) setWriting(fs []*flight, on bool, ahead func(int) time.Duration) time.Duration {
	if len(fs) == 0 {
		return 0
	}
	now := time.Now()
	var oldest time.Duration
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range fs {
		f.writing = on
		oldest = max(oldest, f.waited(now, ahead))
	}
	return oldest
}

// writeFailed marks fs as no longer held by a write, which failed.
func (l *ledger) writeFailed(fs []*flight) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range fs {
		f.writing = false
		f.fails++
	}
}

// progress acknowledges the progress of the messages that waited longer
// than after (grace for those a write under way holds); it returns how
// many. The acknowledgements are sent once the lock is let go.
func (l *ledger) progress(now time.Time, after, grace time.Duration) int {
	var due []acker
	l.mu.Lock()
	for _, f := range l.fs {
		if w := now.Sub(f.at); w > after && (!f.writing || w > grace) {
			f.longest = max(f.longest, w)
			f.at = now
			f.progressed++
			due = append(due, f.ack)
		}
	}
	l.mu.Unlock()
	for _, a := range due {
		_ = a.InProgress()
	}
	return len(due)
}

// progress acknowledges, every progressEvery until ctx ends, the progress
// of every message in flight of the table's partitions that waited
// progressAfter (pulled, in hand or folded), so that it is not delivered
// again however long its handling or its checkpoint takes.
func (t *Table) progress(ctx context.Context) {
	tk := time.NewTicker(t.flow.progressEvery())
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		after, grace := t.flow.progressAfter(), t.flow.writeGrace()
		for _, pt := range t.parts() {
			t.m.progress.Add(float64(pt.fl.progress(time.Now(), after, grace)))
		}
	}
}

// keep restarts the ack wait of every message in the ledger at now by
// publishing body (a delayed negative acknowledgement: Table.rejoin) on
// its acknowledgement subject, asking for the broker's answer on reply;
// it returns how many. The messages are published once the lock is let go.
func (l *ledger) keep(nc *nats.Conn, body []byte, reply string, now time.Time) int {
	var subjects []string
	l.mu.Lock()
	for _, f := range l.fs {
		if f.reply != "" {
			f.at = now
			subjects = append(subjects, f.reply)
		}
	}
	l.mu.Unlock()
	n := 0
	for _, s := range subjects {
		if nc.PublishRequest(s, reply, body) == nil {
			n++
		}
	}
	return n
}

// rejoinBody is the acknowledgement that restarts a message's ack wait of
// ackWait whether or not the broker counts it as run out: a negative
// acknowledgement delayed by the whole ack wait (the broker takes the
// message off its redelivery queue and starts its wait again, as of now).
// A message's client-side acknowledgement state is not touched (it is
// published on the subject directly), so it is acknowledged as usual.
func rejoinBody(ackWait time.Duration) []byte {
	return fmt.Appendf(nil, "-NAK {\"delay\": %d}", ackWait.Nanoseconds())
}

// rejoin is what the table does once its connection was replaced: every
// message in flight (pulled, in hand, folded and waiting for a
// checkpoint) gets its ack wait restarted (ledger.keep), and once the
// broker answered each of those (it takes a consumer's acknowledgements
// and its pulls in different places: a pull sent before the answers could
// be served what waits on the redelivery queue) or a quarter of the ack
// wait passed, every partition's pull is cut and sent again on the new
// connection (awaitConn holds the partitions' pulls until then). It
// returns how many messages were kept and how many the broker answered;
// reconnects is the connection's reconnection count it handles. A table
// that stops (ctx) waits for no answer.
func (t *Table) rejoin(ctx context.Context, reconnects uint64) (kept, answered int) {
	nc := t.js.Conn()
	body := rejoinBody(t.flow.ackWait)
	inbox := nc.NewRespInbox()
	var got atomic.Int64
	more := make(chan struct{}, 1)
	sub, err := nc.Subscribe(inbox, func(*nats.Msg) {
		got.Add(1)
		select {
		case more <- struct{}{}:
		default:
		}
	})
	if err != nil {
		inbox = "" // kept unanswered: a round trip is the wait
	}
	for _, pt := range t.parts() {
		kept += pt.fl.keep(nc, body, inbox, time.Now())
	}
	t.m.progress.Add(float64(kept))
	bound := max(t.flow.ackWait/4, time.Second)
	if err != nil {
		_ = nc.FlushTimeout(bound)
	} else {
		wait := time.NewTimer(bound)
	answers:
		for got.Load() < int64(kept) {
			select {
			case <-more:
			case <-wait.C:
				break answers
			case <-ctx.Done():
				break answers
			}
		}
		wait.Stop()
		_ = sub.Unsubscribe()
	}
	answered = int(got.Load())
	t.rejoined.Store(reconnects)
	for _, pt := range t.parts() {
		for _, c := range pt.cons {
			c.cutPull()
		}
	}
	return kept, answered
}

// rejoins calls rejoin every time the table's connection was replaced,
// until ctx ends: told by the connection, or seen at a look every
// progressEvery (a change told before the listener was in place).
func (t *Table) rejoins(ctx context.Context) {
	nc := t.js.Conn()
	ch := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(ch)
	tk := time.NewTicker(t.flow.progressEvery())
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case <-tk.C:
		}
		r := nc.Stats().Reconnects
		if r == t.rejoined.Load() || !nc.IsConnected() {
			continue
		}
		kept, answered := t.rejoin(ctx, r)
		t.log.Info().Int("in_flight", kept).Int("answered", answered).Str("server", nc.ConnectedUrlRedacted()).
			Msg("connection replaced: the ack wait of every message in flight restarted, pulls sent again")
	}
}

// awaitConn returns once the table's connection is up and rejoin handled
// its last reconnection (or ctx ended): a pull sent meanwhile would wait
// in the client's buffer and reach the broker before rejoin's
// acknowledgements.
func (t *Table) awaitConn(ctx context.Context) {
	nc := t.js.Conn()
	for ctx.Err() == nil && (!nc.IsConnected() || nc.Stats().Reconnects != t.rejoined.Load()) {
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}
