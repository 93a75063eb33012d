package runtable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/fleet"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// Closing: a finished run whose fold holds everything its collector
// announced, or a run idle for longer than the idle timeout (incomplete),
// is closed: its closed state is written under its closed key, its open
// key purged (fenced), then its split goes to the sinks, to the split
// subject and to the printer. With sinks, a small pending marker says its
// split is not settled by every sink yet, until they all did (a
// partition's next owner sends the split again). A closed run keeps its
// full state for Config.CompactAfter (a late event re-opens it and folds
// as if it had come in time), then it is replaced by its compact record.

// compactBatch bounds the states one pass compacts.
const compactBatch = 32

// closeBatch bounds the runs one pass of the loop closes (the next tick
// closes more): a pass that closed every idle run of a flood at once
// held the closed copies, states and splits of thousands of runs
// together (100 MiB of a 229 MiB heap for 50,000 runs closing), and had
// the broker write them all in one go.
const closeBatch = 64

// errLate is the dead-letter cause of a new event for a compacted run.
var errLate = errors.New("late")

// afterCheckpoint is what a partition does at every tick: close the runs
// that are due, record the sinks' deliveries, compact; while the heap is
// past its share (hold.go) only record the deliveries. pt.ckptMu is held.
func (pt *part) afterCheckpoint(ctx context.Context) {
	if pt.closesHeld() {
		pt.settle(ctx)
		return
	}
	pt.closeDue(ctx, closeBatch)
	pt.settle(ctx)
	pt.compact(ctx)
	pt.resendOverflow(ctx)
}

// closing is a run being closed: the closed copy of its state, its
// encoding and split, and the outcome of the write.
type closing struct {
	id      string
	r       *liveRun
	st      *RunState
	b       []byte
	rep     split.Report
	folds   uint64 // the run's folds the closed state holds
	changed bool   // a split not written before
	now     time.Time
	err     error
}

// closeDue closes the runs that are finished (and complete, with every
// earlier event acknowledged) or idle, at most limit of them (0: every
// one), those closeFirst gives. pt.ckptMu is held.
func (pt *part) closeDue(ctx context.Context, limit int) {
	t := pt.t
	if pt.failing && time.Now().Before(pt.retryAt) {
		return // the bucket refuses writes: the closes wait out the back-off too
	}
	now := t.cfg.Now()
	pt.reviveIdle(ctx, now) // idle runs kept in the bucket close too
	pt.mu.Lock()
	first := pt.closeFirst(ctx, now, limit)
	var cs []*closing
	for _, c := range first {
		r := c.r
		if r == nil || pt.runs[c.id] != r || r.st.Closed || r.closing != nil || ((r.dirty || r.folds != r.written) && !c.complete) {
			continue // changed while the lock was let go
		}
		if cl := pt.closeCopy(r, c.id, now); cl != nil {
			r.closing = make(chan struct{})
			cs = append(cs, cl)
		}
	}
	pt.mu.Unlock()
	if len(cs) == 0 {
		return
	}
	pt.writeCloses(ctx, cs)
	pt.mu.Lock()
	var done []*closing
	var failed error
	wrote := false
	for _, c := range cs {
		wrote = wrote || c.err == nil
		if pt.closed1(c) {
			done = append(done, c)
		}
		if c.err != nil && !errors.Is(c.err, fleet.ErrLost) {
			failed = c.err
		}
	}
	pt.mu.Unlock()
	if failed != nil {
		pt.fail(failed) // said once per episode, with the checkpoints'
	} else {
		pt.recovered()
	}
	if wrote {
		pt.settleAcks(false) // the closed runs' events
	}
	for _, c := range done {
		pt.deliver(ctx, c)
	}
}

// closeFirst is which runs a close pass closes at now, at most limit
// (0: every one): in the order of their ids; but a bounded pass (limit >
// 0, a table with a memory bound, the live heap near its share:
// heapNear) takes the runs that close at once first (finished, read back
// to be closed, or of an unknown place in the bucket), then the held runs
// due by their idle timeout alone within the held span (memory.go:
// heldInSpan), those written first first. Bounded all the time, the held
// runs waiting outside the span kept the runs' room, more new runs were
// shed and read back later, and a flood of 100,000 closing runs closed
// half as fast. pt.mu is held (let go as dueRuns does).
func (pt *part) closeFirst(ctx context.Context, now time.Time, limit int) []closeCand {
	bounded := limit > 0 && pt.t.mem.budget > 0 && pt.t.heapNear()
	first, spanned := pt.dueRuns(ctx, now, limit, bounded)
	if bounded {
		for _, id := range pt.heldInSpan(now, spanned, limit-len(first)) {
			first = append(first, closeCand{id, pt.runs[id], false})
		}
	}
	return first
}

// closeCand is a run a close pass found due.
type closeCand struct {
	id       string
	r        *liveRun
	complete bool
}

// dueRuns is which of the partition's runs are due to close at now: at
// most limit (0: every one) that close at once, in the order of their
// ids, and when bounded every held run due by its idle timeout alone
// (with where its state lies, for heldInSpan). pt.mu is held (let go
// while a finished run's earlier events are looked at).
func (pt *part) dueRuns(ctx context.Context, now time.Time, limit int, bounded bool) (first []closeCand, spanned []stamped) {
	t := pt.t
	var floor *uint64 // read once, when a finished run needs it
	ids := make([]string, 0, len(pt.runs))
	for id := range pt.runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if limit > 0 && len(first) >= limit && !bounded {
			break // the next pass closes the rest
		}
		r := pt.runs[id]
		if r == nil {
			continue // gone while the lock was let go
		}
		// A complete run closes as it is: its closed state holds every
		// event folded (those not written yet are acknowledged once it
		// is). Any other waits for the checkpoint that writes it.
		complete := !r.st.Closed && r.st.Finished && r.st.Fold.Complete()
		if r.st.Closed || r.closing != nil || ((r.dirty || r.folds != r.written) && !complete) {
			continue
		}
		idle := t.cfg.IdleTimeout > 0 && !r.st.LastEvent.IsZero() && now.Sub(r.st.LastEvent) > t.cfg.IdleTimeout
		// A run whose collector dropped events never completes: it
		// closes once nothing came for dropGrace.
		dropped := r.st.Dropped > 0 && !r.st.LastEvent.IsZero() && now.Sub(r.st.LastEvent) > dropGrace
		// Complete by content: whatever is still on its way repeats
		// what the fold holds. A run that lost events waits for the
		// events before its finish to be acknowledged too.
		due := complete
		if !due && r.st.Finished && dropped {
			pt.mu.Unlock()
			due = pt.settled(ctx, r.st, &floor)
			pt.mu.Lock()
		}
		if (!idle && !due) || r.closing != nil || (r.dirty && !complete) {
			continue
		}
		if bounded && !due && !r.warm && !r.unsure && r.at > 0 {
			spanned = append(spanned, stamped{id, r.at}) // every one: where the first lies
			continue
		}
		if limit > 0 && len(first) >= limit {
			continue // the next pass closes the rest
		}
		first = append(first, closeCand{id, r, complete})
	}
	return first, spanned
}

// settled says every message before st's run-finished event was
// acknowledged (the partition consumer's ack floor reached it), so no
// earlier event of the run is still on its way; *floor caches the floor
// for one pass.
func (pt *part) settled(ctx context.Context, st *RunState, floor **uint64) bool {
	if st.FinishedSeq == 0 || len(pt.cons) == 0 {
		return true
	}
	if *floor == nil {
		var f uint64
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if ci, err := pt.cons[0].cons.Info(cctx); err == nil {
			f = ci.AckFloor.Stream
		}
		cancel()
		*floor = &f // 0 on an error: nothing settles in this pass
	}
	return **floor >= st.FinishedSeq
}

// closeCopy makes r's closed state, its split and encoding; nil when that
// fails (logged). pt.mu is held.
func (pt *part) closeCopy(r *liveRun, id string, now time.Time) *closing {
	t := pt.t
	// Close a copy: a failed write leaves the live state as it was. The
	// copy shares the fold (nothing changes it while the run is closing)
	// unless the close finishes it.
	c := *r.st
	st := &c
	if !st.Finished {
		var err error
		if st, err = cloneState(r.st, t.cfg.Fold); err != nil {
			t.log.Error().Err(err).Str("run_id", id).Msg("run state not copied")
			return nil
		}
		st.Fold.Finish(split.FinishInfo{Finished: now, Incomplete: true})
	}
	rep := Report(st)
	js, err := split.JSON(rep)
	if err != nil {
		t.log.Error().Err(err).Str("run_id", id).Msg("split not encoded")
		return nil
	}
	changed := string(js) != st.Reported
	st.Closed, st.ClosedAt = true, now
	st.Reported = string(js)
	st.SinksPending = false // the pending marker says it (see writeClosed)
	if changed {
		st.Splits++
	}
	b, err := MarshalState(st)
	if err != nil {
		t.log.Error().Err(err).Str("run_id", id).Msg("closed state not encoded")
		return nil
	}
	return &closing{id: id, r: r, st: st, b: b, rep: rep, folds: r.folds, changed: changed, now: now}
}

// writeCloses writes the closes of cs in one batch (batch.go): each
// its closed state under the run's closed key, its pending marker (a new
// split, and sinks to settle it), its summary, and the purge of its open
// key. Each close gets its outcome in err: a close is written once all
// its writes are; one after a write that failed is not (the next owner
// closes it, or this table again). When the write failed because the
// lease was lost, a close is written as soon as the next owner cannot
// close it again: its closed state went through and it has no open key
// (a complete run closed before any checkpoint): the next owner finds the
// run closed and takes its events again for duplicates, so this table
// reports it (once its pending marker is in, the next owner sends the
// split again too).
func (pt *part) writeCloses(ctx context.Context, cs []*closing) {
	t := pt.t
	var b writeBatch
	last := make([]int, len(cs))    // cs[i]'s last write in b
	durable := make([]int, len(cs)) // the write of b after which nobody closes cs[i] again
	for i, c := range cs {
		// The pending marker goes first: a closed state the next owner
		// finds always has its marker, so the next owner sends the split
		// again when this table's sinks refuse it (the lease lost); a
		// marker whose closed state did not go through is purged by the
		// next owner's load (its run is still open there).
		if c.changed && t.cfg.Sinks != nil {
			b.put(pendKey(pt.p, c.id), []byte(c.id))
		}
		b.put(stateKey(c.id), c.b)
		durable[i] = b.len()
		f := split.FiguresOf(c.rep)
		if sb := summaryBytes(c.st, "closed", c.now, false, &f); sb != nil {
			b.put(summaryKey(c.id), sb)
		}
		if c.r.stored {
			b.purge(openKey(pt.p, c.id))
		}
		last[i] = b.len()
		if c.r.stored {
			durable[i] = last[i] // the next owner folds it again from its open key
		}
	}
	done, err := t.st.commit(ctx, pt.lease, &b)
	for i, c := range cs {
		if last[i] > done && (durable[i] > done || !errors.Is(err, fleet.ErrLost)) {
			c.err = err
			continue
		}
		t.m.stateWrites.Inc()
		t.m.writeCauses.WithLabelValues(string(causeClose)).Inc()
		c.r.stored = false
	}
}

// finishClose ends a close its writer did not finish (a closed state left
// under the open key by a version that kept it there until settled): the
// state moves to the closed key, with a pending marker.
func (pt *part) finishClose(ctx context.Context, st *RunState) error {
	t := pt.t
	pending := st.SinksPending
	st.SinksPending = false
	b, err := MarshalState(st)
	if err != nil {
		return err
	}
	id := st.Origin.RunID
	if err := t.st.put(ctx, pt.lease, stateKey(id), b); err != nil {
		return err
	}
	if pending && t.cfg.Sinks != nil {
		if err := t.st.put(ctx, pt.lease, pendKey(pt.p, id), []byte(id)); err != nil {
			return err
		}
	}
	pt.queueClosed(st)
	return t.st.purge(ctx, pt.lease, openKey(pt.p, id))
}

// closed1 ends the close of c after its write; it reports whether the
// split is to be delivered. pt.mu is held.
func (pt *part) closed1(c *closing) bool {
	t := pt.t
	r, id := c.r, c.id
	close(r.closing)
	r.closing = nil
	if c.err != nil {
		r.unsure = true // its write may have gone through: not shed until one does
		if !errors.Is(c.err, fleet.ErrLost) {
			t.m.persistErrs.Inc()
			t.log.Debug().Err(c.err).Str("run_id", id).Msg("closed state not written; the run is closed again later")
		}
		return false
	}
	r.st = c.st
	// Its events are durable in the closed state.
	r.written, r.dirty = max(r.written, c.folds), false
	if pt.runs[id] == r {
		pt.forgetRun(id)
	}
	pt.queueClosed(c.st)
	if !c.changed {
		return false // the same split was already written
	}
	status := "complete"
	if !c.rep.Run.Complete {
		status = "incomplete"
	}
	t.m.completed.WithLabelValues(status).Inc()
	t.closed.Add(1)
	if !r.finished.IsZero() {
		t.m.closeLat.Observe(time.Since(r.finished).Seconds())
	}
	t.log.Info().Str("run_id", id).Str("status", status).Msg("split written")
	return true
}

// deliver hands a closed run's new split to the split subject, the sinks,
// the printer and OnClose.
func (pt *part) deliver(ctx context.Context, c *closing) {
	t := pt.t
	t.publishSplit(ctx, c.rep, c.st.Splits-1)
	if t.cfg.Sinks != nil {
		if t.cfg.Deliveries != nil {
			t.cfg.Deliveries.queued(c.id)
		}
		if err := t.cfg.Sinks.Write(ctx, c.rep); err != nil {
			ev := t.log.Error()
			if errors.Is(err, sinks.ErrClosed) || t.stopCut(err) {
				// Stopping: its pending marker stays in the state
				// bucket, the partition's next owner sends it.
				ev = t.log.Debug()
			}
			ev.Err(err).Str("run_id", c.id).Msg("split not queued for the sinks; left to the partition's next owner")
		}
	}
	if t.cfg.Print != nil {
		t.cfg.Print(c.rep)
	}
	if t.cfg.OnClose != nil {
		t.cfg.OnClose(c.id, c.rep)
	}
}

// splitPublishTries bounds the attempts to publish one split event (with
// a doubling pause from 100 ms: about 100 s in all).
const splitPublishTries = 10

// publishSplit publishes the split as an event on gttsplit.split.>, in the
// background, retrying a failed publish (its message id, the split's, makes
// a repeat a no-op: a re-send by a partition's next owner too).
func (t *Table) publishSplit(ctx context.Context, r split.Report, n int) {
	ev, err := events.NewSplit(r, n)
	var w events.Wire
	if err == nil {
		w, err = events.ToWire(ev)
	}
	if err != nil {
		t.log.Warn().Err(err).Str("run_id", r.Run.ID).Msg("split event not built")
		return
	}
	t.pubs.Add(1)
	go func() {
		defer t.pubs.Done()
		pause := 100 * time.Millisecond
		for try := 1; ; try++ {
			m := nats.NewMsg(w.Subject)
			m.Data = w.Data
			m.Header.Set(jetstream.MsgIDHeader, w.ID)
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, err := t.js.PublishMsg(pctx, m)
			cancel()
			if err == nil {
				return
			}
			t.m.splitPubErr.Inc()
			if try >= splitPublishTries {
				t.log.Error().Err(err).Str("run_id", r.Run.ID).Int("tries", try).Msg("split event not published")
				return
			}
			t.log.Warn().Err(err).Str("run_id", r.Run.ID).Msg("split event not published; retrying")
			time.Sleep(pause)
			pause *= 2
		}
	}()
}

// resend1 hands the sinks again, and the split subject (the same message
// id: stored once), the split of a closed run that not every sink settled.
func (pt *part) resend1(ctx context.Context, st *RunState) {
	t := pt.t
	var rep split.Report
	if err := json.Unmarshal([]byte(st.Reported), &rep); err != nil {
		t.log.Warn().Err(err).Str("run_id", st.Origin.RunID).Msg("written split unreadable; not re-sent")
		return
	}
	t.publishSplit(ctx, rep, max(st.Splits-1, 0))
	if t.cfg.Sinks == nil {
		return
	}
	if t.cfg.Deliveries != nil {
		t.cfg.Deliveries.resending(rep.Run.ID)
	}
	if err := t.cfg.Sinks.Write(ctx, rep); err != nil {
		if t.cfg.Deliveries != nil {
			t.cfg.Deliveries.notResent(rep.Run.ID)
		}
		ev := t.log.Warn()
		if errors.Is(err, sinks.ErrClosed) || t.stopCut(err) {
			ev = t.log.Debug() // stopping: the next owner re-sends it
		}
		ev.Err(err).Str("run_id", st.Origin.RunID).Msg("split not re-sent")
	}
}

// settle records the splits of the partition every sink settled: their
// pending markers are purged. A run re-opened meanwhile keeps its marker
// until its next close settles.
func (pt *part) settle(ctx context.Context) {
	t := pt.t
	if t.cfg.Deliveries == nil {
		return
	}
	ids := t.cfg.Deliveries.take(pt.p)
	var b writeBatch
	purged := make([]string, 0, len(ids))
	for _, id := range ids {
		pt.mu.Lock()
		live := pt.live(id)
		pt.mu.Unlock()
		if !live {
			b.purge(pendKey(pt.p, id))
			purged = append(purged, id)
		}
	}
	if b.len() == 0 {
		return
	}
	// One batch (batch.go).
	done, err := t.st.commit(ctx, pt.lease, &b)
	if err != nil && !errors.Is(err, fleet.ErrLost) {
		// Tried again at the next pass.
		for _, rest := range purged[done:] {
			t.cfg.Deliveries.requeue(pt.p, rest)
		}
	}
}

// pendingState reads the closed state of a run whose split waits for the
// sinks (nil when no pending marker says so).
func (pt *part) pendingState(ctx context.Context, id string) (*RunState, error) {
	return pt.t.pendingState(ctx, pt.p, id)
}

// pendingState is part.pendingState for a run of partition p.
func (t *Table) pendingState(ctx context.Context, p int, id string) (*RunState, error) {
	if _, err := t.st.get(ctx, pendKey(p, id)); err != nil {
		if errors.Is(err, errNotFound) {
			return nil, nil
		}
		return nil, err
	}
	b, err := t.st.get(ctx, stateKey(id))
	if errors.Is(err, errNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return UnmarshalState(b, t.cfg.Fold)
}

// resendOverflow: a sink whose backlog passed even its deferred ids' cap
// dropped splits (they stay pending in the bucket). Once no sink defers
// any more, the partition sends the pending splits of its runs again (read
// from its open keys), as a take-over does.
func (pt *part) resendOverflow(ctx context.Context) {
	t := pt.t
	d := t.cfg.Deliveries
	if t.cfg.Sinks == nil || d == nil || !d.overflow.Load() || !t.rescanning.CompareAndSwap(false, true) {
		return
	}
	defer t.rescanning.Store(false)
	for _, n := range t.cfg.Sinks.Deferred() {
		if n > 0 {
			return
		}
	}
	d.overflow.Store(false)
	n := 0
	for _, other := range t.parts() {
		err := t.st.load(ctx, pendPrefix(other.p), func(e entry) error {
			id := string(e.value)
			st, err := other.pendingState(ctx, id)
			if err == nil && st != nil && st.Closed {
				other.resend1(ctx, st)
				n++
			}
			return nil
		})
		if err != nil {
			d.overflow.Store(true) // the next pass tries again
			t.log.Warn().Err(err).Msg("splits a sink dropped: not all read back from the state bucket yet")
			return
		}
	}
	if n > 0 {
		t.log.Info().Int("runs", n).Msg("re-sent the splits a sink's full queue dropped (read back from the state bucket)")
	}
}

// Reload is the sinks' FanoutConfig.Reload: a sink whose queue was full
// deferred a run's split, and now reads it back from the bucket. It gives
// the run's latest split while the run is closed and its split is not
// settled by every sink; nothing when the run re-opened (its next close
// sends its split), was settled, is gone, or when its partition is no
// longer this aggregator's (its next owner re-sends the split).
//
// A partition is this aggregator's from the start of its take-over (its
// lease held), not only once it is loaded: the splits its take-over re-sent
// are read back while it loads its open runs too (a deferred one withdrawn
// then would be sent again only at the next take-over).
func (t *Table) Reload(ctx context.Context, sink, runID string) (split.Report, bool, error) {
	p := partitionOf(runID, t.cfg.Partitions)
	t.mu.RLock()
	l, pt := t.leases[p], t.byPart[p]
	t.mu.RUnlock()
	if !held(ctx, l) {
		return split.Report{}, false, nil
	}
	if pt != nil && pt.lease == l {
		pt.mu.Lock()
		live := pt.live(runID)
		pt.mu.Unlock()
		if live {
			return split.Report{}, false, nil // re-opened: its next close sends its split
		}
	}
	st, err := t.pendingState(ctx, p, runID)
	if err != nil {
		return split.Report{}, false, fmt.Errorf("state bucket: %w", err)
	}
	if st == nil || !st.Closed || st.Reported == "" {
		return split.Report{}, false, nil
	}
	var rep split.Report
	if err := json.Unmarshal([]byte(st.Reported), &rep); err != nil {
		t.log.Warn().Err(err).Str("run_id", runID).Str("sink", sink).Msg("written split unreadable: deferred split not re-sent")
		return split.Report{}, false, nil
	}
	return rep, true, nil
}

// queueClosed queues a closed full state for its compaction, in the order
// of the close times. pt.mu may be held or not: it takes nothing.
func (pt *part) queueClosed(st *RunState) {
	if pt.t.cfg.Store.CompactAfter <= 0 || !st.Closed || st.Compact() {
		return
	}
	at := st.ClosedAt
	i := sort.Search(len(pt.compactQ), func(i int) bool { return pt.compactQ[i].at.After(at) })
	pt.compactQ = slices.Insert(pt.compactQ, i, compactDue{id: st.Origin.RunID, at: at})
}

// compact compacts the queued closed runs whose grace has passed, at most
// compactBatch of them; a bucket that does not answer leaves the rest for
// a later pass. pt.ckptMu is held.
func (pt *part) compact(ctx context.Context) {
	t := pt.t
	if t.cfg.Store.CompactAfter <= 0 {
		return
	}
	now := t.cfg.Now()
	for n := 0; n < compactBatch; n++ {
		pt.mu.Lock()
		if len(pt.compactQ) == 0 || now.Sub(pt.compactQ[0].at) < t.cfg.Store.CompactAfter {
			pt.mu.Unlock()
			return
		}
		c := pt.compactQ[0]
		live := pt.live(c.id)
		pt.mu.Unlock()
		if !live && !pt.compact1(ctx, c, now) {
			return
		}
		pt.mu.Lock()
		if len(pt.compactQ) > 0 && pt.compactQ[0] == c {
			pt.compactQ = pt.compactQ[1:]
		}
		pt.mu.Unlock()
	}
}

// compact1 replaces c's closed full state by its compact record, if it is
// still closed, full and past its grace. It reports false when the bucket
// did not answer (c is tried again).
func (pt *part) compact1(ctx context.Context, c compactDue, now time.Time) bool {
	t := pt.t
	b, err := t.st.get(ctx, stateKey(c.id))
	if errors.Is(err, errNotFound) {
		return true // still waiting for the sinks (queued again when settled), or gone
	}
	if err != nil {
		t.log.Debug().Err(err).Str("run_id", c.id).Msg("closed run not compacted yet")
		return false
	}
	st, err := UnmarshalState(b, t.cfg.Fold)
	if err != nil {
		t.log.Warn().Err(err).Str("run_id", c.id).Msg("unreadable run state not compacted")
		return true
	}
	if !st.Closed || st.Compact() || now.Sub(st.ClosedAt) < t.cfg.Store.CompactAfter {
		return true
	}
	if f := compactRead.Load(); f != nil {
		(*f)(c.id)
	}
	cb, err := MarshalState(st.compacted())
	if err != nil {
		t.log.Warn().Err(err).Str("run_id", c.id).Msg("run state not compacted")
		return true
	}
	if err := t.st.put(ctx, pt.lease, stateKey(c.id), cb); err != nil {
		t.log.Debug().Err(err).Str("run_id", c.id).Msg("closed run not compacted yet")
		return errors.Is(err, fleet.ErrLost)
	}
	t.m.compacted.Inc()
	pt.putSummary(ctx, st, "closed", st.ClosedAt, true, t.closedFigures(st))
	return true
}

// compactRead, when set (by tests), is told each run compact1 read and is
// about to write back compacted.
var compactRead atomic.Pointer[func(id string)]

// late dead-letters a new event for a run whose record was compacted: its
// fold is gone, so the event cannot be folded; the dead letter names the
// run and how to measure it again with the event.
func (t *Table) late(ctx context.Context, msg bus.Msg, st *RunState) error {
	return t.deadLetter(ctx, msg, fmt.Errorf("%w: run %s was closed at %s and its state compacted after store.compact_after (%s); the event is not folded (measure the run again: `aggregator export --run %s > run.jsonl`, then `aggregator replay run.jsonl`)",
		errLate, st.Origin.RunID, st.ClosedAt.UTC().Format(time.RFC3339), t.cfg.Store.CompactAfter, st.Origin.RunID))
}

// closedFigures are a closed run's figures: its summary's, else its
// written split's (nil when it has none).
func (t *Table) closedFigures(st *RunState) *split.Figures {
	if s, ok := t.index.get(st.Origin.RunID); ok && s.Split != nil {
		return s.Split
	}
	var rep split.Report
	if st.Reported == "" || json.Unmarshal([]byte(st.Reported), &rep) != nil {
		return nil
	}
	f := split.FiguresOf(rep)
	return &f
}

// putSummary writes a run's summary key (the run index); f is a closed
// run's figures.
func (pt *part) putSummary(ctx context.Context, st *RunState, state string, closedAt time.Time, compact bool, f *split.Figures) {
	b := summaryBytes(st, state, closedAt, compact, f)
	if b == nil {
		return
	}
	if err := pt.t.st.put(ctx, pt.lease, summaryKey(st.Origin.RunID), b); err != nil {
		pt.t.log.Debug().Err(err).Str("run_id", st.Origin.RunID).Msg("run summary not written")
	}
}

// summaryBytes encodes a run's summary (nil when it cannot).
func summaryBytes(st *RunState, state string, closedAt time.Time, compact bool, f *split.Figures) []byte {
	b, err := json.Marshal(RunSummary{ID: st.Origin.RunID, Host: st.Origin.Host, Lane: st.Origin.Lane, State: state,
		LastEvent: st.LastEvent, ClosedAt: closedAt, Compact: compact, Split: f})
	if err != nil {
		return nil
	}
	return b
}

// cloneState returns a deep copy of st.
func cloneState(st *RunState, opts split.Options) (*RunState, error) {
	b, err := MarshalState(st)
	if err != nil {
		return nil, err
	}
	return UnmarshalState(b, opts)
}
