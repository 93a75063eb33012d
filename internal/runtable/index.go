package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// The run index: every run has a small summary key (sum.<key>) in the
// state bucket, written when the run is first stored and when it closes.
// Every aggregator watches those keys into memory, so /runs pages through
// any number of runs without reading their states, and the retention
// janitor finds the closed runs to drop.

// indexPrefix starts the summary keys.
const indexPrefix = "sum."

// summaryKey is the summary key of a run.
func summaryKey(runID string) string { return indexPrefix + stateKey(runID) }

// runIndex is the in-memory copy of the summary keys, sorted by run id.
type runIndex struct {
	mu   sync.RWMutex
	m    map[string]RunSummary
	ids  []string          // sorted
	keys map[string]string // summary key -> run id
}

func newRunIndex() *runIndex {
	return &runIndex{m: map[string]RunSummary{}, keys: map[string]string{}}
}

func (ix *runIndex) put(key string, s RunSummary) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if _, ok := ix.m[s.ID]; !ok {
		i := sort.SearchStrings(ix.ids, s.ID)
		ix.ids = append(ix.ids, "")
		copy(ix.ids[i+1:], ix.ids[i:])
		ix.ids[i] = s.ID
	}
	ix.m[s.ID] = s
	ix.keys[key] = s.ID
}

func (ix *runIndex) del(key string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	id, ok := ix.keys[key]
	if !ok {
		return
	}
	delete(ix.keys, key)
	delete(ix.m, id)
	if i := sort.SearchStrings(ix.ids, id); i < len(ix.ids) && ix.ids[i] == id {
		ix.ids = append(ix.ids[:i], ix.ids[i+1:]...)
	}
}

// page returns up to limit summaries with ids after after, sorted, and
// whether more follow.
func (ix *runIndex) page(after string, limit int) ([]RunSummary, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	i := sort.SearchStrings(ix.ids, after)
	if i < len(ix.ids) && ix.ids[i] == after {
		i++
	}
	end := min(len(ix.ids), i+limit)
	out := make([]RunSummary, 0, end-i)
	for _, id := range ix.ids[i:end] {
		out = append(out, ix.m[id])
	}
	return out, end < len(ix.ids)
}

// expired returns the ids of the runs closed before cutoff.
func (ix *runIndex) expired(cutoff time.Time) []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var out []string
	for id, s := range ix.m {
		if s.State == "closed" && !s.ClosedAt.IsZero() && s.ClosedAt.Before(cutoff) {
			out = append(out, id)
		}
	}
	return out
}

func (ix *runIndex) len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.ids)
}

// watch follows the summary keys of kv into ix until ctx ends; ready is
// closed once the keys present at the start were read.
func (ix *runIndex) watch(ctx context.Context, kv jetstream.KeyValue, log zerolog.Logger, ready chan<- struct{}) {
	once := sync.Once{}
	done := func() { once.Do(func() { close(ready) }) }
	defer done()
	for ctx.Err() == nil {
		w, err := kv.Watch(ctx, indexPrefix+">")
		if err != nil {
			log.Debug().Err(err).Msg("run index: watch")
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
				continue
			}
		}
		for e := range w.Updates() {
			if e == nil {
				done()
				continue
			}
			switch e.Operation() {
			case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
				ix.del(e.Key())
			default:
				var s RunSummary
				if json.Unmarshal(e.Value(), &s) == nil && s.ID != "" {
					ix.put(e.Key(), s)
				}
			}
		}
		_ = w.Stop()
	}
}

// closeIndex stops the index watch (idempotent).
func (s *Service) closeIndex() {
	if s.stopIndex != nil {
		s.stopIndex()
		s.stopIndex = nil
	}
}

// janitor deletes the closed runs past retention a minute after the start
// and then every hour, until ctx ends.
func (s *Service) janitor(ctx context.Context, retention time.Duration) {
	if retention <= 0 {
		return
	}
	wait := time.Minute
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		s.Expire(ctx, retention)
		wait = time.Hour
	}
}

// putSummary writes a run's summary key.
func (s *Service) putSummary(ctx context.Context, st *RunState, state string, closedAt time.Time) {
	b, err := json.Marshal(RunSummary{ID: st.Origin.RunID, Host: st.Origin.Host, Lane: st.Origin.Lane, State: state,
		LastEvent: st.LastEvent, ClosedAt: closedAt})
	if err != nil {
		return
	}
	if _, err := s.kv.Put(ctx, summaryKey(st.Origin.RunID), b); err != nil {
		s.log.Debug().Err(err).Str("run_id", st.Origin.RunID).Msg("run summary not written")
	}
}

// Expire deletes the closed runs whose split was written more than
// retention ago (their state, open marker and summary keys), and returns
// how many. The state and marker keys are purged with no delete marker
// left; the summary key's delete marker (which tells every aggregator's
// index) is purged at the next call, so an expired run leaves nothing in
// the bucket.
func (s *Service) Expire(ctx context.Context, retention time.Duration) int {
	if retention <= 0 || s.index == nil {
		return 0
	}
	s.mu.Lock()
	marked := s.expired
	s.expired = nil
	s.mu.Unlock()
	for _, k := range marked {
		if _, err := s.kv.Get(ctx, k); errors.Is(err, jetstream.ErrKeyNotFound) {
			s.purgeKeys(ctx, k) // still deleted: not a run of the same id since
		}
	}
	n := 0
	var purged []string
	for _, id := range s.index.expired(s.now().Add(-retention)) {
		s.mu.Lock()
		live := s.runs[id] != nil
		s.mu.Unlock()
		if live {
			continue // re-opened by a late event
		}
		if err := s.purgeKey(ctx, stateKey(id)); err != nil {
			s.log.Warn().Err(err).Str("run_id", id).Msg("expired run not deleted")
			continue
		}
		s.purgeKeys(ctx, openKey(s.partOf(id), id))
		if err := s.kv.Purge(ctx, summaryKey(id)); err == nil {
			purged = append(purged, summaryKey(id))
		}
		s.index.del(summaryKey(id))
		n++
	}
	s.mu.Lock()
	s.expired = append(s.expired, purged...)
	s.mu.Unlock()
	if n > 0 {
		s.log.Info().Int("runs", n).Dur("retention", retention).Msg("closed runs past store.retention deleted")
	}
	return n
}

// listPage is List for one page: the runs after after, sorted by id, up
// to limit, with this aggregator's open runs as they are in memory; more
// says another page follows.
func (s *Service) listPage(after string, limit int) (out []RunSummary, more bool) {
	out, more = s.index.page(after, limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]bool, len(out))
	for i, r := range out {
		seen[r.ID] = true
		if lr := s.runs[r.ID]; lr != nil {
			out[i].State, out[i].LastEvent = liveState(lr), lr.st.LastEvent
		}
	}
	// Runs in memory whose summary is not written (or not seen) yet.
	for id, lr := range s.runs {
		if id > after && !seen[id] && (!more || len(out) == 0 || id < out[len(out)-1].ID) {
			o := lr.st.Origin
			out = append(out, RunSummary{ID: id, Host: o.Host, Lane: o.Lane, State: liveState(lr), LastEvent: lr.st.LastEvent})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if len(out) > limit {
		out, more = out[:limit], true
	}
	return out, more
}

func liveState(lr *liveRun) string {
	if lr.st.Finished {
		return "finished"
	}
	return "open"
}
