package aggregator

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/events"
)

// The run index pages /runs from the summary keys, and the retention
// deletes closed runs past it (state and summary), keeping the others.
func TestRunIndexPagesAndExpires(t *testing.T) {
	skipShort(t)
	b := startBroker(t)
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	svc, err := NewService(testCtx(t), b.js, ServiceConfig{Fold: foldOptions(t), IdleTimeout: time.Hour, Partitions: 4,
		Now: func() time.Time { return now }}, nil, testLogger(t))
	require.NoError(t, err)
	defer svc.closeIndex()
	ctx := testCtx(t)
	for i := 0; i < 5; i++ {
		st := NewRunState(events.Origin{RunID: fmt.Sprintf("r%d", i), Host: "h", Lane: "l"}, svc.opts)
		_, err := svc.write(ctx, st, 0)
		require.NoError(t, err)
		closedAt := now.Add(-time.Duration(i*10) * 24 * time.Hour) // r0 now ... r4 40 days ago
		svc.putSummary(ctx, st, "closed", closedAt)
	}
	eventually(t, "the index", func() bool {
		page, _ := svc.index.page("", 10)
		closed := 0
		for _, s := range page {
			if s.State == "closed" {
				closed++
			}
		}
		return closed == 5
	})
	page, more := svc.listPage("", 2)
	require.True(t, more)
	require.Equal(t, []string{"r0", "r1"}, []string{page[0].ID, page[1].ID})
	page, more = svc.listPage("r1", 10)
	require.False(t, more)
	require.Len(t, page, 3)
	require.Equal(t, "closed", page[0].State)

	require.Equal(t, 2, svc.Expire(ctx, 25*24*time.Hour), "r3 (30 days) and r4 (40 days)")
	eventually(t, "the index after the retention", func() bool { return svc.index.len() == 3 })
	_, err = svc.kv.Get(ctx, stateKey("r4"))
	require.Error(t, err, "the state of an expired run is deleted")
	_, err = svc.kv.Get(ctx, stateKey("r2"))
	require.NoError(t, err)
}

// BenchmarkRunsPage answers one /runs page (100 runs) from the index of
// 100,000 closed runs.
func BenchmarkRunsPage(b *testing.B) {
	ix := newRunIndex()
	const n = 100_000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("host%02d-2026110%dT%06d-run", i%37, i%9, i)
		ix.put(summaryKey(ids[i]), RunSummary{ID: ids[i], Host: "h", Lane: "l", State: "closed", ClosedAt: time.Unix(int64(i), 0)})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for b.Loop() {
		page, _ := ix.page(ids[rng.IntN(n)], 100)
		if len(page) == 0 && n > 100 {
			continue
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/page")
}
