package aggregator

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// BenchmarkHistoryStore measures `aggregator history` over a store of
// GTTSPLIT_BENCH_RUNS (default 5,000) closed runs of 50 lanes, each the 4B
// run's compact record: reading their figures from the run index (what
// history does), against reading every run's state, what it would do
// without the figures in the summaries (and does for a run an earlier
// version summarised). Both passes open the store through --nats-url and
// group the runs into the history.
//
//	go test ./internal/app/aggregator -run '^$' -bench HistoryStore -benchtime 3x
func BenchmarkHistoryStore(b *testing.B) {
	n := 5000
	if v, err := strconv.Atoi(os.Getenv("GTTSPLIT_BENCH_RUNS")); err == nil && v > 0 {
		n = v
	}
	fx := loadFixture(b, fixture4B)
	br := startBroker(b)
	ctx := testCtx(b)
	_, err := runtable.EnsureBucket(ctx, br.js, 1, testLogger(b))
	require.NoError(b, err)
	// The 4B run's compact record (as store.compact_after leaves it).
	st := runtable.NewRunState(fx.Origin, foldOptions(b))
	for _, d := range fx.Decoded {
		runtable.ApplyTo(st, d)
	}
	rep := runtable.Report(st)
	js, err := split.JSON(rep)
	require.NoError(b, err)
	seen := st.Fold.Seen()
	t0 := time.Date(2026, 11, 7, 14, 0, 0, 0, time.UTC)
	compact := *st
	compact.Fold, compact.Seen, compact.Reported, compact.Closed, compact.ClosedAt, compact.Splits = nil, &seen, string(js), true, t0, 1
	state, err := runtable.MarshalState(&compact)
	require.NoError(b, err)
	fig := split.FiguresOf(rep)
	// The keys as the run table writes them (docs/operations.md): the
	// state under run.<id>, the summary under sum.run.<id>.
	put := func(key string, data []byte) {
		_, err := br.js.PublishMsgAsync(&nats.Msg{Subject: "$KV." + runtable.Bucket + "." + key, Data: data})
		require.NoError(b, err)
	}
	summaries := func(withFigures bool) {
		for i := range n {
			id := fmt.Sprintf("strix%02d-20261107T%06d-4b", i%50, i)
			s := runtable.RunSummary{ID: id, Host: fmt.Sprintf("strix%02d", i%50), Lane: "gpu0", State: "closed", LastEvent: t0, ClosedAt: t0}
			if withFigures {
				s.Split = &fig
			}
			v, err := json.Marshal(s)
			require.NoError(b, err)
			put("sum.run."+id, v)
			if i%1000 == 999 {
				<-br.js.PublishAsyncComplete()
			}
		}
		<-br.js.PublishAsyncComplete()
	}
	for i := range n {
		put(fmt.Sprintf("run.strix%02d-20261107T%06d-4b", i%50, i), state)
		if i%1000 == 999 {
			<-br.js.PublishAsyncComplete()
		}
	}
	history := func() (time.Duration, StoredRuns) {
		t := time.Now()
		cfg := testConfig(b, br.url)
		f, err := NewReports(cfg, testLogger(b))
		require.NoError(b, err)
		defer f.Close()
		got, err := f.Stored(ctx, func(runtable.RunSummary) bool { return true })
		require.NoError(b, err)
		h := regress.NewHistory(got.Runs, regress.Filter{}, regress.DefaultThresholdPct)
		require.Len(b, h.Groups, 50)
		return time.Since(t), got
	}
	var tFig, tState time.Duration
	for b.Loop() {
		b.StopTimer()
		summaries(true)
		b.StartTimer()
		d, got := history()
		require.Zero(b, got.FromState)
		require.Len(b, got.Runs, n)
		tFig += d
		b.StopTimer()
		summaries(false)
		b.StartTimer()
		d, got = history()
		require.Equal(b, n, got.FromState)
		require.Equal(b, fig.PackedMiB, got.Runs[0].F.PackedMiB)
		tState += d
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(tFig.Seconds()/float64(b.N), "s/history")
	b.ReportMetric(tState.Seconds()/float64(b.N), "s/history-baseline")
	b.ReportMetric(float64(tState)/float64(tFig), "speedup")
	b.ReportMetric(float64(len(state)), "state-B")
}
