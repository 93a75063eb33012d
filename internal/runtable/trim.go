package runtable

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"
)

// Closed runs past their share of the runs' memory. Every closed run kept
// (store.retention) costs this process memory that shedding cannot free:
// its summary or stub in the run index (evict.go) and, with the embedded
// broker, the broker's index of its keys (Config.BrokerClosedRunCost,
// ~680 bytes). Counted against the runs' bound alone, they leave the open
// runs less and less room, and past it the live heap stays near its share
// of the runtime's limit, where the collector falls behind a flood and the
// limit is passed (100,000 closed runs at memory_limit_mib 224: ~85 MiB
// of them, peak 232 MiB). So they may take at most closedKeepShare of
// Config.RunMemory: past it the janitor (every trimEvery) deletes the
// closed runs of the partitions this aggregator owns that closed first
// (their closed, open and summary keys, as store.retention would), until
// they are back under trimTo of their share, at most trimBatch a pass. A
// run whose split not every sink settled yet (its pending marker) is
// kept, so no split is lost; one re-opened by a late event is kept. The
// markers the purges leave go after trimMarkerTTL, and with them the
// broker's index of the keys. gttsplit_runs_expired_early_total counts
// them, a log line a pass says how many. A late event of such a run finds
// no closed state: it starts the run anew, which closes with a split of
// its own (what it does after store.retention too).

const (
	// closedKeepShare is the share of Config.RunMemory the closed runs
	// kept may take (3/8: 42 MiB at memory_limit_mib 224, ~50,000 closed
	// runs with the embedded broker, ~250,000 with a broker elsewhere).
	closedKeepShare = 3.0 / 8
	// trimTo is the share of that a trim pass brings them down to.
	trimTo = 0.9
	// trimEvery is how often the janitor looks.
	trimEvery = 5 * time.Second
	// trimBatch bounds the runs deleted a pass (each is four requests).
	trimBatch = 2048
	// trimMarkerTTL is how long the markers of a run deleted early stay:
	// every aggregator's index sees the summary key's as it comes; the
	// broker's index of the keys is freed when they go.
	trimMarkerTTL = time.Minute
)

// closedKept is how many closed runs the index holds (summaries and
// stubs) and what they are taken to cost, the broker's share with them.
func (t *Table) closedKept() (runs, bytes int64) {
	nc, b := t.index.footprint(true)
	return nc, b + nc*t.mem.brokerClosed.Load()
}

// closedKeepCap is what the closed runs kept may take (0: no bound).
func (t *Table) closedKeepCap() int64 { return int64(closedKeepShare * float64(t.mem.budget)) }

// trimClosed deletes the closed runs that closed first of the partitions
// owned while the closed runs kept pass their share, and returns how many.
func (t *Table) trimClosed(ctx context.Context) int {
	t.trimMu.Lock()
	defer t.trimMu.Unlock()
	capBytes := t.closedKeepCap()
	nc, used := t.closedKept()
	if capBytes <= 0 || used <= capBytes || nc == 0 {
		return 0
	}
	per := max(1, used/nc)
	want := min(trimBatch, int((used-int64(trimTo*float64(capBytes))+per-1)/per))
	owned := map[int]*part{}
	for _, pt := range t.parts() {
		owned[pt.p] = pt
	}
	ids := t.index.oldestClosed(want, func(id string) bool { return owned[partitionOf(id, t.cfg.Partitions)] != nil })
	n, kept := 0, 0
	for _, id := range ids {
		pt := owned[partitionOf(id, t.cfg.Partitions)]
		deleted, err := pt.expire(ctx, id, true)
		if err != nil {
			t.log.Warn().Err(err).Str("run_id", id).Msg("closed run past the closed runs' memory share not deleted yet")
			break
		}
		if deleted {
			n++
			t.m.expiredEarly.Inc()
		} else {
			kept++
		}
	}
	if n > 0 {
		nc, used = t.closedKept()
		t.log.Info().Int("runs", n).Int("kept_unsettled_or_reopened", kept).Int64("closed_runs_kept", nc).
			Int64("closed_runs_mib", used>>20).Int64("share_mib", capBytes>>20).
			Msg("closed runs deleted before store.retention, those closed first: the closed runs kept passed their share of the runs' memory (from memory_limit_mib); a late event of one starts it anew")
	}
	return n
}

// oldestClosed returns up to n ids of closed runs that keep says to take,
// those closed first (a run's close time, its id when equal); not a lane's
// last run with figures (the lane gauges read it).
func (ix *Index) oldestClosed(n int, keep func(id string) bool) []string {
	if n <= 0 {
		return nil
	}
	ix.mu.RLock()
	var rs []stamped
	for id, st := range ix.stubs {
		if st.at != 0 && keep(id) {
			rs = append(rs, stamped{id, st.at})
		}
	}
	for id, s := range ix.m {
		if s.State != "closed" || s.ClosedAt.IsZero() || !keep(id) {
			continue
		}
		if k, ok := laneOf(s); ok && ix.byLane[k] != nil && ix.byLane[k].last == id {
			continue
		}
		rs = append(rs, stamped{id, s.ClosedAt.UnixNano()})
	}
	ix.mu.RUnlock()
	return oldestIDs(rs, n)
}

// stamped is a run id with a time (ns) to order runs by.
type stamped struct {
	id string
	at int64
}

// sortStamped sorts rs oldest first (the id when the times are equal).
func sortStamped(rs []stamped) {
	slices.SortFunc(rs, func(a, b stamped) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		return strings.Compare(a.id, b.id)
	})
}

// oldestIDs sorts rs oldest first (the id when the times are equal) and
// returns the first n ids.
func oldestIDs(rs []stamped, n int) []string {
	sortStamped(rs)
	out := make([]string, 0, min(n, len(rs)))
	for _, r := range rs[:min(n, len(rs))] {
		out = append(out, r.id)
	}
	return out
}

// unsettled says closed run id of partition p has a pending marker: not
// every sink settled its split yet.
func (t *Table) unsettled(ctx context.Context, p int, id string) (bool, error) {
	_, err := t.st.get(ctx, pendKey(p, id))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errNotFound):
		return false, nil
	}
	return false, err
}
