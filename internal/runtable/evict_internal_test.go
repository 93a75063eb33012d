package runtable

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// closedSummary is closed run i's summary as its key holds it, with its
// figures (of one of lanes lanes).
func closedSummary(t testing.TB, i, lanes int, at time.Time) RunSummary {
	mib := split.MiB(1234.5)
	yes := true
	s := RunSummary{ID: fmt.Sprintf("flood-%06d-0", i), Host: "gpu-host-01", Lane: fmt.Sprintf("lane-%d", i%lanes), State: "closed",
		LastEvent: at.Add(time.Duration(i) * time.Second), ClosedAt: at.Add(time.Duration(i)*time.Second + time.Minute)}
	s.Split = &split.Figures{Model: "qwen3-4b-q4_k_m", Build: "b6800 (a1b2c3d)", Commit: "a1b2c3d4e5f6", Dirty: &yes,
		Started: at.Format(time.RFC3339), Complete: true, PeakGTTMiB: &mib, FinalGTTMiB: &mib, ModelGTTMiB: &mib, PackedMiB: &mib,
		StateMiB: &mib, ComputeMiB: &mib, UnattributedMiB: &mib, UnattributedPct: &mib, DuplicatePct: &mib}
	b, err := json.Marshal(s)
	require.NoError(t, err)
	var out RunSummary
	require.NoError(t, json.Unmarshal(b, &out)) // decoded as the index's watch does
	return out
}

// The closed runs' summaries stay within their share of the runs' memory
// bound as the closed runs grow: the heap the index takes for 16,384,
// 32,768 and 65,536 closed runs (of 64 lanes) with a 12 MiB share stays
// within it (the old index held every summary: ~1.2 KiB a run, 75 MiB for
// 65,536; it passes the share from ~10,000), what they are charged too, and the older runs are stubs that
// the readers still find: the retention janitor's, the compaction's,
// the pages', the lane changes'.
func TestClosedSummariesHeldWithinTheirShare(t *testing.T) {
	const lanes = 64
	share := int64(12 << 20)
	at := time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC)
	sizes := []int{16_384, 32_768, 65_536}
	if raceEnabled {
		// Three builds of each size took minutes of the package's ten
		// under -race on a loaded machine (16,384 alone 34 s): a quarter
		// of the smallest size against a quarter of the share, which
		// 4,096 runs pass without eviction (~4.3 MiB against 3 MiB).
		sizes, share = []int{4_096}, 3<<20
	}
	for _, n := range sizes {
		took, ix := heapGrowth(func() *Index {
			ix := newIndex()
			ix.closedCap = share
			for i := range n {
				s := closedSummary(t, i, lanes, at)
				ix.put(summaryKey(s.ID), s)
			}
			return ix
		})
		runs, charged := ix.footprint(true)
		stubs, _ := ix.Evicted()
		t.Logf("%d closed runs: %d KiB taken, %d KiB charged, %d summaries held, %d stubs", n, took>>10, charged>>10, ix.runs[1].Load(), stubs)
		require.Equal(t, int64(n), runs)
		require.LessOrEqual(t, took, share, "the closed runs took more than their share")
		require.LessOrEqual(t, charged, share, "the closed runs are charged more than their share")
		require.Equal(t, n, ix.Len(), "every run listed")

		// The oldest are stubs; every reader finds them.
		require.Positive(t, stubs)
		first := closedSummary(t, 0, lanes, at)
		require.True(t, ix.isEvicted(first.ID))
		page, _ := ix.page("", 1)
		require.Equal(t, first.ID, page[0].ID)
		require.Equal(t, first.ClosedAt, page[0].ClosedAt)
		require.Equal(t, first.LastEvent, page[0].LastEvent)
		require.Equal(t, first.Host+"/"+first.Lane, page[0].Host+"/"+page[0].Lane)
		expired := 0
		for p := range 16 {
			expired += len(ix.expired(p, 16, at.Add(time.Duration(n)*time.Second+2*time.Minute)))
		}
		require.Equal(t, n, expired, "the retention janitor misses runs")
		full := 0
		for p := range 16 {
			full += len(ix.closedFull(p, 16))
		}
		require.Equal(t, n, full, "a new owner's compaction misses runs")
		held, evicted := ix.laneMembers(LaneKey{Host: first.Host, Lane: first.Lane, Model: first.Split.Model})
		require.Equal(t, min(n/lanes, max(laneWindow, len(held))), len(held)+len(evicted), "the lane changes miss runs")
		require.Positive(t, len(evicted))
		require.Contains(t, evicted, fmt.Sprintf("flood-%06d-0", lanes*(n/lanes-len(held)-1)), "the lane's newest evicted run is not read")
		runtime.KeepAlive(ix)
	}
}

// Evicted, a run is a stub until it is written again or deleted: compacted
// (its stub says so), closed again or opened again by a late event (held
// again), deleted (gone, its group with it); a lane's last split is never
// evicted.
func TestClosedStubsFollowTheirKeys(t *testing.T) {
	at := time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC)
	ix := newIndex()
	ix.closedCap = 1 // every closed summary but the lanes' last evicted
	for i := range 8 {
		s := closedSummary(t, i, 2, at)
		ix.put(summaryKey(s.ID), s)
	}
	// Each lane's last split is held, and the lane's split before it until
	// the next put makes room.
	require.Equal(t, int64(3), ix.runs[1].Load())
	stubs, _ := ix.Evicted()
	require.Equal(t, int64(5), stubs)
	ls, n := ix.LaneSplits(0)
	require.Equal(t, 2, n)
	require.ElementsMatch(t, []string{"flood-000006-0", "flood-000007-0"}, []string{ls[0].RunID, ls[1].RunID})

	s := closedSummary(t, 0, 2, at)
	s.Compact = true
	ix.put(summaryKey(s.ID), s)
	require.True(t, ix.isEvicted(s.ID))
	for p := range 16 {
		for _, f := range ix.closedFull(p, 16) {
			require.NotEqual(t, s.ID, f.ID, "a compacted stub queued for compaction")
		}
	}

	// Closed again after a late event, its open summary between not seen
	// (the watch gives a key's newest value): held with its new figures,
	// its lane's newest split now.
	s = closedSummary(t, 2, 2, at)
	s.ClosedAt = at.Add(time.Hour)
	build := "b6900 (d4e5f6a)"
	s.Split.Build = build
	ix.put(summaryKey(s.ID), s)
	require.False(t, ix.isEvicted(s.ID), "a run closed again stays a stub of its former close")
	got, ok := ix.get(s.ID)
	require.True(t, ok)
	require.Equal(t, build, got.Split.Build)
	ls, _ = ix.LaneSplits(0)
	require.ElementsMatch(t, []string{"flood-000002-0", "flood-000007-0"}, []string{ls[0].RunID, ls[1].RunID})
	require.Equal(t, 8, ix.Len())

	s = closedSummary(t, 1, 2, at)
	s.State, s.ClosedAt, s.Split = "open", time.Time{}, nil
	ix.put(summaryKey(s.ID), s)
	require.False(t, ix.isEvicted(s.ID))
	got, ok = ix.get(s.ID)
	require.True(t, ok)
	require.Equal(t, "open", got.State)
	require.Equal(t, 8, ix.Len())

	for i := range 8 {
		ix.del(summaryKey(closedSummary(t, i, 2, at).ID))
	}
	stubs, _ = ix.Evicted()
	require.Zero(t, stubs)
	require.Zero(t, ix.Len())
	require.Empty(t, ix.groupIDs)
	_, charged := ix.footprint(true)
	require.Zero(t, charged)
}
