package runtable_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

const (
	// boundBudget is the runs' memory bound of a table startBounded
	// starts: half of its memory_limit_mib 2.
	boundBudget = 1 << 20
	// boundIdle is its idle timeout, on a clock the test moves.
	boundIdle = time.Hour
)

// startBounded starts, on a broker of its own, a table of group whose
// runs' memory bound is boundBudget and idle timeout boundIdle on the
// clock clk, and waits until it holds every partition. It returns the fold
// options, the 4B run's fixture and tc, which starts the table again.
func startBounded(t *testing.T, group string) (opts split.Options, fx rt.Fixture, b *rt.Broker, clk *fakeClock, tc tableConfig, r *table) {
	t.Helper()
	opts = rt.FoldOptions(t)
	fx = rt.Load(t, fixture4B, opts)
	b = rt.StartBroker(t)
	clk = newFakeClock()
	tc = tableConfig{idle: boundIdle, now: clk.now, edit: func(c *config.Aggregator) { c.MemoryLimitMiB = 2 }}
	r = startTable(t, b.URL, group, tc)
	r.waitOwns(r.parts)
	return opts, fx, b, clk, tc, r
}

// A flood of open runs into one partition passes the runs' memory bound
// (half of memory_limit_mib: 1 MiB here): the runs the table holds in
// memory and what every open run costs wherever it is (its summary in the
// run index, its cold entry: 0.4 MiB for this flood, which a bound of the
// runs in memory alone let pass it by half) stay near the bound (sampled
// all along), the runs beyond it are
// shed to the state bucket (the oldest first: three full runs whose start
// came before the flood), the metrics and readiness say so. Then the shed
// runs' other events come: each is read back and closes with the split of
// the fold that was never shed, while runs of the other partitions fold
// and close beside the flood, which stays shed. Last, the idle timeout
// reads every flood run back and closes it incomplete, with the split its
// one event makes; nothing is shed any more and readiness says so. A
// restart in between loads the runs up to the bound, the rest stay in the
// bucket.
func TestFloodShedsRunsToTheBucketIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	const group, flood = "flood", 1000
	opts, fx, b, clk, tc, r := startBounded(t, group)
	var sampled atomic.Pointer[runtable.Table]
	sampled.Store(r.tbl)

	// Runs of partition p (the flood's) and of the others.
	p := bus.PartitionOf("flood-0000", r.parts)
	gen := func(n int, in bool, prefix string) []rt.Run {
		var out []rt.Run
		for i := 0; len(out) < n; i++ {
			id := fmt.Sprintf("%s-%04d", prefix, i)
			if (bus.PartitionOf(id, r.parts) == p) != in {
				continue
			}
			g := rt.Run{Fx: fx, Origin: events.Origin{RunID: id, Host: fx.Origin.Host, Lane: fx.Origin.Lane}}
			for _, d := range fx.Decoded {
				w, err := rt.Rewrite(d, g.Origin)
				require.NoError(t, err)
				g.Wires = append(g.Wires, w)
			}
			out = append(out, g)
		}
		return out
	}
	shed := gen(3, true, "shed")      // started before the flood: shed first
	others := gen(3, false, "others") // other partitions, beside the flood
	var floodWires []events.Wire
	floodRefs := map[string]*runtable.RunState{}
	ref := runtable.NewRuns(opts)
	for i := 0; len(floodWires) < flood; i++ {
		id := fmt.Sprintf("flood-%04d", i)
		if bus.PartitionOf(id, r.parts) != p {
			continue
		}
		w, err := rt.Rewrite(fx.Decoded[0], events.Origin{RunID: id, Host: fx.Origin.Host, Lane: fx.Origin.Lane})
		require.NoError(t, err)
		floodWires = append(floodWires, w)
		d, err := events.DecodeBytes(w.Data)
		require.NoError(t, err)
		ref.Apply(d, clk.now()) // the fold that is never shed
		floodRefs[id] = ref.Get(id)
	}

	// The memory the table counts against the bound (its runs in memory
	// and what every open run costs wherever it is: its summary in the
	// run index, its cold entry), sampled all along.
	stopSampling := samplePeak(t, func() (int64, int64) { return sampled.Load().RunMemoryCharged() })

	for _, g := range shed {
		b.Publish(t, g.Wires[0])
	}
	b.WaitAcked(t, group)
	clk.advance(time.Second) // the flood's runs are younger
	b.Publish(t, floodWires...)
	// Past the bound the flood goes at the pace of its partition's
	// checkpoints: waited for while it moves.
	waitMoving(t, "the flood acknowledged", func() (uint64, bool) { return acked(b, group) })
	rt.Eventually(t, "the runs started before the flood shed", func() bool {
		for _, g := range shed {
			if !r.tbl.IsShed(g.Origin.RunID) {
				return false
			}
		}
		return true
	})
	_, cold := r.tbl.RunMemory()
	require.Positive(t, cold)
	require.Greater(t, counter(t, r.m, "gttsplit_runs_shed_total"), float64(0))
	require.Equal(t, float64(flood+len(shed)), counter(t, r.m, "gttsplit_runs_open"), "shed runs are open")
	rt.Eventually(t, "readiness says the table sheds", func() bool {
		ok, why := r.tbl.Ready()
		return !ok && strings.Contains(why, "shedding")
	})
	rt.Eventually(t, "the shed gauge", func() bool { return counter(t, r.m, "gttsplit_runs_shed") > 0 })

	// Restarted, the table loads the runs up to the bound and keeps the
	// others in the bucket.
	r.stop()
	r = startTable(t, b.URL, group, tc)
	r.waitOwns(r.parts)
	sampled.Store(r.tbl)
	rt.Eventually(t, "every run loaded, those past the bound kept in the bucket", func() bool {
		_, cold := r.tbl.RunMemory()
		return cold > 0 && counter(t, r.m, "gttsplit_runs_open") == float64(flood+len(shed))
	})

	// The shed runs' other events, and runs of other partitions.
	var rest []rt.Run
	for _, g := range shed {
		rest = append(rest, rt.Run{Fx: g.Fx, Origin: g.Origin, Wires: g.Wires[1:]})
	}
	b.Publish(t, rt.Interleave(append(rest, others...))...)
	rt.Eventually(t, "the shed runs and the other partitions' runs closed", func() bool {
		n, _ := r.closes.count()
		return n == len(shed)+len(others)
	})
	for _, g := range append(append([]rt.Run{}, shed...), others...) {
		got := r.closes.of(g.Origin.RunID)
		require.Len(t, got, 1, g.Origin.RunID)
		js, err := split.JSON(got[0])
		require.NoError(t, err)
		require.Equal(t, string(wantFor(t, g)), string(js), g.Origin.RunID)
	}
	_, cold = r.tbl.RunMemory()
	require.Positive(t, cold, "the flood is still shed while the other runs closed")
	b.WaitAcked(t, group)

	// The flood, the restart and the closes beside it stay near the
	// bound (checked below); the flood's close wave is sampled apart.
	flooded, floodedBeside := stopSampling()
	stopSampling = samplePeak(t, func() (int64, int64) { return sampled.Load().RunMemoryCharged() })

	// The idle timeout reads the flood back and closes it.
	clk.advance(boundIdle + time.Minute)
	closedAt := clk.now()
	waitMoving(t, "every flood run closed", func() (uint64, bool) {
		n, _ := r.closes.count()
		return uint64(n), n == len(shed)+len(others)+flood
	})
	b.WaitAcked(t, group)
	for id, st := range floodRefs {
		st.Fold.Finish(split.FinishInfo{Finished: closedAt, Incomplete: true})
		want, err := split.JSON(runtable.Report(st))
		require.NoError(t, err)
		got := r.closes.of(id)
		require.Len(t, got, 1, id)
		js, err := split.JSON(got[0])
		require.NoError(t, err)
		require.Equal(t, string(want), string(js), id)
	}
	rt.Eventually(t, "nothing shed, ready", func() bool {
		ok, why := r.tbl.Ready()
		return counter(t, r.m, "gttsplit_runs_shed") == 0 && (ok || !strings.Contains(why, "shedding"))
	})
	require.Equal(t, float64(0), counter(t, r.m, "gttsplit_runs_open"))

	// The bound: a run's growth by its folds is counted when its
	// checkpoint writes it, and the same checkpoint sheds; each partition
	// may take one new run past the bound before it sees it.
	// The bound is passed by at most: a new run of each partition, and
	// the growth of the runs folding at once (whole 4B runs here).
	full := runtable.NewRuns(opts)
	for _, d := range fx.Decoded {
		full.Apply(d, clk.now())
	}
	enc, err := runtable.MarshalState(full.Get(fx.Origin.RunID))
	require.NoError(t, err)
	slack := int64(r.parts)*runtable.NewRunCost + int64(len(shed)+len(others))*runtable.RunCost(len(enc))
	closing, closingBeside := stopSampling()
	// While the flood closes, each closing run is still held in memory
	// when its closed summary (or, past the closed runs' share of the
	// bound, its stub) reaches the run index: the wave may pass the bound
	// by that share as well, and by the stubs past it (1,000 closed runs'
	// stubs take more than the share of a 1 MiB bound).
	_, closedNow := r.tbl.RunMemoryCharged()
	wave := int64(boundBudget)/runtable.IndexShare + max(0, closedNow-int64(boundBudget)/runtable.IndexShare)
	t.Logf("run memory: flood peak %d KiB (%d KiB of it what the open runs cost beside them) of a %d KiB bound (slack %d KiB); close wave peak %d KiB (%d KiB beside; allowed %d KiB more); %v runs shed, %v events waited for room",
		flooded>>10, floodedBeside>>10, boundBudget>>10, slack>>10, closing>>10, closingBeside>>10, wave>>10, counter(t, r.m, "gttsplit_runs_shed_total"), counter(t, r.m, "gttsplit_run_memory_waits_total"))
	require.LessOrEqual(t, flooded, int64(boundBudget)+slack, "the flood")
	require.LessOrEqual(t, closing, int64(boundBudget)+slack+wave, "the close wave")
}

// samplePeak samples f every millisecond until the returned func is
// called (at the latest when the test ends); that returns the largest
// first value f gave, and the second value f gave with it.
func samplePeak(t testing.TB, f func() (int64, int64)) func() (peak, with int64) {
	var top, aux atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if v, w := f(); v > top.Load() {
				top.Store(v)
				aux.Store(w)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	end := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(end)
	return func() (int64, int64) {
		end()
		return top.Load(), aux.Load()
	}
}

// waitMoving polls cond until it says done; it fails once the progress it
// returns has not moved for rt.WaitFor (a loaded machine is slow, a stuck
// table does not move).
func waitMoving(t testing.TB, what string, cond func() (uint64, bool)) {
	t.Helper()
	last, since := uint64(0), time.Now()
	for {
		v, done := cond()
		if done {
			return
		}
		if v != last {
			last, since = v, time.Now()
		} else if time.Since(since) > rt.WaitFor {
			t.Fatalf("%s: stuck at %d for %s", what, v, rt.WaitFor)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// acked is how many messages group's consumers acknowledged (their
// deliveries less those unacknowledged), and whether that is all.
func acked(b *rt.Broker, group string) (uint64, bool) {
	ci, err := b.ConsumerInfo(group)
	if err != nil {
		return 0, false
	}
	return ci.Delivered.Consumer - uint64(ci.NumAckPending), ci.NumPending == 0 && ci.NumAckPending == 0
}
