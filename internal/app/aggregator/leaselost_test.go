package aggregator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/runtable"
)

// TestServeLeasesLostWriteEachSplitOnceIntegration folds 52 runs while the
// aggregator keeps losing its partitions' leases (until half are closed) (a lease key deleted every
// 200 ms, as one that expired while its renewal waited on a loaded
// machine): each time it takes the partition again with a new lease and
// folds again what was not acknowledged. Whatever the old lease's table
// still had in flight is fenced out, so every run gets exactly one split:
// one close, one document, one line.
func TestServeLeasesLostWriteEachSplitOnceIntegration(t *testing.T) {
	skipShort(t)
	const n = 52
	fxs := []fixture{loadFixture(t, fixture4B), loadFixture(t, fixture27B)}
	runs := genRuns(t, n, fxs...)
	b := startBroker(t)
	cfg := testConfig(t, b.url)
	s := startServe(t, cfg, ServeOptions{})
	kv, err := b.js.KeyValue(context.Background(), runtable.Bucket)
	require.NoError(t, err)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	lost := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(200 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			// The leases are lost while half the runs fold; then the rest
			// fold in peace, however slow the machine (a partition taken
			// every 200 ms again refolds what was not acknowledged: on a
			// loaded machine the fold would never catch up).
			if _, c := s.closes.count(); c >= n/2 {
				return
			}
			key := fmt.Sprintf("lease.%s.%d", cfg.Consumer.Fleet.Group, rand.IntN(cfg.Consumer.Stream.Partitions))
			if _, err := kv.Get(ctx, key); err == nil && kv.Delete(ctx, key) == nil {
				lost++
			}
		}
	}()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, g := range runs {
			if k := len(s.closes.of(g.Origin.RunID)); k != 1 {
				t.Logf("run %s (partition %d): %d splits", g.Origin.RunID, bus.PartitionOf(g.Origin.RunID, cfg.Consumer.Stream.Partitions), k)
			}
		}
	})
	b.publish(t, interleave(runs)...)
	closed := func() float64 { _, c := s.closes.count(); return float64(c) }
	whileProgress(t, fmt.Sprintf("%d runs closed", n), func() bool { return closed() >= n }, closed)
	stop()
	wg.Wait()
	t.Logf("%d leases lost while folding", lost)
	require.Positive(t, lost)
	b.waitAcked(t, cfg.Consumer.Fleet.Group)
	require.NoError(t, s.stop(t))

	splits, distinct := s.closes.count()
	for _, g := range runs {
		if k := len(s.closes.of(g.Origin.RunID)); k != 1 {
			t.Logf("run %s: %d splits", g.Origin.RunID, k)
		}
	}
	require.Equal(t, n, distinct)
	require.Equal(t, n, splits, "exactly one split per run")
	require.Len(t, sinkDocs(t, cfg.Sinks.JSON.Dir), n)
	require.Len(t, sinkLines(t, cfg.Sinks.JSON.Dir), n, "one line per run")
}
