package runtable

import (
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// heapGrowth is what build's result takes on the heap, in bytes: the
// heap after a collection with it alive against the heap after one
// before it was built. Other goroutines of the test process (a server
// or table of an earlier test still shutting down) free or allocate
// meanwhile, more so on a loaded machine, so build runs three times and
// the median is taken; the last result is returned with it.
func heapGrowth[T any](build func() T) (int64, T) {
	var took [3]int64
	var v T
	for i := range took {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		v = build()
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(v)
		took[i] = int64(after.HeapAlloc) - int64(before.HeapAlloc)
	}
	slices.Sort(took[:])
	return took[1], v
}

// What the runs cost wherever their state is counts against the runs'
// memory bound (memory.go: besideRuns): the run index's summaries of open
// and of closed runs (decoded from their keys' values as the index's
// watch does), and the cold entries of shed runs, are charged at least
// what they are measured to take on the heap, and not more than twice.
func TestBesideRunsCostCharged(t *testing.T) {
	// 16,384 summaries: the index's map has just grown (its slots the
	// least full), what a summary takes at its most. Under -race 4,096,
	// also a power of two (each size is built 15 times; at 16,384 that
	// took 26-37 s of the package's serial part on a loaded machine): it
	// measures the same bytes a run (338 and 340 for the open summaries,
	// 134 and 139 for the stubs, at load ~20).
	n := 16_384
	if raceEnabled {
		n = 4_096
	}
	at := time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC)
	mib := split.MiB(1234.5)
	yes := true
	summary := func(i int, closed bool) []byte {
		s := RunSummary{ID: fmt.Sprintf("flood-%06d-0", i), Host: "gpu-host-01", Lane: "4b-q4", State: "open", LastEvent: at}
		if closed {
			s.State, s.ClosedAt = "closed", at.Add(time.Minute)
			s.Split = &split.Figures{Model: "qwen3-4b-q4_k_m", Build: "b6800 (a1b2c3d)", Commit: "a1b2c3d4e5f6", Dirty: &yes,
				Started: at.Format(time.RFC3339), Complete: true, PeakGTTMiB: &mib, FinalGTTMiB: &mib, ModelGTTMiB: &mib, PackedMiB: &mib,
				StateMiB: &mib, ComputeMiB: &mib, UnattributedMiB: &mib, UnattributedPct: &mib, DuplicatePct: &mib}
		}
		b, err := json.Marshal(s)
		require.NoError(t, err)
		return b
	}
	// An index of n summaries, decoded as the index's watch decodes
	// them; the open runs' summaries listed up to openCap bytes (0: all).
	index := func(closed bool, openCap int64) *Index {
		ix := newIndex()
		ix.openCap = openCap
		for i := range n {
			var s RunSummary
			require.NoError(t, json.Unmarshal(summary(i, closed), &s))
			ix.put(summaryKey(s.ID), s)
		}
		return ix
	}
	for _, closed := range []bool{false, true} {
		took, ix := heapGrowth(func() *Index { return index(closed, 0) })
		runs, charged := ix.footprint(closed)
		require.Equal(t, int64(n), runs)
		t.Logf("run index, closed %v: %d bytes a run taken, %d charged", closed, took/int64(n), charged/int64(n))
		require.GreaterOrEqual(t, charged, took, "the index is charged less than it takes")
		require.LessOrEqual(t, charged, 2*took, "the index is charged more than twice what it takes")
		runtime.KeepAlive(ix)
	}

	// Past the index's share, an open run is counted, not listed: a hash
	// in a set.
	took, ix := heapGrowth(func() *Index { return index(false, 1) })
	runs, charged := ix.footprint(false)
	unlisted, _ := ix.Unlisted()
	require.Equal(t, int64(n), runs)
	require.Equal(t, int64(n), unlisted)
	require.Zero(t, ix.Len(), "an open run past the share is listed")
	t.Logf("run index, open runs not listed: %d bytes a run taken, %d charged", took/int64(n), charged/int64(n))
	require.GreaterOrEqual(t, charged, took, "the runs not listed are charged less than they take")
	require.LessOrEqual(t, charged, 2*took, "the runs not listed are charged more than twice what they take")
	runtime.KeepAlive(ix)

	var tb *Table
	took, pt := heapGrowth(func() *part {
		tb = &Table{}
		pt := &part{t: tb, cold: map[string]coldRun{}}
		for i := range n {
			pt.addCold(fmt.Sprintf("flood-%06d-0", i), at.Add(time.Duration(i)), int64(i)<<10)
		}
		return pt
	})
	charged = tb.mem.coldBytes.Load()
	t.Logf("cold entries: %d bytes a run taken, %d charged", took/int64(n), charged/int64(n))
	require.GreaterOrEqual(t, charged, took, "the cold entries are charged less than they take")
	require.LessOrEqual(t, charged, 2*took, "the cold entries are charged more than twice what they take")
	runtime.KeepAlive(pt)

	// Past the closed runs' share, a closed run is a stub (evict.go).
	sums := make([]RunSummary, n)
	for i := range n {
		sums[i] = closedSummary(t, i, 64, at)
	}
	took, ix = heapGrowth(func() *Index {
		ix := newIndex()
		ix.closedCap = 1
		for _, s := range sums {
			ix.put(summaryKey(s.ID), s)
		}
		return ix
	})
	stubs, _ := ix.Evicted()
	require.Equal(t, int64(n-64-1), stubs, "all but the lanes' last splits evicted")
	charged = ix.stubBytes.Load()
	took -= (int64(n) - stubs) * 1500 // the summaries held, at most
	t.Logf("closed runs evicted to stubs: %d bytes a run taken (beside their ids), %d charged", took/stubs, charged/stubs)
	require.GreaterOrEqual(t, charged, took, "the stubs are charged less than they take")
	require.LessOrEqual(t, charged, 2*took, "the stubs are charged more than twice what they take")
	runtime.KeepAlive(ix)
	runtime.KeepAlive(sums)

	// Dropped, they are charged nothing.
	pt.mu.Lock()
	pt.forgetCold()
	pt.mu.Unlock()
	require.Zero(t, tb.mem.coldBytes.Load())
	require.Zero(t, tb.mem.cold.Load())
}

// The runs' count is a model; the heap is measured too. With the runs
// counted far under their bound, a live heap past heapShare of the
// runtime's soft memory limit counts as the bound passed, and shedding
// goes below what the runs are counted (to nothing here). With no limit
// set, the heap does not count.
func TestHeapPastItsShareSheds(t *testing.T) {
	tb := &Table{index: newIndex(), mem: memory{budget: 1 << 30}}
	tb.mem.used.Store(4 << 10)
	require.False(t, tb.overMem(), "no runtime limit")
	budget := float64(tb.mem.budget)
	require.Equal(t, int64(shedTo*budget), tb.shedTarget())

	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	live := int64(s[0].Value.Uint64())
	require.Positive(t, live)
	old := debug.SetMemoryLimit(int64(float64(live) / heapShare / 2)) // the heap twice past its share
	defer debug.SetMemoryLimit(old)
	require.Positive(t, heapExcess())
	require.True(t, tb.overMem(), "the heap past its share of the limit")
	require.Negative(t, tb.shedTarget(), "every run shed")

	debug.SetMemoryLimit(4 * live / 3 * 2) // the heap at half its share
	require.Zero(t, heapExcess())
	require.False(t, tb.overMem())
}

// TestWithinSpan: a pass takes the due runs (sorted by where they lie)
// up to n, those within span past the floor; with no floor said
// (math.MaxInt64) every one; a span's end past the largest position
// does not wrap (the floor is taken).
func TestWithinSpan(t *testing.T) {
	t.Parallel()
	due := []stamped{{"a", 10}, {"b", 20}, {"c", 30}, {"d", math.MaxInt64 - 1}}
	require.Equal(t, []string{"a", "b"}, withinSpan(due, 5, 15, 4), "up to floor+span, the end included")
	require.Equal(t, []string{"a"}, withinSpan(due, 5, 15, 1), "at most n")
	require.Empty(t, withinSpan(due, 5, 15, 0))
	require.Empty(t, withinSpan(due, 0, 5, 4), "the first lies past the span")
	require.Equal(t, []string{"a", "b", "c", "d"}, withinSpan(due, math.MaxInt64, 15, 4), "no floor: every one")
	require.Equal(t, []string{"a", "b", "c"}, withinSpan(due, math.MaxInt64-10, 15, 4), "an end past the largest position does not wrap: the floor")
}

// TestHeldClosesKeepToTheSpanOnlyNearTheShare: the held span is gated by
// the heap. Forty held runs are due by their idle timeout alone, written
// one KiB apart in the reverse order of their ids, and a run read back to
// be closed (warm) lies past them all; a pass closes at most 6, the span
// is 3 KiB. With the live heap under its share less a tenth of the
// runtime's limit (heapNear false), the pass closes as it would with no
// bound, the first 6 in the order of their ids (the runs written last);
// past it, or with no limit known, the warm run first, then only the 4
// held runs within the span of the one written first, in that order.
func TestHeldClosesKeepToTheSpanOnlyNearTheShare(t *testing.T) {
	t.Parallel()
	const runs, span, limit = 40, 3 << 10, 6
	base := time.Unix(1_700_000_000, 0)
	now := base.Add(time.Minute)
	tb := &Table{cfg: Config{IdleTimeout: time.Second}, byPart: map[int]*part{}, mem: memory{budget: 1 << 30}}
	tb.mem.heldSpan.Store(span)
	pt := &part{t: tb, runs: map[string]*liveRun{}, cold: map[string]coldRun{}}
	tb.byPart[0] = pt
	held := func(at int64) *liveRun {
		return &liveRun{st: &RunState{LastEvent: base}, stored: true, at: at}
	}
	var byID, written []string
	for i := range runs {
		id := fmt.Sprintf("run-%02d", runs-1-i) // written i-th
		pt.runs[id] = held(int64(i+1) << 10)
		written = append(written, id)
	}
	for i := range limit {
		byID = append(byID, fmt.Sprintf("run-%02d", i))
	}
	warm := held(int64(runs+1) << 10)
	warm.warm = true
	pt.runs["warm"] = warm

	const memLimit = 1 << 30
	gate := (heapShare - 0.1) * memLimit
	closes := func(live int64, ok bool) []string {
		f := func(name string) (int64, int64, bool) {
			require.Equal(t, "/gc/heap/live:bytes", name)
			return live, memLimit, ok
		}
		tb.mem.figure.Store(&f)
		pt.mu.Lock()
		defer pt.mu.Unlock()
		var ids []string
		for _, c := range pt.closeFirst(t.Context(), now, limit) {
			require.Same(t, pt.runs[c.id], c.r)
			ids = append(ids, c.id)
		}
		return ids
	}
	inSpan := append([]string{"warm"}, written[:4]...)
	require.Equal(t, byID, closes(int64(gate-0.05*memLimit), true),
		"the heap under the gate: the held runs close in the order of their ids")
	require.Equal(t, byID, closes(0, true), "an empty heap: in the order of their ids")
	require.Equal(t, inSpan, closes(int64(gate+0.05*memLimit), true),
		"the heap past the gate: the warm run, then the held runs within the span only")
	require.Equal(t, inSpan, closes(memLimit, true), "the heap at the limit: within the span")
	require.Equal(t, inSpan, closes(0, false), "no limit known: within the span")
	require.Equal(t, byID, closes(int64(gate-0.05*memLimit), true), "back under the gate: in the order of their ids")
}
