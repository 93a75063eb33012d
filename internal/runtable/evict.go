package runtable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gttsplit/gttsplit/internal/regress"
)

// Closed runs past the index's share: the run index holds the summaries
// of closed runs (their figures above all, ~1.2 KiB a run) for as long as
// the runs are kept (store.retention), so without a bound a busy fleet's
// month of runs would take every aggregator's memory. The closed runs'
// summaries take at most closedCap bytes (Table: indexShare of
// Config.RunMemory, like the open runs'); past it the oldest (in the
// order the index held them closed: their close order, give or take) are
// evicted: what is left of one in memory is a stub (closedStub: its id,
// its close and last event's times, whether it was compacted, and its
// host, lane and model file as one shared group), what the retention
// janitor (expired), a partition's new owner (closedFull), /runs and the
// live page's list need. Whatever needs its figures reads its summary
// from the state bucket: /runs pages (Table.ReadPage), the lane changes
// (over the newest laneWindow runs of a lane: Table.laneRuns) and the
// trend page (Table.Figures). The last split of each lane stays held
// (the lane gauges read it). The stubs are charged stubCost and counted
// in the same share: past the point where the stubs alone fill it (14
// MiB at memory_limit_mib 224: ~80,000 stubs) every closed summary but
// the lanes' last is evicted, and each closed run still costs its stub.
// Go's maps keep the size they grew to: the index makes its maps of held
// summaries anew once they hold less than half of it (shrink).

const (
	// stubBase is what a closed run's stub takes beside its id (its map
	// slot, its place in the sorted ids and its group's list, with their
	// slack; measured by TestBesideRunsCostCharged: ~135 B).
	stubBase = 160
	// laneWindow bounds the evicted runs of a lane the lane changes read
	// back from the bucket (its newest): with the runs held, the changes
	// are those of the lane's newest laneWindow runs at least; the
	// record carries the older changes posted before (regress.Carry).
	laneWindow = 256
)

// closedStub is what the index keeps of a closed run whose summary it
// evicted.
type closedStub struct {
	last, at int64  // LastEvent, ClosedAt: Unix ns (0: none)
	group    uint32 // its host, lane and model in Index.groups
	compact  bool   // its state was compacted
	figures  bool   // its summary has figures (a lane's run)
}

// stubGroup is the host, lane and model file (model "" for summaries
// without figures) of evicted runs, shared by their stubs.
type stubGroup struct {
	LaneKey
	n int // stubs of the group
	// evicted are the group's stubs with figures, in the order they were
	// evicted; stale counts the ids in it that are no longer such stubs.
	evicted []string
	stale   int
}

func stubCost(id string) int64 { return stubBase + int64(len(id)) }

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// groupOf returns the group of k, made when there is none. ix.mu is held.
func (ix *Index) groupOf(k LaneKey) uint32 {
	if g, ok := ix.groupIDs[k]; ok {
		return g
	}
	var g uint32
	if n := len(ix.freeGroups); n > 0 {
		g, ix.freeGroups = ix.freeGroups[n-1], ix.freeGroups[:n-1]
	} else {
		if len(ix.groups) == 0 {
			ix.groups = append(ix.groups, stubGroup{}) // 0: none
		}
		g = uint32(len(ix.groups))
		ix.groups = append(ix.groups, stubGroup{})
	}
	ix.groups[g] = stubGroup{LaneKey: k}
	ix.groupIDs[k] = g
	return g
}

// holdClosed notes that the index holds closed run id's summary (its room
// made by evictClosed). ix.mu is held.
func (ix *Index) holdClosed(id string) {
	if ix.closedCap <= 0 {
		return
	}
	ix.closedQ = append(ix.closedQ, id)
	// The queue keeps ids no longer held (deleted, opened again): drop
	// them when they are most of it.
	if held := int(ix.runs[1].Load()); len(ix.closedQ) > 2*held+64 {
		ix.closedQ = slices.DeleteFunc(ix.closedQ, func(id string) bool {
			s, ok := ix.m[id]
			return !ok || s.State != "closed"
		})
	}
}

// evictClosed evicts the held closed summaries that came first while
// they, the stubs and extra bytes more pass closedCap; a lane's last
// split stays. ix.mu is held.
func (ix *Index) evictClosed(extra int64) {
	if ix.closedCap <= 0 {
		return
	}
	for tries := len(ix.closedQ); tries > 0 && ix.bytes[1].Load()+ix.stubBytes.Load()+extra > ix.closedCap; tries-- {
		id := ix.closedQ[0]
		ix.closedQ = ix.closedQ[1:]
		s, ok := ix.m[id]
		if !ok || s.State != "closed" {
			continue // not held (any more)
		}
		if k, ok := laneOf(s); ok && ix.byLane[k] != nil && ix.byLane[k].last == id {
			ix.closedQ = append(ix.closedQ, id) // the lane gauges read it
			continue
		}
		ix.evict(id, s)
	}
	ix.shrink()
}

// shrink makes the maps of held summaries anew once they hold less than
// half of what they grew to: Go's maps keep their size, so the slots of
// the summaries evicted would stay taken. ix.mu is held.
func (ix *Index) shrink() {
	n := len(ix.m)
	if n > ix.mPeak {
		ix.mPeak = n
	}
	if ix.mPeak < 2*n+1024 {
		return
	}
	ix.mPeak = n
	ix.m = resized(ix.m)
	ix.lanes.runLane = resized(ix.lanes.runLane)
	for _, lr := range ix.lanes.byLane {
		lr.runs = resized(lr.runs)
	}
	ix.members.runLane = resized(ix.members.runLane)
	for k, rs := range ix.members.byLane {
		ix.members.byLane[k] = resized(rs)
	}
}

// evict replaces closed run id's summary s by a stub. ix.mu is held.
func (ix *Index) evict(id string, s RunSummary) {
	delete(ix.m, id)
	ix.count(&s, -1)
	ix.relane(ix.m, id, s, true)
	ix.members.unfile(id)
	k := LaneKey{Host: s.Host, Lane: s.Lane}
	if s.Split != nil {
		k.Model = ix.name(s.Split.Model)
	}
	st := closedStub{last: unixNano(s.LastEvent), at: unixNano(s.ClosedAt), group: ix.groupOf(k), compact: s.Compact, figures: s.Split != nil}
	g := &ix.groups[st.group]
	g.n++
	if st.figures {
		g.evicted = append(g.evicted, id)
	}
	ix.stubs[id] = st
	ix.stubsN.Add(1)
	ix.stubBytes.Add(stubCost(id))
}

// unstub drops run id's stub, if it has one. ix.mu is held.
func (ix *Index) unstub(id string) (closedStub, bool) {
	st, ok := ix.stubs[id]
	if !ok {
		return st, false
	}
	delete(ix.stubs, id)
	ix.stubsN.Add(-1)
	ix.stubBytes.Add(-stubCost(id))
	g := &ix.groups[st.group]
	g.n--
	if st.figures {
		g.stale++
	}
	switch {
	case g.n == 0:
		delete(ix.groupIDs, g.LaneKey)
		*g = stubGroup{}
		ix.freeGroups = append(ix.freeGroups, st.group)
	case g.stale > len(g.evicted)/2:
		seen := map[string]bool{}
		g.evicted = slices.DeleteFunc(g.evicted, func(id string) bool {
			s, ok := ix.stubs[id]
			drop := !ok || s.group != st.group || !s.figures || seen[id]
			seen[id] = true
			return drop
		})
		g.stale = 0
	}
	return st, true
}

// resized is a copy of m in a map of its size (maps.Clone keeps m's).
func resized[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// stubSummary is the summary a stub keeps (no figures). ix.mu is held.
func (ix *Index) stubSummary(id string, st closedStub) RunSummary {
	g := ix.groups[st.group]
	return RunSummary{ID: id, Host: g.Host, Lane: g.Lane, State: "closed", LastEvent: fromUnixNano(st.last),
		ClosedAt: fromUnixNano(st.at), Compact: st.compact}
}

// Evicted is how many closed runs' summaries the index evicted (it keeps
// their stubs), and the bound in bytes of the closed runs' summaries and
// stubs (0: no bound).
func (ix *Index) Evicted() (runs int64, capBytes int64) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return int64(len(ix.stubs)), ix.closedCap
}

// isEvicted says closed run id's summary was evicted.
func (ix *Index) isEvicted(id string) bool {
	if ix.stubsN.Load() == 0 {
		return false
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	_, ok := ix.stubs[id]
	return ok
}

// laneMembers returns lane k's closed runs whose summaries are held (its
// controls too) and the ids of its newest evicted ones, up to laneWindow
// runs in all (at least the held ones).
func (ix *Index) laneMembers(k LaneKey) (held []regress.Run, evicted []string) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for id := range ix.members.byLane[k] {
		s := ix.m[id]
		held = append(held, regress.Run{ID: s.ID, Host: s.Host, Lane: s.Lane, F: *s.Split})
	}
	g, ok := ix.groupIDs[k]
	if !ok {
		return held, nil
	}
	seen := map[string]bool{}
	ev := ix.groups[g].evicted
	for i := len(ev) - 1; i >= 0 && len(held)+len(evicted) < laneWindow; i-- {
		id := ev[i]
		if st, ok := ix.stubs[id]; ok && st.group == g && st.figures && !seen[id] {
			seen[id] = true
			evicted = append(evicted, id)
		}
	}
	return held, evicted
}

// Summary reads run id's summary from the state bucket (with a closed
// run's figures, also when the index evicted them); ok false when the run
// has none.
func (t *Table) Summary(ctx context.Context, id string) (s RunSummary, ok bool, err error) {
	b, err := t.st.get(ctx, summaryKey(id))
	switch {
	case errors.Is(err, errNotFound):
		return s, false, nil
	case err != nil:
		return s, false, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, false, fmt.Errorf("run %q: summary unreadable: %w", id, err)
	}
	return s, true, nil
}

// laneRuns are lane k's closed runs with figures (its controls too) for
// its changes: those the index holds and its newest evicted ones read
// from the bucket, laneWindow in all (at least the held ones). A summary
// the bucket does not give is left out.
func (t *Table) laneRuns(ctx context.Context, k LaneKey) []regress.Run {
	runs, evicted := t.index.laneMembers(k)
	for _, id := range evicted {
		s, ok, err := t.Summary(ctx, id)
		if err != nil {
			t.log.Debug().Err(err).Str("run_id", id).Msg("lane changes: evicted run's summary not read")
			continue
		}
		if ok && s.State == "closed" && s.Split != nil {
			runs = append(runs, regress.Run{ID: s.ID, Host: s.Host, Lane: s.Lane, F: *s.Split})
		}
	}
	return runs
}

// Evicted says how many closed runs' summaries are not held in memory,
// and why ("" when none): past their share of the runs' memory bound the
// run index keeps a stub of a closed run, and its figures are read from
// the state bucket (evict.go).
func (t *Table) Evicted() (int64, string) {
	n, capBytes := t.index.Evicted()
	if n == 0 {
		return 0, ""
	}
	return n, fmt.Sprintf("%d closed runs' summaries not held in memory: the run index keeps closed runs' summaries in at most %d KiB (1/%d of the runs' memory bound, from memory_limit_mib) and only a stub of the older ones; /runs reads their summaries from the state bucket, /runs/{id} their states",
		n, capBytes>>10, indexShare)
}

// ReadPage is ListPage with the summaries the index evicted read from the
// state bucket (their figures); one the bucket does not give stays as the
// index has it.
func (t *Table) ReadPage(ctx context.Context, after string, limit int) ([]RunSummary, bool, error) {
	out, more := t.ListPage(after, limit)
	for i, s := range out {
		if s.State != "closed" || s.Split != nil || !t.index.isEvicted(s.ID) {
			continue
		}
		full, ok, err := t.Summary(ctx, s.ID)
		if err != nil {
			return out, more, err
		}
		if ok && full.ID == s.ID {
			out[i] = full
		}
	}
	return out, more, nil
}
