package jsonsink_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// A batch writes what the same reports written one by one write: the
// documents, and the lines (a repeat of a run's last line, within the batch
// or from before, is not appended); a report keep refuses is written
// nowhere.
func TestWriteBatchMatchesWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r1, r2, r3 := sinktest.Report("run-1"), sinktest.Report("run-2"), sinktest.Report("run-3")
	r1b := r1
	r1b.Flags = []string{"no_trace"}
	seq := []split.Report{r1, r1, r2, r1b, r3}

	one := t.TempDir()
	s1 := newSink(t, one)
	for _, r := range seq {
		require.NoError(t, s1.Write(ctx, r))
	}
	require.NoError(t, s1.Close(ctx))

	batch := t.TempDir()
	s2 := newSink(t, batch).(sinks.BatchWriter)
	written, err := s2.WriteBatch(ctx, seq[:2], nil)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, written)
	written, err = s2.WriteBatch(ctx, seq[2:], func(r split.Report) bool { return r.Run.ID != "run-3" })
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, false}, written, "run-3 withdrawn")
	require.NoError(t, s2.Close(ctx))

	require.Equal(t, []string{"run-1", "run-2", "run-1"}, runIDs(readLines(t, batch)))
	require.Equal(t, runIDs(readLines(t, one))[:3], runIDs(readLines(t, batch)))
	for _, run := range []string{"run-1", "run-2"} {
		a, err := os.ReadFile(filepath.Join(one, "node-1", "lane-a", run+".json"))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(batch, "node-1", "lane-a", run+".json"))
		require.NoError(t, err)
		require.Equal(t, string(a), string(b), run)
	}
	_, err = os.Stat(filepath.Join(batch, "node-1", "lane-a", "run-3.json"))
	require.ErrorIs(t, err, os.ErrNotExist, "withdrawn: no document")
}

// BenchmarkWriteBatch measures the splits a second the JSON sink writes
// to disk, each durable before it counts: one at a time (Write: a sync of
// the document, its directory and splits.jsonl each) against batches of
// 256 (WriteBatch: two syncs a batch), and through the aggregator's
// Fanout (batches of its default size, Keep asked before each commit,
// counted when the observer hears Delivered). The reports are the recorded 4B
// run's split (its log and samples folded) under other ids.
//
//	go test ./pkg/sinks/jsonsink -run '^$' -bench WriteBatch -benchtime 2000x
func BenchmarkWriteBatch(b *testing.B) {
	rep := report4B(b)
	reports := func(n, round int) []split.Report {
		out := make([]split.Report, n)
		for i := range out {
			r := rep
			r.Run.ID = fmt.Sprintf("run-%d-%06d", round, i)
			out[i] = r
		}
		return out
	}
	ctx := context.Background()
	for _, mode := range []string{"write", "batch256", "fanout"} {
		b.Run(mode, func(b *testing.B) {
			s := newSink(&testing.T{}, b.TempDir()).(sinks.BatchWriter)
			rs := reports(b.N, 0)
			b.ResetTimer()
			switch mode {
			case "fanout":
				fanout(b, s, rs)
			case "write":
				for _, r := range rs {
					if err := s.Write(ctx, r); err != nil {
						b.Fatal(err)
					}
				}
			default:
				for i := 0; i < len(rs); i += 256 {
					if _, err := s.WriteBatch(ctx, rs[i:min(len(rs), i+256)], nil); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "splits/s")
			_ = s.Close(ctx) // the fanout's Close closed it already: a second Close is nil
		})
	}
}

// fanout writes rs through a Fanout in front of s and waits until every
// report is delivered.
func fanout(b *testing.B, s sinks.Sink, rs []split.Report) {
	ctx := context.Background()
	delivered := make(chan struct{}, len(rs))
	obs := sinks.ObserverFunc(func(e sinks.Event) {
		if e.Outcome == sinks.OutcomeDelivered {
			delivered <- struct{}{}
		}
	})
	f, err := sinks.NewFanout(sinks.Settings{}, sinks.FanoutConfig{
		Observer: obs, MaxPending: len(rs),
		Keep: func(split.Report) bool { return true },
	}, sinks.Target{Name: "json", Sink: s})
	require.NoError(b, err)
	for _, r := range rs {
		require.NoError(b, f.Write(ctx, r))
	}
	for range rs {
		<-delivered
	}
	require.NoError(b, f.Close(ctx))
}

// report4B folds the recorded 4B run's log and samples into its split.
func report4B(tb testing.TB) split.Report {
	tb.Helper()
	runs := filepath.Join("..", "..", "..", "testdata", "runs", "4b")
	fold := split.NewFold(split.Options{})
	log, err := os.Open(filepath.Join(runs, "split.log"))
	require.NoError(tb, err)
	defer log.Close()
	_, err = fold.ReadLog(log, "log")
	require.NoError(tb, err)
	b, err := os.ReadFile(filepath.Join(runs, "gtt.txt"))
	require.NoError(tb, err)
	samples, _, err := split.ParseSamples(b)
	require.NoError(tb, err)
	for i, smp := range samples {
		smp.Seq = uint64(i + 1)
		fold.AddSample(smp)
	}
	return fold.Report()
}
