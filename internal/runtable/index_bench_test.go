package runtable

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkRunsPage answers one /runs page (100 runs) from the index of
// 100,000 closed runs, after a random run.
func BenchmarkRunsPage(b *testing.B) {
	ix := newIndex()
	const n = 100_000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("host%02d-2026110%dT%06d-run", i%37, i%9, i)
		ix.put(summaryKey(ids[i]), RunSummary{ID: ids[i], Host: "h", Lane: "l", State: "closed", ClosedAt: time.Unix(int64(i), 0)})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rows := 0
	b.ResetTimer()
	for b.Loop() {
		page, _ := ix.page(ids[rng.IntN(n)], 100)
		rows += len(page)
	}
	if rows == 0 {
		b.Fatal("no page had a run")
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/page")
}
