package aggregator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gttsplit/gttsplit/internal/bus"
)

// Closed runs: a closed run keeps its full state for ServiceConfig.
// CompactAfter after its close (a late event re-opens it and folds as if it
// had come in time), then the owner of its partition replaces the state by
// the run's compact record (see RunState). The partition's open marker
// stays until then (and until every sink settled the split), so a new owner
// finds the closed runs it must still compact or re-send.

// compactBatch bounds the states one flush compacts (each is a read and a
// write to the bucket, under the service's lock).
const compactBatch = 32

// errLate is the dead-letter cause of a new event for a compacted run.
var errLate = errors.New("late")

// compactDue is a closed run whose state is still full.
type compactDue struct {
	id   string
	part int
	at   time.Time // closed at
}

// queueClosed queues a closed full state for its compaction (in the order
// of the close times). s.mu is held.
func (s *Service) queueClosed(st *RunState, part int) {
	if s.compactAfter <= 0 || !st.Closed || st.Compact() {
		return
	}
	at := st.ClosedAt
	i := sort.Search(len(s.compactQ), func(i int) bool { return s.compactQ[i].at.After(at) })
	s.compactQ = slices.Insert(s.compactQ, i, compactDue{id: st.Origin.RunID, part: part, at: at})
}

// markerDone says a closed run's open marker is no longer needed: its
// split was settled by every sink and its state compacted (or is never).
func (s *Service) markerDone(st *RunState) bool {
	return st.Closed && !st.SinksPending && (st.Compact() || s.compactAfter <= 0)
}

// compactClosed compacts the queued closed runs whose grace has passed, at
// most compactBatch of them; a bucket that does not answer leaves the rest
// for a later flush. s.mu is held.
func (s *Service) compactClosed(ctx context.Context) {
	now := s.now()
	for n := 0; n < compactBatch && len(s.compactQ) > 0; n++ {
		c := s.compactQ[0]
		if now.Sub(c.at) < s.compactAfter {
			return
		}
		if s.runs[c.id] == nil && !s.compact(ctx, c, now) {
			return
		}
		s.compactQ = s.compactQ[1:]
	}
}

// compact replaces c's closed full state by its compact record, if it is
// still closed, full and past its grace (a run re-opened and closed again
// since has a later entry). It reports false when the bucket did not
// answer (c is tried again).
func (s *Service) compact(ctx context.Context, c compactDue, now time.Time) bool {
	key := stateKey(c.id)
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return true
	}
	if err != nil {
		s.log.Debug().Err(err).Str("run_id", c.id).Msg("closed run not compacted yet")
		return false
	}
	st, err := UnmarshalState(e.Value(), s.opts)
	if err != nil {
		s.log.Warn().Err(err).Str("run_id", c.id).Msg("unreadable run state not compacted")
		return true
	}
	if !st.Closed || st.Compact() || now.Sub(st.ClosedAt) < s.compactAfter {
		return true
	}
	b, err := MarshalState(st.compacted())
	if err != nil {
		s.log.Warn().Err(err).Str("run_id", c.id).Msg("run state not compacted")
		return true
	}
	if _, err := s.kv.Update(ctx, key, b, e.Revision()); err != nil {
		if isConflict(err) {
			return true // written since: whoever wrote it closes and queues it again
		}
		s.log.Debug().Err(err).Str("run_id", c.id).Msg("closed run not compacted yet")
		return false
	}
	s.m.compacted.Inc()
	if s.parts > 0 && !st.SinksPending {
		s.purgeKeys(ctx, openKey(c.part, c.id))
	}
	return true
}

// late dead-letters a new event for a run whose record was compacted: its
// fold is gone, so the event cannot be folded; the dead letter names the
// run and how to measure it again with the event.
func (s *Service) late(ctx context.Context, msg bus.Msg, st *RunState) error {
	return s.deadLetter(ctx, msg, fmt.Errorf("%w: run %s was closed at %s and its state compacted after store.compact_after (%s); the event is not folded (measure the run again: `aggregator export --run %s > run.jsonl`, then `aggregator replay run.jsonl`)",
		errLate, st.Origin.RunID, st.ClosedAt.UTC().Format(time.RFC3339), s.compactAfter, st.Origin.RunID))
}

// purgeKeys removes keys of the state bucket with every revision and
// without the delete marker a KeyValue delete leaves (a marker per key
// would be kept for ever: the open marker of every closed run, the keys of
// every expired one). Only keys nobody watches are purged this way (the
// run index watches the summary keys). Errors are logged.
func (s *Service) purgeKeys(ctx context.Context, keys ...string) {
	for _, k := range keys {
		if err := s.purgeKey(ctx, k); err != nil {
			s.log.Debug().Err(err).Str("key", k).Msg("state bucket key not purged")
		}
	}
}

// purgeKey is purgeKeys for one key, returning the error.
func (s *Service) purgeKey(ctx context.Context, key string) error {
	return s.kvStream.Purge(ctx, jetstream.WithPurgeSubject("$KV."+StateBucket+"."+key))
}
