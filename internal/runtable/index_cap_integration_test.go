package runtable_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
)

// More runs open at once than the run index may list within its share of
// the runs' memory bound (1/8 of 1 MiB here: ~330 summaries; 1,500 runs
// open, of every partition): the open runs' summaries stay within that
// share all along (sampled; the old index kept every one, ~570 KiB), the
// runs past it are counted, not listed, and List, Unlisted and
// gttsplit_runs_unlisted say so (listed + not listed = open). Once they close (the idle timeout), every
// run is listed again and nothing is said to be left out.
func TestIndexListsOpenRunsWithinItsShareIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	const group, flood = "capped", 1500
	_, fx, b, clk, _, r := startBounded(t, group)

	wires := fx.Starts(t, "capped-%04d", flood)

	// What the listed open runs' summaries are charged, sampled all along.
	stopSampling := samplePeak(t, func() (int64, int64) {
		_, bytes, _, _ := r.tbl.IndexOpen()
		return bytes, 0
	})

	b.Publish(t, wires...)
	waitMoving(t, "the flood acknowledged", func() (uint64, bool) { return acked(b, group) })
	// Every run's summary seen by the index: listed or counted.
	waitMoving(t, "every open run in the index", func() (uint64, bool) {
		listed, _, unlisted, _ := r.tbl.IndexOpen()
		return uint64(listed + unlisted), listed+unlisted == flood
	})
	peak, _ := stopSampling()
	listed, _, unlisted, capBytes := r.tbl.IndexOpen()
	t.Logf("open runs: %d listed (summaries peaked at %d KiB of a %d KiB share), %d not listed", listed, peak>>10, capBytes>>10, unlisted)
	require.Equal(t, int64(boundBudget/8), capBytes)
	require.LessOrEqual(t, peak, capBytes, "the open runs' summaries passed their share")
	require.Positive(t, unlisted)
	require.Less(t, listed*runtable.SummaryCost(runtable.RunSummary{ID: "capped-0000", Host: fx.Origin.Host, Lane: fx.Origin.Lane}), capBytes+1)

	list, err := r.tbl.List(rt.Ctx(t))
	require.NoError(t, err)
	n, why := r.tbl.Unlisted()
	require.Equal(t, unlisted, n)
	require.Equal(t, flood, len(list)+int(n), "listed and not listed are the open runs")
	require.Contains(t, why, fmt.Sprintf("%d open runs not listed", n))
	require.Contains(t, why, "memory_limit_mib")
	require.Equal(t, float64(n), counter(t, r.m, "gttsplit_runs_unlisted"))
	for _, s := range list {
		require.NotEqual(t, "closed", s.State, s.ID)
	}

	// Closed, every run is listed.
	clk.advance(boundIdle + time.Minute)
	waitMoving(t, "every run closed", func() (uint64, bool) {
		n, _ := r.closes.count()
		return uint64(n), n == flood
	})
	waitMoving(t, "every closed run listed", func() (uint64, bool) {
		list, err := r.tbl.List(rt.Ctx(t))
		require.NoError(t, err)
		closed := 0
		for _, s := range list {
			if s.State == "closed" {
				closed++
			}
		}
		n, _ := r.tbl.Unlisted()
		return uint64(closed), closed == flood && n == 0
	})
	_, why = r.tbl.Unlisted()
	require.Empty(t, why)
	require.Zero(t, counter(t, r.m, "gttsplit_runs_unlisted"))
	require.False(t, strings.Contains(why, "not listed"))
}
