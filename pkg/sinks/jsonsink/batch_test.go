package jsonsink_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/offline"
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
// 256 (WriteBatch: two syncs a batch). The reports are the recorded 4B
// run's split (its log and samples folded) under other ids.
//
//	go test ./pkg/sinks/jsonsink -run '^$' -bench WriteBatch -benchtime 2000x
func BenchmarkWriteBatch(b *testing.B) {
	fold := split.NewFold(split.Options{})
	runs := filepath.Join("..", "..", "..", "testdata", "runs", "4b")
	_, err := offline.Parse(fold, filepath.Join(runs, "split.log"), []string{filepath.Join(runs, "gtt.txt")})
	require.NoError(b, err)
	rep := fold.Report()
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
	for _, mode := range []string{"write", "batch256"} {
		b.Run(mode, func(b *testing.B) {
			s := newSink(&testing.T{}, b.TempDir()).(sinks.BatchWriter)
			rs := reports(b.N, 0)
			b.ResetTimer()
			if mode == "write" {
				for _, r := range rs {
					if err := s.Write(ctx, r); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				for i := 0; i < len(rs); i += 256 {
					if _, err := s.WriteBatch(ctx, rs[i:min(len(rs), i+256)], nil); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "splits/s")
			_ = s.Close(ctx)
		})
	}
}
