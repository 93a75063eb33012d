package runtable_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
)

// More closed runs than the run index may hold within its share of the
// runs' memory bound (1/8 of 1 MiB here: ~100 closed summaries with their
// figures): the closed runs' summaries and stubs stay within that share
// all along (sampled; the old index held every summary, ~1.2 KiB a run),
// the older ones are evicted to stubs, and every reader still finds them:
// /runs pages read their summaries (figures) from the bucket, the lane
// changes read the lane's evicted runs from the bucket, the retention
// janitor deletes them, and gttsplit_runs_closed_evicted and Evicted say
// how many are not held.
func TestClosedRunsEvictedWithinTheirShareIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	const group, flood = "evicting", 240 // a lane's window holds them all
	_, fx, b, clk, _, r := startBounded(t, group)

	wires := fx.Starts(t, "evicting-%04d", flood)
	b.Publish(t, wires...)
	waitMoving(t, "the flood acknowledged", func() (uint64, bool) { return acked(b, group) })

	// What the closed runs' summaries and stubs are charged, sampled
	// while they close.
	stopSampling := samplePeak(t, func() (int64, int64) {
		_, _, bytes, _ := r.tbl.IndexClosed()
		return bytes, 0
	})
	clk.advance(boundIdle + time.Minute)
	waitMoving(t, "every run closed", func() (uint64, bool) {
		n, _ := r.closes.count()
		return uint64(n), n == flood
	})
	waitMoving(t, "every closed run in the index", func() (uint64, bool) {
		held, stubs, _, _ := r.tbl.IndexClosed()
		return uint64(held + stubs), held+stubs == flood
	})
	peak, _ := stopSampling()
	held, stubs, _, capBytes := r.tbl.IndexClosed()
	t.Logf("closed runs: %d summaries held, %d evicted to stubs; charged at most %d KiB of a %d KiB share", held, stubs, peak>>10, capBytes>>10)
	require.Equal(t, int64(boundBudget/8), capBytes)
	require.LessOrEqual(t, peak, capBytes, "the closed runs' summaries passed their share")
	require.Positive(t, stubs)
	n, why := r.tbl.Evicted()
	require.Equal(t, stubs, n)
	require.Contains(t, why, fmt.Sprintf("%d closed runs' summaries not held in memory", n))
	require.Contains(t, why, "memory_limit_mib")
	require.Equal(t, float64(n), counter(t, r.m, "gttsplit_runs_closed_evicted"))

	// /runs: every run listed, its figures read from the bucket when
	// evicted.
	var page []runtable.RunSummary
	for after := ""; ; {
		p, more, err := r.tbl.ReadPage(rt.Ctx(t), after, 50)
		require.NoError(t, err)
		page = append(page, p...)
		if !more {
			break
		}
		after = p[len(p)-1].ID
	}
	require.Len(t, page, flood)
	var lane runtable.LaneKey
	for _, s := range page {
		require.Equal(t, "closed", s.State, s.ID)
		require.NotNil(t, s.Split, "run %s listed without its figures", s.ID)
		require.False(t, s.ClosedAt.IsZero(), s.ID)
		lane = runtable.LaneKey{Host: s.Host, Lane: s.Lane, Model: s.Split.Model}
	}

	// The lane changes are made of every run of the lane (within its
	// window), held or evicted.
	runs := r.tbl.LaneRuns(rt.Ctx(t), lane)
	ids := map[string]bool{}
	for _, run := range runs {
		ids[run.ID] = true
	}
	require.Len(t, ids, flood, "the lane changes miss runs")

	// The retention janitor finds and deletes the evicted runs too.
	clk.advance(48 * time.Hour)
	require.Equal(t, flood, r.tbl.Expire(rt.Ctx(t), 24*time.Hour))
	held, stubs, bytes, _ := r.tbl.IndexClosed()
	require.Zero(t, held)
	require.Zero(t, stubs)
	require.Zero(t, bytes)
	require.Zero(t, r.tbl.Index().Len())
	require.Zero(t, counter(t, r.m, "gttsplit_runs_closed_evicted"))
	_, ok, err := r.tbl.Summary(rt.Ctx(t), "evicting-0000")
	require.NoError(t, err)
	require.False(t, ok, "an expired run's summary is still in the bucket")
}
