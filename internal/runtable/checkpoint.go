package runtable

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/fleet"
)

// Checkpoints: a partition's checkpoint takes the state of every run
// changed since the last one (its encoding) under part.mu, writes them
// without it, in batches fenced by the partition's lease (batch.go), and
// then acknowledges the messages those writes made durable, so that
// events go on folding while a checkpoint is written. A message is
// acknowledged only once a write of its run's state that holds it
// succeeded. A write that fails (the bucket away, or full) leaves its run
// changed and its messages waiting (their ack wait restarted before it
// runs out, so they are not redelivered meanwhile); the next checkpoint
// tries again, later each time. A write the server fences out means the
// lease is lost: the partition is dropped (Table.Lost) and its messages go
// to the next owner.

// snapshot is a run's state as a checkpoint took it.
type snapshot struct {
	r     *liveRun
	id    string
	b     []byte
	folds uint64
	first bool // the run's first write: its summary too
	cause writeCause
	err   error
}

// writeCause is what made a checkpoint write a run's state (the metric
// gttsplit_state_writes_causes_total).
type writeCause string

const (
	// causeDue: a message waiting for the run's write neared the
	// progress acknowledgement it would need (the run's, and the runs
	// written with it).
	causeDue writeCause = "due"
	// causeInterval: a changed run none of whose messages waits (read
	// back changed), at the checkpoint interval.
	causeInterval writeCause = "interval"
	// The causes of a checkpoint that writes every changed run: half of
	// max_ack_pending messages wait (kick), the runs' memory bound needs
	// room (room), the margins leave nothing to wait for (every), the
	// bucket is failing (retry), a hand-over's or a stop's last (last).
	causeKick  writeCause = "kick"
	causeRoom  writeCause = "room"
	causeEvery writeCause = "every"
	causeRetry writeCause = "retry"
	causeLast  writeCause = "last"
	// causeClose: a run's closed state (close.go).
	causeClose writeCause = "close"
)

// pick is a run a checkpoint writes, and why.
type pick struct {
	id    string
	cause writeCause
}

// take encodes r's state for a write. pt.mu is held.
func (pt *part) take(id string, r *liveRun, cause writeCause) snapshot {
	b, err := MarshalState(r.st)
	r.dirty = false
	return snapshot{r: r, id: id, b: b, folds: r.folds, first: !r.stored, cause: cause, err: err}
}

// checkpoint writes the partition's changed runs that are due (every one
// when all names why: a kick for room or for max_ack_pending; and with
// final, a release or a stop, or a failing bucket) and acknowledges what
// the writes made durable; then (unless final) it closes the runs that
// are due.
func (pt *part) checkpoint(ctx context.Context, final bool, all writeCause) {
	pt.ckptMu.Lock()
	defer pt.ckptMu.Unlock()
	defer func() {
		pt.mu.Lock()
		pt.checkpointed() // the events waiting for room (memory.go)
		pt.mu.Unlock()
		pt.t.memChanged()
	}()
	t := pt.t
	taken := t.cfg.Now()
	switch {
	case final:
		all = causeLast
	case all == "" && pt.failing:
		all = causeRetry
	case all == "" && pt.writeBy() <= tickEvery:
		all = causeEvery
	}
	// A selective checkpoint (not every changed run) measures how late
	// its writes start (late); one that writes every changed run does
	// not: its messages waited for the interval, not for writeBy.
	selective := all == ""
	pt.mu.Lock()
	dirty := pt.toWrite(all, time.Now())
	pt.mu.Unlock()
	t.m.checkpoints.Inc()
	t0 := time.Now()

	var werr error
	wrote := 0
	var held []*flight // the messages the writes hold (flow.go: writing)
	for todo := dirty; len(todo) > 0 && werr == nil; {
		chunk := todo[:min(len(todo), checkpointChunk)]
		todo = todo[len(chunk):]
		pt.mu.Lock()
		snaps := make([]snapshot, 0, len(chunk))
		for _, w := range chunk {
			if r := pt.runs[w.id]; r != nil && r.dirty {
				snaps = append(snaps, pt.take(w.id, r, w.cause))
			}
		}
		n0 := len(held)
		held = pt.heldBy(snaps, held)
		pt.mu.Unlock()
		if oldest := pt.fl.setWriting(held[n0:], true, t.flow.ahead); n0 == 0 && selective && oldest > 0 {
			pt.late(oldest)
		}
		var n int
		n, werr = pt.write(ctx, snaps)
		wrote += n
		if werr != nil {
			// These runs stay changed, their messages wait for the
			// next write (their progress acknowledged meanwhile).
			pt.fl.writeFailed(held)
			pt.mu.Lock()
			for _, s := range snaps[n:] {
				s.r.dirty = true
			}
			pt.mu.Unlock()
		}
	}
	if errors.Is(werr, fleet.ErrLost) {
		// The fleet tells the table (the partition is dropped); nothing
		// is written any more: what was folded goes back now.
		pt.handBackPending("lost")
		return
	}
	if len(dirty) > 0 {
		pt.wrote(time.Since(t0))
	}
	pt.settleAcks(final)
	if !final {
		pt.shed() // past the memory bound: written runs wait in the bucket
	}
	if werr != nil {
		pt.fail(werr)
	} else {
		pt.mu.Lock()
		pt.ckpt = taken
		pt.mu.Unlock()
		if wrote > 0 {
			// Only a write that went through ends a failing episode:
			// a checkpoint with nothing to write says nothing of the
			// bucket (readiness stayed honest).
			pt.recovered()
		}
	}
	switch {
	case !final:
		pt.afterCheckpoint(ctx)
	case werr == nil:
		// A hand-over's: the runs due closed and what the sinks
		// settled recorded; compaction and re-sends are the next
		// owner's.
		pt.closeDue(ctx, 0)
		pt.settle(ctx)
	}
}

// A changed run is written when one of its messages would otherwise need
// one progress acknowledgement more than it may get (progressBeforeWrite,
// flow.go), not at every checkpoint: a busy partition's runs (a backlog's
// interleaved runs, every one changed between two checkpoints) were each
// written again every checkpoint_interval, and then (with none allowed)
// every 40 % of the ack wait for as long as the fold lasted. Here a
// partition writes once one of its messages waiting for its run's write
// waited writeBy since its last allowed progress acknowledgement (waited;
// the loop looks every tick: writeDue), and then every changed run one of
// whose messages waited half of that (so that the writes go together, and
// a busy run is written about every writeBy and two progress
// acknowledgements); its other changed runs wait. The checkpoints of the
// interval write only the changed runs none of whose messages waits (a
// run read back changed) and those due.
//
// A message a write under way holds is left without a progress
// acknowledgement until it waited flow.writeGrace (the latest it would
// get one otherwise): its acknowledgement comes with the write. So a
// write must start before the message's next progress acknowledgement
// is due (flow.progressAfter) and end before writeGrace; writeBy leaves,
// before the earlier of the two, the partition's measured checkpoint
// time, twice (a loaded machine's checkpoints take longer than their
// average), against writeGrace, and twice how late its writes measured
// to start (the loop's look, a checkpoint under way, the partition's
// lock), and two ticks, against both. Before, a write had to end
// before progressAfter: on a loaded machine, whose checkpoints take a
// second or more, that margin left little to wait for, and a write that
// took longer than its average cost every message it held a progress
// acknowledgement.

// toWrite returns the changed runs a checkpoint writes (every one when
// all names why). pt.mu is held.
func (pt *part) toWrite(all writeCause, now time.Time) []pick {
	by := pt.writeBy()
	var waiting map[*liveRun]time.Duration
	var oldest time.Duration
	if all == "" {
		waiting = pt.waiting(now)
		for _, w := range waiting {
			oldest = max(oldest, w)
		}
	}
	var out []pick
	for id, r := range pt.runs {
		if !r.dirty {
			continue
		}
		cause := all
		if w, ok := waiting[r]; ok && all == "" {
			if oldest < by || w < by/2 {
				continue // none of its messages nears the ack wait yet
			}
			cause = causeDue
		} else if all == "" {
			cause = causeInterval
		}
		out = append(out, pick{id: id, cause: cause})
	}
	return out
}

// writeBy is how long, after a message came (or its progress was last
// acknowledged), its run's write may wait to start for its
// acknowledgement to come before its progress acknowledgement would.
func (pt *part) writeBy() time.Duration {
	f := pt.t.flow
	late := 2*time.Duration(pt.writeLate.Load()) + 2*tickEvery
	return min(f.progressAfter(), f.writeGrace()-2*time.Duration(pt.writeTook.Load())) - late
}

// late records how long the oldest message a selective checkpoint's
// write holds waited (oldest) past writeBy (a moving average), at most
// maxLate: lateness alone never makes writeBy so short that every
// checkpoint writes every changed run (such a checkpoint measures
// nothing, so the average would never come down again; and a measure
// against a writeBy the average itself shortened would feed on itself).
// pt.ckptMu is held.
func (pt *part) late(oldest time.Duration) {
	d := min(max(oldest-pt.writeBy(), 0), pt.t.flow.maxLate())
	old := pt.writeLate.Load()
	pt.writeLate.Store(old + (int64(d)-old)/4)
}

// heldBy appends to fs the ledger entries of the folded messages that
// snaps' states hold. pt.mu is held.
func (pt *part) heldBy(snaps []snapshot, fs []*flight) []*flight {
	folds := make(map[*liveRun]uint64, len(snaps))
	for _, sn := range snaps {
		if sn.err == nil {
			folds[sn.r] = sn.folds
		}
	}
	for _, pm := range pt.pending {
		if f, ok := folds[pm.run]; ok && pm.fl != nil && pm.gen <= f {
			fs = append(fs, pm.fl)
		}
	}
	return fs
}

// waiting returns, for each run with folded messages its last write does
// not hold, the longest any of them waited for it (waited). pt.mu is
// held.
func (pt *part) waiting(now time.Time) map[*liveRun]time.Duration {
	w := make(map[*liveRun]time.Duration)
	pt.fl.mu.Lock()
	defer pt.fl.mu.Unlock()
	for _, pm := range pt.pending {
		if pm.gen <= pm.run.written {
			continue
		}
		d := pt.waited(pm, now)
		if old, ok := w[pm.run]; !ok || d > old {
			w[pm.run] = d
		}
	}
	return w
}

// waited is how long a folded message waited for its run's write, as
// writeBy counts it: since its ack wait last started, less the progress
// acknowledgements it still gets before the write is due (flow.ahead).
// One not in the ledger waited too long at once. pt.fl.mu is held.
func (pt *part) waited(pm pendingMsg, now time.Time) time.Duration {
	if pm.fl == nil {
		return time.Duration(math.MaxInt64)
	}
	return pm.fl.waited(now, pt.t.flow.ahead)
}

// writeDue says whether a message waiting for its run's write waited
// writeBy (waited): the loop then checkpoints before the interval. Only
// the oldest messages are looked at (pending is in the order they were
// folded).
func (pt *part) writeDue(now time.Time) bool {
	by := pt.writeBy()
	if by <= tickEvery {
		return false // every checkpoint of the interval writes every changed run
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.fl.mu.Lock()
	defer pt.fl.mu.Unlock()
	for i, pm := range pt.pending {
		if i == writeDueLook {
			return false
		}
		if pm.gen <= pm.run.written {
			continue // written, not acknowledged yet
		}
		if pt.waited(pm, now) >= by {
			return true
		}
	}
	return false
}

// wrote records how long a checkpoint that wrote took (a moving
// average). pt.ckptMu is held.
func (pt *part) wrote(d time.Duration) {
	old := pt.writeTook.Load()
	pt.writeTook.Store(old + (int64(d)-old)/4)
}

// write stores the runs' states under their open keys (and a run's
// summary, its first time) in one batch (batch.go); it returns how many
// of snaps were written, from the first.
func (pt *part) write(ctx context.Context, snaps []snapshot) (int, error) {
	t := pt.t
	var b writeBatch
	last := make([]int, 0, len(snaps)) // snaps[i]'s last write in b
	for _, sn := range snaps {
		if sn.err != nil {
			t.log.Error().Err(sn.err).Str("run_id", sn.id).Msg("run state not encoded")
		} else {
			b.put(openKey(pt.p, sn.id), sn.b)
			if sn.first {
				pt.mu.Lock()
				st := *sn.r.st
				pt.mu.Unlock()
				if sb := summaryBytes(&st, "open", time.Time{}, false, nil); sb != nil {
					b.put(summaryKey(sn.id), sb)
				}
			}
		}
		last = append(last, b.len())
	}
	done, err := t.st.commit(ctx, pt.lease, &b)
	n := 0
	for n < len(snaps) && last[n] <= done {
		n++
	}
	if err != nil {
		t.m.persistErrs.Inc()
	}
	at := t.st.pos.Load() // where these states lie in the bucket, about
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for _, sn := range snaps[:n] {
		if sn.err != nil {
			continue
		}
		sn.r.at, sn.r.warm = at, false
		t.m.stateWrites.Inc()
		t.m.writeCauses.WithLabelValues(string(sn.cause)).Inc()
		sn.r.written = max(sn.r.written, sn.folds)
		sn.r.stored = true
		sn.r.unsure = false // its open key is there again
		if sn.r.size = len(sn.b); pt.runs[sn.id] == sn.r {
			pt.account(sn.r)
		}
	}
	return n, err
}

// settleAcks acknowledges the folded messages whose run's state was
// written since they were folded; the others wait for a later checkpoint
// (a release naks them: the next owner folds them). Their progress is
// acknowledged meanwhile (they are in the partition's ledger until
// settled).
func (pt *part) settleAcks(final bool) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	keep := pt.pending[:0]
	for _, pm := range pt.pending {
		switch {
		case pm.gen <= pm.run.written:
			_ = pm.ack.Ack()
			pt.fl.done(pm.fl)
		case final:
			_ = pm.ack.Nak()
			pt.handBack(pm.fl, "release")
		default:
			keep = append(keep, pm) // its progress is acknowledged meanwhile (Table.progress)
		}
	}
	clear(pt.pending[len(keep):])
	pt.pending = keep
}

// fail records a failed write of the bucket (a checkpoint's, a close's):
// the next is tried later (doubling up to maxBackoff), and a full store is
// said once per episode and reported by Ready until a write goes through.
// pt.ckptMu is held.
func (pt *part) fail(err error) {
	t := pt.t
	full := bus.StoreFull(err) || errors.Is(err, errReserve)
	if full || !bus.Transient(err) {
		pt.backoff = min(max(2*pt.backoff, t.cfg.Consumer.CheckpointInterval), maxBackoff)
	} else {
		// Unanswered, or no leader yet (a node died, its raft groups
		// elect another): tried again soon, so the writes resume as
		// soon as the bucket has a leader again.
		pt.backoff = min(max(2*pt.backoff, transientBackoff), maxTransientBackoff)
	}
	pt.retryAt = time.Now().Add(pt.backoff)
	if full {
		t.health.set(pt.storeCond(), "the state bucket's store is full (insufficient resources): checkpoints wait and retry; events wait unacknowledged")
	}
	if t.stopCut(err) {
		// The stop's deadline: not a failure of the bucket.
		if !pt.failing {
			pt.failing = true
			t.log.Info().Int("partition", pt.p).Msg("stop: the run states not written in time are left to the partition's next owner (their events are delivered to it again)")
		}
		return
	}
	if !pt.failing {
		pt.failing = true
		ev := t.log.Error()
		if full {
			ev = t.log.Warn()
		}
		ev.Err(err).Int("partition", pt.p).Dur("retry_in", pt.backoff.Round(time.Millisecond)).
			Msg("checkpoint failed: run states not written (nor closed runs); their events wait unacknowledged and the writes are tried again, later each time")
	}
}

// recovered ends a failing episode: a write went through. pt.ckptMu is
// held.
func (pt *part) recovered() {
	if pt.failing {
		pt.failing = false
		pt.t.log.Info().Int("partition", pt.p).Msg("checkpoints written again")
	}
	pt.backoff = 0
	pt.retryAt = time.Time{}
	pt.t.health.clear(pt.storeCond())
}

// storeCond is the partition's readiness condition of a full store: each
// partition's own, so one that has nothing to write does not clear
// another's.
func (pt *part) storeCond() string { return "store." + strconv.Itoa(pt.p) }

// checkpointAge is the time since the partition last checkpointed without
// a failure (every run state then due written).
func (pt *part) checkpointAge() time.Duration {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return pt.t.cfg.Now().Sub(pt.ckpt)
}
