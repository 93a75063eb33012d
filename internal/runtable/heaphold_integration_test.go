package runtable_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
)

// While the live heap is past its share of the runtime's memory limit, the
// table holds its pulls and its close passes (what makes the embedded
// broker write and read: its block buffers grow with that, and shedding
// runs frees none of them), says so in readiness and gttsplit_memory_held,
// and loses nothing: once the heap is under its share again the events
// held in the stream fold. A heap that stays past its share (here: for
// good) slows the closes down, it does not stop them: a hold lasts at most
// its bound, then one pass goes ahead, and every run closes, its split
// written once. The heap is stood in for (HoldForHeap); the windows in which
// nothing may move are counted in checkpoints, not timed.
func TestHeapPastItsShareHoldsPullsAndClosesIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	const group, n = "heaphold", 64
	_, fx, b, clk, _, r := startBounded(t, group)
	wires := fx.Starts(t, "heaphold-%03d", n)
	held := func() float64 { return counter(t, r.m, "gttsplit_memory_held") }
	// checkpoints waits until every partition checkpointed about three
	// times more: the window in which what is held must not move.
	checkpoints := func() {
		c0 := counter(t, r.m, "gttsplit_checkpoints_total")
		rt.Eventually(t, "three checkpoints a partition", func() bool {
			return counter(t, r.m, "gttsplit_checkpoints_total") >= c0+float64(3*r.parts)
		})
	}
	readyHeld := func() bool {
		ok, why := r.tbl.Ready()
		return !ok && strings.Contains(why, "catching up") && strings.Contains(why, "heap")
	}

	// Past its share: every partition's close pass, and its pull once the
	// one standing ended, are held.
	r.tbl.HoldForHeap(1<<20, time.Hour)
	rt.Eventually(t, "every pull held", func() bool { pulls, _ := r.tbl.HeldNow(); return pulls == r.parts })
	rt.Eventually(t, "gttsplit_memory_held says so", func() bool { return held() >= float64(r.parts) })
	rt.Eventually(t, "readiness says the table catches up", readyHeld)
	b.Publish(t, wires...)
	checkpoints()
	ci, err := b.ConsumerInfo(group)
	require.NoError(t, err)
	require.Zero(t, ci.Delivered.Stream, "events pulled while the heap is past its share")
	require.Equal(t, uint64(n), ci.NumPending, "the flood waits in the stream")

	// Under its share again: the flood folds.
	r.tbl.HoldForHeap(0, 0)
	b.WaitAcked(t, group)
	rt.Eventually(t, "nothing held", func() bool { return held() == 0 })
	rt.Eventually(t, "ready again", func() bool { ok, _ := r.tbl.Ready(); return ok })
	require.Equal(t, float64(n), counter(t, r.m, "gttsplit_runs_open"))

	// Past it again, the runs' idle timeout passes: no run closes.
	r.tbl.HoldForHeap(1<<20, time.Hour)
	checkpoints()
	clk.advance(boundIdle + time.Minute)
	checkpoints()
	got, _ := r.closes.count()
	require.Zero(t, got, "runs closed while the heap is past its share")
	_, passes := r.tbl.HeldNow()
	require.Equal(t, r.parts, passes, "every partition's close pass held")
	require.Equal(t, float64(n), counter(t, r.m, "gttsplit_runs_open"))

	// The heap stays past its share, a hold lasts a quarter second: every
	// run closes all the same (read back from the bucket when shed), its
	// split once.
	r.tbl.HoldForHeap(1<<20, 250*time.Millisecond)
	waitMoving(t, "every run closed", func() (uint64, bool) {
		got, _ := r.closes.count()
		return uint64(got), got == n
	})
	for i := range n {
		require.Len(t, r.closes.of(fmt.Sprintf("heaphold-%03d", i)), 1, "a split written once")
	}
	require.Zero(t, counter(t, r.m, "gttsplit_runs_open"))
	r.tbl.HoldForHeap(0, 0)
	b.WaitAcked(t, group)
	rt.Eventually(t, "ready once under its share", func() bool { ok, _ := r.tbl.Ready(); return ok })
}
