package runtable_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// More closed runs kept than their share of the runs' memory bound (3/8 of
// 1 MiB here; each closed run charged 4 KiB for the broker in the process,
// a stand-in for the embedded broker's ~680 bytes at full size): the runs
// that closed first are deleted before store.retention (their closed and
// summary keys purged) until the closed runs kept are back within their
// share, none of the runs that closed last is, every run closed once with
// its split, none redelivered, gttsplit_runs_expired_early_total counts
// them. A late event of a run deleted so starts it anew: it closes again,
// with a split of its own. With the trimming taken out the closed runs
// kept stay past their share (the wait for them fails).
func TestClosedRunsPastTheirShareDeletedOldestFirstIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	const group, first, last = "trimming", 150, 60
	const brokerCost = 4 << 10
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	clk := newFakeClock()
	r := startTable(t, b.URL, group, tableConfig{idle: boundIdle, now: clk.now, consumer: trimConsumer,
		edit: func(c *config.Aggregator) { c.MemoryLimitMiB = 2 }})
	r.waitOwns(r.parts)
	r.tbl.SetBrokerClosedRunCost(brokerCost)

	wave := func(prefix string, n int) []string {
		wires := fx.Starts(t, prefix+"-%04d", n)
		ids := make([]string, n)
		for i := range n {
			ids[i] = fmt.Sprintf("%s-%04d", prefix, i)
		}
		done, _ := r.closes.count()
		b.Publish(t, wires...)
		waitMoving(t, prefix+": acknowledged", func() (uint64, bool) { return acked(b, group) })
		clk.advance(boundIdle + time.Minute)
		waitMoving(t, prefix+": every run closed", func() (uint64, bool) {
			n2, _ := r.closes.count()
			return uint64(n2), n2 == done+n
		})
		return ids
	}
	// The first wave closes an idle timeout before the last.
	older := wave("trim-first", first)
	newer := wave("trim-last", last)

	_, _, capBytes := r.tbl.ClosedKept()
	require.Equal(t, int64(3*boundBudget/8), capBytes)
	require.Greater(t, int64(first+last)*brokerCost, capBytes, "the runs do not pass the share: nothing to test")
	waitMoving(t, "the closed runs kept within their share", func() (uint64, bool) {
		runs, bytes, _ := r.tbl.ClosedKept()
		return uint64(runs), bytes <= capBytes
	})
	// A pass of the janitor may still be under way: this one waits for
	// it, and finds nothing more to delete.
	require.Zero(t, r.tbl.TrimClosed(rt.Ctx(t)))
	runs, bytes, _ := r.tbl.ClosedKept()
	expired := counter(t, r.m, "gttsplit_runs_expired_early_total")
	t.Logf("closed runs kept: %d, charged %d KiB of a %d KiB share; %v deleted early", runs, bytes>>10, capBytes>>10, expired)
	require.Equal(t, int64(first+last)-int64(expired), runs)

	// The ones deleted are the first wave's, those first by id (they
	// closed at the same time); the last wave is whole.
	var gone []string
	for _, id := range older {
		_, ok, err := r.tbl.Summary(rt.Ctx(t), id)
		require.NoError(t, err)
		if !ok {
			gone = append(gone, id)
			require.ErrorIs(t, getKey(t, b, runtable.StateKey(id)), jetstream.ErrKeyNotFound, "run %s: summary deleted, closed state kept", id)
		}
	}
	require.Len(t, gone, int(expired))
	require.True(t, sort.StringsAreSorted(gone))
	require.Equal(t, older[:len(gone)], gone, "not the runs that closed first were deleted")
	for _, id := range newer {
		_, ok, err := r.tbl.Summary(rt.Ctx(t), id)
		require.NoError(t, err)
		require.True(t, ok, "run %s of the last wave deleted", id)
		require.NoError(t, getKey(t, b, runtable.StateKey(id)), id)
	}
	for _, id := range append(append([]string(nil), older...), newer...) {
		require.Len(t, r.closes.of(id), 1, "run %s: splits", id)
	}
	require.Zero(t, counter(t, r.m, "gttsplit_events_redelivered_total"))

	// A late event of a run deleted early: the run starts anew and
	// closes with a split of its own.
	late := gone[0]
	w, err := rt.Rewrite(fx.Decoded[1], events.Origin{RunID: late, Host: fx.Origin.Host, Lane: fx.Origin.Lane})
	require.NoError(t, err)
	done, _ := r.closes.count()
	b.Publish(t, w)
	waitMoving(t, "the late event acknowledged", func() (uint64, bool) { return acked(b, group) })
	clk.advance(boundIdle + time.Minute)
	waitMoving(t, "the late run closed", func() (uint64, bool) {
		n, _ := r.closes.count()
		return uint64(n), n == done+1
	})
	require.Len(t, r.closes.of(late), 2)
}

// The same share passed while a sink holds the runs' splits (blocked: each
// run's pending marker stays in the bucket, the sink's queue defers what it
// cannot hold and reads it back from the closed state later): no run is
// deleted before every sink settled its split; once the sink goes on, every
// split reaches it once, and then the closed runs are deleted down to their
// share. Without the check of the pending marker the runs are deleted at
// once (and the deferred splits could not be read back).
func TestClosedRunsUnsettledNotDeletedIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	const group, flood = "trimheld", 150
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	clk := newFakeClock()
	stuck := new(sinktest.Memory)
	block := make(chan struct{})
	stuck.Block(block)
	r := startTable(t, b.URL, group, tableConfig{idle: boundIdle, now: clk.now, sinks: memSinks(stuck, nil), consumer: trimConsumer,
		edit: func(c *config.Aggregator) { c.MemoryLimitMiB = 2 }})
	r.waitOwns(r.parts)
	r.tbl.SetBrokerClosedRunCost(4 << 10)

	wires := fx.Starts(t, "trimheld-%04d", flood)
	b.Publish(t, wires...)
	waitMoving(t, "acknowledged", func() (uint64, bool) { return acked(b, group) })
	clk.advance(boundIdle + time.Minute)
	waitMoving(t, "every run closed", func() (uint64, bool) {
		n, _ := r.closes.count()
		return uint64(n), n == flood
	})
	_, bytes, capBytes := r.tbl.ClosedKept()
	require.Greater(t, bytes, capBytes, "the closed runs do not pass their share: nothing to test")
	require.Zero(t, r.tbl.TrimClosed(rt.Ctx(t)), "closed runs deleted before the sink settled their splits")
	runs, _, _ := r.tbl.ClosedKept()
	require.Equal(t, int64(flood), runs)

	close(block)
	waitMoving(t, "every split at the sink", func() (uint64, bool) {
		n := len(stuck.Runs())
		return uint64(n), n == flood
	})
	waitMoving(t, "the closed runs kept within their share", func() (uint64, bool) {
		runs, bytes, _ := r.tbl.ClosedKept()
		return uint64(runs), bytes <= capBytes
	})
	require.Positive(t, counter(t, r.m, "gttsplit_runs_expired_early_total"))
	for id, n := range runCounts(stuck.Reports()) {
		require.Equal(t, 1, n, "run %s: splits at the sink", id)
	}
	require.Zero(t, counter(t, r.m, "gttsplit_events_redelivered_total"))
}

// trimConsumer is the trimming tests' consumer: an ack wait the runs'
// writes do not outgrow on a busy machine (the tables' 2 s did under
// -race at load 33-43: 54 events of runs waiting for their writes
// delivered again), since both tests ask that none is.
var trimConsumer = runtable.ConsumerConfig{AckWait: 10 * time.Second}

// runCounts is how many of reps each run has.
func runCounts(reps []split.Report) map[string]int {
	out := map[string]int{}
	for _, r := range reps {
		out[r.Run.ID]++
	}
	return out
}
