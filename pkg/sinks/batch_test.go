package sinks_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// batchSink is a BatchWriter recording its batches; it blocks until the
// test lets it write, and fails the batches fail says.
type batchSink struct {
	sinktest.Memory
	mu      sync.Mutex
	batches []int
	fail    int // batches still to fail
	gate    chan struct{}
}

func (b *batchSink) WriteBatch(ctx context.Context, rs []split.Report, keep func(split.Report) bool) ([]bool, error) {
	<-b.gate
	b.mu.Lock()
	b.batches = append(b.batches, len(rs))
	if b.fail > 0 {
		b.fail--
		b.mu.Unlock()
		return nil, errors.New("disk busy")
	}
	b.mu.Unlock()
	kept := sinks.Kept(rs, keep)
	for i, r := range rs {
		if kept[i] {
			if err := b.Write(ctx, r); err != nil {
				return nil, err
			}
		}
	}
	return kept, nil
}

func (b *batchSink) sizes() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.batches...)
}

// A BatchWriter is handed what waits in its queue together, at most Batch
// reports at a time; a failed batch is retried whole; Keep withdraws the
// reports it refuses, for a batch sink as for a plain one.
func TestFanoutBatchesAndKeep(t *testing.T) {
	t.Parallel()
	bs := &batchSink{gate: make(chan struct{}), fail: 1}
	plain := new(sinktest.Memory)
	ev := newEvents()
	keep := func(r split.Report) bool { return r.Run.ID != "run-007" }
	f := newFanout(t, nil, sinks.FanoutConfig{Batch: 5, Keep: keep, Observer: ev},
		sinks.Target{Name: "batch", Sink: bs}, sinks.Target{Name: "plain", Sink: plain})
	ctx := context.Background()
	const n = 12
	for i := 0; i < n; i++ {
		require.NoError(t, f.Write(ctx, sinktest.Report(fmt.Sprintf("run-%03d", i))))
	}
	close(bs.gate) // the first batch (1 report: all there was) fails and comes again
	require.NoError(t, f.Flush(ctx))
	require.Len(t, bs.Runs(), n-1, "every report but the withdrawn one")
	require.NotContains(t, bs.Runs(), "run-007")
	require.Len(t, plain.Runs(), n-1)
	require.NotContains(t, plain.Runs(), "run-007")
	for _, size := range bs.sizes() {
		require.LessOrEqual(t, size, 5)
	}
	require.Greater(t, len(bs.sizes()), 1)
	require.Less(t, len(bs.sizes()), n, "batched: fewer writes than reports")
	withdrawn := 0
	for len(ev.ch) > 0 {
		if e := <-ev.ch; e.Outcome == sinks.OutcomeWithdrawn {
			require.Equal(t, "run-007", e.RunID)
			withdrawn++
		}
	}
	require.Equal(t, 2, withdrawn, "one a sink")
}
