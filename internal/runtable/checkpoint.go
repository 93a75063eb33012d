package aggregator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gttsplit/gttsplit/internal/bus"
)

// Checkpoints: Flush takes the state of every run changed since the last
// checkpoint under s.mu (its encoding), then writes them and acknowledges
// their messages without it, so that events go on folding into the live
// runs while a checkpoint is written. A message is acknowledged only once
// the write of a state that holds it succeeded.

// errRedeliver is a lost compare-and-set whose messages were not kept to
// fold again (see pendingMax): the run is forgotten and they are
// redelivered.
var errRedeliver = errors.New("written by another aggregator meanwhile; its events are redelivered onto the stored state")

// snapshot is a run's state as a checkpoint took it: its encoding and the
// revision the write replaces.
type snapshot struct {
	r    *liveRun
	head RunState // the state without its fold (what put reads)
	b    []byte
	err  error // encoding failed
	rev  uint64
}

// take encodes r's state for a write. s.mu is held.
func (s *Service) take(r *liveRun) *snapshot {
	sn := &snapshot{r: r, head: *r.st, rev: r.rev}
	sn.head.Fold = nil
	sn.b, sn.err = MarshalState(r.st)
	r.dirty = false
	return sn
}

// Flush writes the state of every changed run to the bucket (a
// checkpoint), then acknowledges the messages folded into them, then
// closes the runs that are finished or idle. Flushes run one at a time;
// Handle goes on folding while one writes.
func (s *Service) Flush(ctx context.Context) {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	taken := s.now()
	batch := s.pending
	s.pending = nil
	clear(s.partPending)
	var dirty []*liveRun
	for _, r := range s.runs {
		if r.dirty {
			dirty = append(dirty, r)
		}
	}
	s.mu.Unlock()
	s.m.checkpoints.Inc()

	// The changed runs are encoded and written a chunk at a time, so that
	// the encodings in memory stay bounded however many runs changed. A
	// run folded into after the batch was taken is encoded with what it
	// holds then: more than the batch needs (its later messages are
	// acknowledged by the next checkpoint, which finds it written).
	type failure struct {
		sn  *snapshot
		err error
	}
	var fails []failure
	for len(dirty) > 0 {
		chunk := dirty[:min(len(dirty), checkpointChunk)]
		dirty = dirty[len(chunk):]
		s.mu.Lock()
		snaps := make([]*snapshot, len(chunk))
		for i, r := range chunk {
			snaps[i] = s.take(r)
		}
		s.mu.Unlock()
		// Each run's write is its own compare-and-set: write them at once.
		errs := make([]error, len(snaps))
		inParallel(len(snaps), func(i int) { errs[i] = s.persist(ctx, snaps[i], batch) })
		for i, err := range errs {
			if err != nil {
				snaps[i].b = nil
				fails = append(fails, failure{snaps[i], err})
			}
		}
	}

	s.mu.Lock()
	for _, f := range fails {
		sn, err := f.sn, f.err
		id := sn.head.Origin.RunID
		if errors.Is(err, errRedeliver) {
			s.log.Info().Str("run_id", id).Msg("run state written by another aggregator meanwhile; the run is read again with its events' redelivery")
		} else {
			s.m.persistErrs.Inc()
			s.log.Error().Err(err).Str("run_id", id).Msg("run state not written; its events will be redelivered")
		}
		// Forget the in-memory state: the redelivered events rebuild it
		// from the last durable state.
		sn.r.failed = true
		if s.runs[id] == sn.r {
			s.forget(id)
		}
	}
	// The messages folded into a run whose write failed (in this flush
	// or an earlier one) are redelivered; the others are durable.
	naks := make([]bool, len(batch))
	failed := false
	for i, p := range batch {
		naks[i] = p.run.failed
		failed = failed || p.run.failed
	}
	s.mu.Unlock()
	for i, p := range batch {
		if naks[i] {
			_ = p.ack.Nak()
			continue
		}
		if err := p.ack.Ack(); err != nil {
			s.log.Debug().Err(err).Msg("ack")
		}
	}
	if !failed && len(fails) == 0 {
		s.ckpt.Store(taken.UnixNano())
	}
	s.m.ckptAge.Set(s.now().Sub(time.Unix(0, s.ckpt.Load())).Seconds())
	s.closeDue(ctx)
}

// closeDue closes the runs that are finished or idle and records the
// splits every sink settled. s.flushMu is held.
func (s *Service) closeDue(ctx context.Context) {
	s.mu.Lock()
	s.closeRuns(ctx, false)
	s.mu.Unlock()
	s.settleDeliveries(ctx)
	s.resendOverflow(ctx)
}

// persist writes a snapshot with compare-and-set. On a lost race it takes
// the stored state, folds into it again the messages folded into the run
// since its last write (those of batch, the checkpoint's, and those
// folded since), and writes that; a key that vanished is written anew
// from memory.
func (s *Service) persist(ctx context.Context, sn *snapshot, batch []pendingMsg) error {
	r := sn.r
	key := stateKey(sn.head.Origin.RunID)
	for attempt := 0; attempt < 5; attempt++ {
		if sn.err != nil {
			return sn.err
		}
		rev, err := s.put(ctx, &sn.head, sn.b, sn.rev)
		if err == nil {
			s.mu.Lock()
			r.rev = rev
			if sn.head.reopen {
				r.st.reopen = false // the open marker is back
			}
			s.mu.Unlock()
			return nil
		}
		if !isConflict(err) {
			return err
		}
		// Another aggregator wrote this run: take its state and fold our
		// events into it again.
		s.m.conflicts.Inc()
		e, gerr := s.kv.Get(ctx, key)
		vanished := errors.Is(gerr, jetstream.ErrKeyNotFound)
		if gerr != nil && !vanished {
			return gerr
		}
		var st *RunState
		if !vanished {
			if st, err = UnmarshalState(e.Value(), s.opts); err != nil {
				return err
			}
			if st.Compact() {
				// Closed and compacted meanwhile: the redelivered messages
				// meet Handle's late or duplicate branch.
				return fmt.Errorf("run %q: closed and compacted meanwhile", sn.head.Origin.RunID)
			}
			st.reopen = st.Closed // a re-applied event re-opens it
		}
		s.mu.Lock()
		if !vanished && !s.refold(st, r, batch) {
			// The messages are not kept (partitions: see pendingMax):
			// the run is forgotten and they come again, onto the
			// stored state.
			s.mu.Unlock()
			return fmt.Errorf("run %q: %w", sn.head.Origin.RunID, errRedeliver)
		}
		if vanished {
			// Deleted by hand, or lost: write the state in memory, which
			// holds every event since, anew.
			s.log.Warn().Str("run_id", sn.head.Origin.RunID).Msg("run state vanished from the state bucket; written anew from memory")
			r.rev = 0
		} else {
			if r.st.LastEvent.After(st.LastEvent) {
				st.LastEvent = r.st.LastEvent
			}
			st.FinishedSeq = max(st.FinishedSeq, r.st.FinishedSeq)
			r.st, r.rev = st, e.Revision()
		}
		*sn = *s.take(r)
		s.mu.Unlock()
	}
	return fmt.Errorf("run %q: state write kept conflicting", sn.head.Origin.RunID)
}

// refold folds again into st, a state another aggregator wrote, the
// messages folded into r since its last write (those of batch, the
// checkpoint's, and those folded since). It reports false, folding
// nothing, when those messages are not kept whole. s.mu is held.
func (s *Service) refold(st *RunState, r *liveRun, batch []pendingMsg) bool {
	var ms []*bus.Msg
	for _, p := range slices.Concat(batch, s.pending) {
		if p.run != r {
			continue
		}
		if p.msg == nil {
			return false
		}
		ms = append(ms, p.msg)
	}
	for _, m := range ms {
		if d, err := m.Decode(); err == nil {
			ApplyTo(st, d)
		}
	}
	return true
}

// inParallel calls f(0), ..., f(n-1), persistParallel of them at a time
// (each a round trip to the server), and returns when all returned.
func inParallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, persistParallel)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

// Loop flushes at the checkpoint interval, and when Handle asks (see
// ServiceConfig.CheckpointInterval), until ctx ends. Between checkpoints
// it closes the runs that are due and records the sinks' deliveries every
// flushEvery, so that a split's delivery is soon confirmed in the bucket
// (until then a partition's next owner would send it again).
func (s *Service) Loop(ctx context.Context) {
	t := time.NewTicker(min(s.every, flushEvery))
	defer t.Stop()
	last := time.Now()
	for {
		kicked := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
			kicked = true
		}
		// A flush under way is not cut short by the stop: its writes
		// and acks would fail, and the drain would nak what it holds.
		fctx := context.WithoutCancel(ctx)
		if kicked || time.Since(last) >= s.every {
			s.Flush(fctx)
			last = time.Now()
			continue
		}
		s.flushMu.Lock()
		s.closeDue(fctx)
		s.flushMu.Unlock()
	}
}
