package runtable

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/fleet"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// part is the table of one partition this aggregator owns: its runs in
// memory, the messages folded into them and not yet acknowledged, and the
// goroutines that consume it and write its checkpoints.
type part struct {
	t     *Table
	p     int
	lease *fleet.Lease
	cons  []*partConsumer // the partition's consumer (and the legacy one)

	// mu guards the fields below. It is taken after ckptMu and after the
	// consumer's handler lock (consume), and no other lock is taken while
	// it is held; it is never held across a write to the broker (the
	// fenced writes take the lease's own lock).
	mu   sync.Mutex
	runs map[string]*liveRun
	// cold are the partition's open runs kept in the state bucket only:
	// their last event's time and where their state lies in the bucket
	// (memory.go).
	cold map[string]coldRun
	// coldSince is at most the oldest of those times (zero: none cold),
	// so that the idle timeout's pass skips them all until it passed.
	coldSince time.Time
	// coldFloor is where the partition's due cold run written first lies
	// in the bucket, as its last idle pass found, at floorAt (Unix ns by
	// Config.Now; 0: none due); other partitions read (memory.go:
	// reviveIdle).
	coldFloor, floorAt atomic.Int64
	// heldFloor is where the partition's held run due by its idle
	// timeout written first lies in the bucket, as its last close pass
	// found, at heldAt (Unix ns by Config.Now; 0: none due); other
	// partitions read (memory.go: heldInSpan).
	heldFloor, heldAt atomic.Int64

	pending  []pendingMsg
	compactQ []compactDue
	// ckpt is when the partition last checkpointed without a failure.
	ckpt time.Time
	// ckptDone is closed when the checkpoint under way (or the next)
	// ended, and replaced (memory.go: waitRoom).
	ckptDone chan struct{}

	// ckptMu makes the partition's checkpoints and closes run one at a
	// time (the loop's, and Release's last one). It is taken first: a
	// checkpoint holds it while it takes mu, the lease's lock (the fenced
	// writes), Table.mu, and the sinks' and Deliveries' locks (a closed
	// run's split); ckptMu must not be taken while any of them is held.
	ckptMu  sync.Mutex
	backoff time.Duration // after a failed write of the bucket
	failing bool          // the last write failed (said once)
	// retryAt: a failing partition does not close runs before it (their
	// writes wait out the same back-off as its checkpoints).
	retryAt time.Time
	// heldSince: its close passes are held for the heap since then
	// (hold.go: closesHeld); held says so to any goroutine.
	heldSince time.Time
	held      atomic.Bool

	kick chan struct{}
	// kickedFull says the kick was for max_ack_pending (not for room).
	kickedFull atomic.Bool
	stopLoop   func()
	// drained is set once a stop wrote what the partition held (stop.go):
	// its loop only records the sinks' deliveries from then on.
	drained atomic.Bool
	// fl is the partition's messages in flight (flow.go), under its own
	// lock (a leaf: taken under mu, ckptMu and the handler's lock).
	fl ledger
	// writeTook is how long the partition's checkpoints that wrote took
	// (a moving average, nanoseconds; checkpoint.go: holdFor).
	writeTook atomic.Int64
	// writeLate is how much later than writeBy the partition's writes
	// held their oldest message (a moving average, nanoseconds: the
	// loop's look, a checkpoint under way, the lock; checkpoint.go).
	writeLate atomic.Int64
}

// liveRun is a run of the partition in memory.
type liveRun struct {
	st    *RunState
	dirty bool // events folded since the last write took the state
	// folds counts the events folded into the run, written how many the
	// last successful write of its state held: a message is durable once
	// written reached the count its fold left.
	folds, written uint64
	// stored says the run's open key exists (the first write also writes
	// its summary).
	stored bool
	// closing is set while the run's closed state is written: its events
	// wait for it (see handle).
	closing chan struct{}
	// unsure: a close of the run failed, and its write may have gone
	// through all the same (a timeout: the broker stored it, its answer
	// came too late), its open key purged. Such a run is not shed: read
	// back, it would have no open key and be taken for closed, its split
	// never delivered. Its next close, or a write of its open state,
	// settles it.
	unsure bool
	// finished is when the run-finished event was folded (the close
	// latency's start).
	finished time.Time
	// size is the length of the run's state as last written or read
	// (0: never), cost what it is taken to cost in memory (memory.go).
	size int
	cost int64
	// at is where the run's state was last written in the bucket (the
	// store's position then: memory.go, reviveIdle).
	at int64
	// warm: read back from the bucket to be closed (reviveIdle), and not
	// written since; its close is not held to the held span (its place
	// is the read-backs', which keep to theirs).
	warm bool
}

func (r *liveRun) state() string {
	if r.st.Finished {
		return "finished"
	}
	return "open"
}

// pendingMsg is a folded message awaiting its acknowledgement.
type pendingMsg struct {
	ack bus.AckRef
	run *liveRun
	gen uint64  // run.folds once the message was folded
	fl  *flight // its entry in the partition's ledger
}

// compactDue is a closed run whose state is still full.
type compactDue struct {
	id string
	at time.Time // closed at
}

func newPart(t *Table, l *fleet.Lease) *part {
	return &part{t: t, p: l.Partition, lease: l, runs: map[string]*liveRun{}, cold: map[string]coldRun{}, ckptDone: make(chan struct{}), kick: make(chan struct{}, 1), ckpt: t.cfg.Now()}
}

// load reads the partition's open runs from the bucket (one pass over its
// open keys) and resumes them, sends again the splits of its closed runs
// not every sink settled (one pass over its pending markers), and queues
// for compaction the closed runs the run index says are not compacted.
func (pt *part) load(ctx context.Context) error {
	t := pt.t
	var resend []*RunState
	n := 0
	err := t.st.load(ctx, openPrefix(pt.p), func(e entry) error {
		st, err := decodeStored(t, e.key[len(openPrefix(pt.p)):], e.value)
		if err != nil {
			// Not lost without a trace: dead-lettered, and the run
			// folded again from the events stream (recover.go).
			st, err := pt.recoverOpen(ctx, e.key, e.value, err)
			if err == nil && st != nil {
				pt.addRun(st.Origin.RunID, &liveRun{st: st, dirty: true})
				n++
			}
			return err
		}
		if st == nil {
			// An earlier version's marker (its value the run id): the
			// run's state is under its closed key.
			if st, err = pt.legacy(ctx, e.key); err != nil || st == nil {
				return err
			}
			if st.Closed {
				if st.SinksPending {
					resend = append(resend, st)
				}
				return nil
			}
			// Open: written under its open key at the next checkpoint.
			pt.addRun(st.Origin.RunID, &liveRun{st: st, dirty: true})
			n++
			return nil
		}
		if st.Closed {
			// Closed, its open key not purged yet (its owner stopped in
			// between): the close finishes now.
			return pt.finishClose(ctx, st)
		}
		n++
		if t.mem.budget > 0 && t.memUsed()+runCost(len(e.value)) > t.mem.budget {
			// Past the memory bound: kept in the bucket (memory.go).
			pt.addCold(st.Origin.RunID, st.LastEvent, 0)
			return nil
		}
		pt.addRun(st.Origin.RunID, &liveRun{st: st, stored: true, size: len(e.value)})
		return nil
	})
	if err == nil && t.cfg.Sinks != nil {
		err = t.st.load(ctx, pendPrefix(pt.p), func(e entry) error {
			b, err := t.st.get(ctx, e.key[len(pendPrefix(pt.p)):])
			if errors.Is(err, errNotFound) {
				return t.st.purge(ctx, pt.lease, e.key) // expired meanwhile
			}
			if err != nil {
				return err
			}
			st, err := UnmarshalState(b, t.cfg.Fold)
			if err != nil {
				id, _ := runOfKey(e.key[len(pendPrefix(pt.p)):])
				t.deadLetterState(ctx, e.key[len(pendPrefix(pt.p)):], events.Origin{RunID: id}, b, err)
				t.log.Warn().Str("key", e.key[len(pendPrefix(pt.p)):]).Err(err).Msg("unreadable run state dead-lettered: its split is not sent again")
				return nil
			}
			resend = append(resend, st)
			return nil
		})
	}
	if err != nil {
		pt.mu.Lock()
		pt.forgetLocked()
		pt.mu.Unlock()
		return err
	}
	for _, s := range t.index.closedFull(pt.p, t.cfg.Partitions) {
		pt.compactQ = append(pt.compactQ, compactDue{id: s.ID, at: s.ClosedAt})
	}
	slices.SortFunc(pt.compactQ, func(a, b compactDue) int { return a.at.Compare(b.at) })
	t.m.runsOpen.Add(float64(n))
	t.memChanged()
	for _, st := range resend {
		pt.resend1(ctx, st)
	}
	if n > 0 || len(resend) > 0 {
		t.log.Info().Int("partition", pt.p).Int("runs", n).Int("resent", len(resend)).Msg("resumed the partition's open runs from the state bucket")
	}
	return nil
}

// legacy takes over a run an earlier version marked open (its marker's
// value the run id, its state under the closed key): the marker goes, and
// a closed run whose split is pending gets a pending marker. It returns
// the run's state (nil: none).
func (pt *part) legacy(ctx context.Context, key string) (*RunState, error) {
	t := pt.t
	b, err := t.st.get(ctx, key[len(openPrefix(pt.p)):])
	if errors.Is(err, errNotFound) {
		return nil, t.st.purge(ctx, pt.lease, key)
	}
	if err != nil {
		return nil, err
	}
	st, err := UnmarshalState(b, t.cfg.Fold)
	if err != nil {
		t.log.Warn().Str("key", key).Err(err).Msg("unreadable run state skipped")
		return nil, nil
	}
	if !st.Closed {
		return st, nil
	}
	if st.SinksPending && t.cfg.Sinks != nil {
		if err := t.st.put(ctx, pt.lease, pendKey(pt.p, st.Origin.RunID), []byte(st.Origin.RunID)); err != nil {
			return nil, err
		}
	}
	pt.queueClosed(st)
	return st, t.st.purge(ctx, pt.lease, key)
}

// forget drops the partition's runs from memory (those kept in the bucket
// too).
func (pt *part) forget() {
	pt.mu.Lock()
	pt.t.m.runsOpen.Sub(float64(len(pt.runs) + len(pt.cold)))
	pt.forgetLocked()
	pt.mu.Unlock()
	pt.t.memChanged()
}

// forgetLocked drops the partition's runs, those kept in the bucket too,
// and what waits for them. pt.mu is held.
func (pt *part) forgetLocked() {
	for id := range pt.runs {
		pt.removeRun(id)
	}
	pt.forgetCold()
	pt.handBackPendingLocked("forgotten")
	pt.compactQ = nil
}

// handBackPending hands back, at once, every message folded and waiting
// for its run's write (the partition writes nothing any more: its lease
// was lost, or it is forgotten): its next owner gets it now, not an ack
// wait later.
func (pt *part) handBackPending(why string) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.handBackPendingLocked(why)
}

// handBackPendingLocked is handBackPending with pt.mu held.
func (pt *part) handBackPendingLocked(why string) {
	for _, pm := range pt.pending {
		_ = pm.ack.Nak()
		pt.handBack(pm.fl, why)
	}
	pt.pending = nil
}

// forgetRun drops a run from memory (its state stays in the bucket).
// pt.mu is held.
func (pt *part) forgetRun(id string) {
	pt.removeRun(id)
	pt.t.m.runsOpen.Dec()
}

// errNotOwned is handle's error for a partition this aggregator no longer
// owns: the message is left for its next owner.
var errNotOwned = errors.New("partition not owned")

// errWrongPartition marks an event whose run id is not the one its subject
// names (its subject put it in another partition).
var errWrongPartition = errors.New("the event's run id is not the run of its subject")

// errLongID marks an event whose run id is longer than MaxRunIDBytes.
var errLongID = errors.New("run id too long")

// handle folds one message into its run and queues it for acknowledgement
// after the next checkpoint (fl, its entry in the ledger, is then kept). An
// error leaves the message unacknowledged (it comes again).
func (pt *part) handle(ctx context.Context, msg bus.Msg, fl *flight) error {
	t := pt.t
	d, lf, ok, err := pt.decode(ctx, msg)
	if !ok {
		return err
	}
	t0 := time.Now()
	pt.waitRoom(ctx, d.Origin.RunID) // past the memory bound (memory.go)
	r, err := pt.lockRun(ctx, d.Origin)
	if errors.Is(err, errNotState) {
		return t.deadLetter(ctx, msg, err)
	} else if err != nil {
		return err // the bucket is not reachable: redelivered later
	}
	// pt.mu held from here.
	final, refuse := pt.admit(ctx, msg, r, &d, lf)
	if refuse != nil {
		pt.mu.Unlock()
		return refuse()
	}
	fresh := pt.fold(msg, r, d, final)
	ack := msg.AckRef()
	pt.fl.folded(fl, ack)
	pt.pending = append(pt.pending, pendingMsg{ack: ack, run: r, gen: r.folds, fl: fl})
	// A run made complete is closed by the loop's next pass (closeDue
	// writes its closed state, which holds its events): no checkpoint of
	// the partition's other runs for it.
	due := len(pt.pending) >= max(t.cfg.Consumer.MaxAckPending/2, 1)
	pt.mu.Unlock()
	if fresh {
		t.m.foldSeconds.Observe(time.Since(t0).Seconds())
	}
	t.m.folded.Inc()
	if due {
		pt.kickedFull.Store(true)
		select {
		case pt.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// decode reads a message of the partition as an event to fold. When it is
// not one (ok false), the message is settled: acknowledged (a split, or a
// dead letter on the partition's subjects), dead-lettered (a kind of
// event it does not know, one it cannot decode, one whose subject does
// not match what it says, whose run id is too long or of another
// partition), or left unacknowledged with err (the lease is lost; one in
// doubt is waited for).
func (pt *part) decode(ctx context.Context, msg bus.Msg) (d events.Decoded, lf *llamalog.LineFilter, ok bool, err error) {
	t := pt.t
	if !held(ctx, pt.lease) {
		return d, nil, false, errNotOwned
	}
	if !bus.Folded(msg.Subject()) {
		if bus.Unfolded(msg.Subject()) {
			return d, nil, false, msg.Ack() // a split or a dead letter: the partition's filter takes every kind
		}
		return d, nil, false, t.deadLetter(ctx, msg, unknownKind(msg))
	}
	if msg.Metadata().NumDelivered > 1 {
		t.m.redelivered.Inc()
	}
	// The log lines no rule reads are counted, not unescaped (most of a
	// batch).
	lf = t.parser.NewLineFilter()
	d, err = msg.DecodeFiltered(lf)
	if err != nil {
		return d, nil, false, t.deadLetter(ctx, msg, err)
	}
	if d.Type == events.TypeSplit {
		return d, nil, false, msg.Ack()
	}
	if err := checkSubject(msg.Subject(), d); err != nil {
		return d, nil, false, t.deadLetter(ctx, msg, err)
	}
	id := d.Origin.RunID
	if len(id) > MaxRunIDBytes {
		return d, nil, false, t.deadLetter(ctx, msg, fmt.Errorf("%w: %d bytes, at most %d", errLongID, len(id), MaxRunIDBytes))
	}
	if partitionOf(id, t.cfg.Partitions) != pt.p {
		return d, nil, false, t.deadLetter(ctx, msg, fmt.Errorf("%w: run %q on subject %q", errWrongPartition, id, bus.PublishedSubject(msg.Subject())))
	}
	return d, lf, true, nil
}

// lockRun returns the live run of o with pt.mu held, once no close of it
// is being written (an event meets the closed run, and a late one
// re-opens it). On error pt.mu is not held: the bucket is not reachable,
// or the run's stored state is not one (errNotState).
func (pt *part) lockRun(ctx context.Context, o events.Origin) (*liveRun, error) {
	for {
		r, err := pt.run(ctx, o)
		if err != nil {
			return nil, err
		}
		pt.mu.Lock()
		if pt.runs[o.RunID] != r {
			pt.mu.Unlock() // closed and forgotten meanwhile: again
			continue
		}
		if r.closing == nil {
			return r, nil // pt.mu held
		}
		// Its closed state is being written: the event meets the
		// closed run (a late event re-opens it).
		ch := r.closing
		pt.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// admit says, under pt.mu, whether run r takes event d: refuse, when not
// nil, settles the message once pt.mu is released (the event is not its
// sender's to send, new to a run that is final, or new to a compacted
// one); final says d repeats what a final run folded. A verbose log's
// first batches are decoded whole into d (see below).
func (pt *part) admit(ctx context.Context, msg bus.Msg, r *liveRun, d *events.Decoded, lf *llamalog.LineFilter) (final bool, refuse func() error) {
	t := pt.t
	id := d.Origin.RunID
	// loadedOnly: a closed run read from the bucket for this event alone.
	loadedOnly := r.st.Closed && !r.dirty && r.folds == r.written
	if err := checkOwner(r.st, *d); err != nil {
		if loadedOnly {
			pt.forgetRun(id)
		}
		return false, func() error { return t.deadLetter(ctx, msg, err) }
	}
	if d.Span != nil && lf.SkippedMarker() && r.st.Fold != nil && r.st.Fold.WantsDebug() {
		// The batch may hold the run's first -v marker, which the
		// filter leaves out: take it whole (the first batches of a
		// verbose log only).
		if whole, err := msg.Decode(); err == nil {
			*d = whole
		}
	}
	// (The fingerprint of its bytes is taken only for a final run, which
	// folds nothing, or as the event is folded: once a message.)
	final, ferr := finalCheck(r.st, *d, func() uint64 { return fingerprint(msg.Data()) }, t.cfg.Fold)
	if ferr != nil {
		// New to a run closed complete: it is final (see origin.go).
		if loadedOnly {
			pt.forgetRun(id)
		}
		return false, func() error { return t.deadLetter(ctx, msg, ferr) }
	}
	if r.st.Compact() && !r.st.holds(*d) {
		// New to a run whose record was compacted: not folded (see late).
		pt.forgetRun(id)
		st := r.st
		return false, func() error { return t.late(ctx, msg, st) }
	}
	return final, nil
}

// fold folds d into run r under pt.mu, unless it repeats what the run
// holds (final: what a final run folded); fresh says it was folded.
func (pt *part) fold(msg bus.Msg, r *liveRun, d events.Decoded, final bool) (fresh bool) {
	t := pt.t
	id := d.Origin.RunID
	reopens := r.st.Closed
	fresh = !final && ApplyTo(r.st, d)
	if fresh && reopens {
		r.st.reopened()
		t.log.Info().Str("run_id", id).Str("host", d.Origin.Host).Str("event", d.ID).
			Msg("a late event of its host re-opens a run closed incomplete: its split is replaced at its next close")
	}
	if !fresh {
		// A duplicate (a redelivery, or an event re-published under
		// another message id): nothing to write, only to acknowledge
		// once what it repeats is durable.
		t.m.duplicates.Inc()
		if r.st.Closed && !r.dirty && r.folds == r.written {
			pt.forgetRun(id) // loaded only to see it was a duplicate
		}
		return false
	}
	if r.st.Digests != nil {
		r.st.Digests.Add(fingerprint(msg.Data()))
	}
	// (A finish drained from the legacy stream has a sequence of that
	// stream: the ack floor says nothing of it.)
	if seq := msg.Metadata().StreamSeq; d.Finished != nil && seq > r.st.FinishedSeq && msg.Metadata().Stream == t.cfg.Stream {
		r.st.FinishedSeq = seq
		r.finished = time.Now()
	}
	r.st.LastEvent = t.cfg.Now()
	r.dirty = true
	r.folds++
	return true
}

// run returns the live run of o, reading it from the bucket (without
// pt.mu) when it is not in memory: a run of an owned partition that is not
// in memory is new, or closed (its closed key).
func (pt *part) run(ctx context.Context, o events.Origin) (*liveRun, error) {
	pt.mu.Lock()
	r := pt.runs[o.RunID]
	pt.mu.Unlock()
	if r != nil {
		return r, nil
	}
	// An open run kept in the bucket only (memory.go) is read back.
	r, err := pt.warmRun(ctx, o.RunID)
	if err != nil {
		return nil, err
	}
	if r != nil {
		pt.mu.Lock()
		r = pt.installWarm(o.RunID, r)
		pt.mu.Unlock()
		pt.t.memChanged()
		return r, nil
	}
	r, err = pt.readClosed(ctx, o)
	if err != nil {
		return nil, err
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if cur := pt.runs[o.RunID]; cur != nil {
		return cur, nil // read meanwhile by another handler
	}
	pt.addRun(o.RunID, r)
	pt.t.m.runsOpen.Inc() // a closed run re-opened by a late event counts again
	return r, nil
}

// readClosed reads a run's closed state, or returns a new run when there
// is none.
func (pt *part) readClosed(ctx context.Context, o events.Origin) (*liveRun, error) {
	b, err := pt.t.st.get(ctx, stateKey(o.RunID))
	switch {
	case err == nil:
		st, err := UnmarshalState(b, pt.t.cfg.Fold)
		if err != nil {
			// Said and dead-lettered (once: the dead letter's id is
			// the value's); the event meets no state to fold into.
			pt.t.deadLetterState(ctx, stateKey(o.RunID), o, b, err)
			return nil, fmt.Errorf("%w: the closed state of run %q: %w", errNotState, o.RunID, err)
		}
		return &liveRun{st: st, size: len(b)}, nil
	case errors.Is(err, errNotFound):
		return &liveRun{st: NewRunState(o, pt.t.cfg.Fold)}, nil
	}
	return nil, fmt.Errorf("state of run %q: %w", o.RunID, err)
}

// NewRunState returns the empty state of a run of origin o.
func NewRunState(o events.Origin, opts split.Options) *RunState {
	return &RunState{Origin: o, Fold: split.NewFold(opts), Digests: &Digests{}}
}

// startLoop starts the partition's checkpoint loop.
func (pt *part) startLoop() {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); pt.loop(ctx) }()
	pt.stopLoop = func() { stop(); <-done }
}

// loop checkpoints at the checkpoint interval (sooner when handle asks),
// and between checkpoints closes the runs that are due and records the
// sinks' deliveries every tickEvery, until ctx ends.
func (pt *part) loop(ctx context.Context) {
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	last := time.Now()
	for {
		var kicked writeCause
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-pt.kick:
			kicked = causeRoom
			if pt.kickedFull.Swap(false) {
				kicked = causeKick
			}
		}
		wait := pt.t.cfg.Consumer.CheckpointInterval
		due := false
		if pt.backoff > 0 {
			wait = pt.backoff // a failing bucket is not asked again at once
			kicked = ""
		} else {
			due = pt.writeDue(time.Now())
		}
		// A checkpoint under way is not cut short by the stop: its
		// writes would fail, and the release writes again what it holds.
		wctx := context.WithoutCancel(ctx)
		if kicked != "" || due || time.Since(last) >= wait {
			// A kick (half of max_ack_pending waits, or room in
			// memory) writes every changed run.
			pt.checkpoint(wctx, false, kicked)
			last = time.Now()
			continue
		}
		pt.ckptMu.Lock()
		pt.afterCheckpoint(wctx)
		pt.ckptMu.Unlock()
	}
}
