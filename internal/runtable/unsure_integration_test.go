package runtable_test

import (
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// A close whose write timed out after the broker had stored it: the
// idle run's closed state went in and its open key was purged, but the
// purge's answer came after the write's timeout, so the table takes the
// close for failed and keeps the run, to close it again. Past the runs'
// memory bound the next checkpoint sheds runs to the state bucket, this
// one the first (its last event is the oldest). Before, it was shed: read
// back, its open key was gone, it was taken for closed and dropped, its
// split never written (likely how a flood of 100,000 closed runs on a
// stalled broker lost one). Now a run whose close failed stays in memory until a
// close goes through: its split comes, once.
func TestFailedCloseNotShedIntegration(t *testing.T) {
	fx, b, proxy := behindProxy(t)
	const group, held = "unsure", 80
	clk := newFakeClock()
	var logs logBuf
	log := zerolog.New(io.MultiWriter(&logs, zerolog.NewTestWriter(t))).Level(zerolog.DebugLevel)
	r := startTableLog(t, proxy.URL(), group, tableConfig{idle: boundIdle, now: clk.now,
		edit: func(c *config.Aggregator) {
			c.MemoryLimitMiB = 2
			c.NATS.PingInterval = time.Hour // the held answers replace no connection
		}}, log)
	r.waitOwns(r.parts)

	const victim = "unsure-victim"
	first := func(id string) events.Wire {
		w, err := rt.Rewrite(fx.Decoded[0], events.Origin{RunID: id, Host: fx.Origin.Host, Lane: fx.Origin.Lane})
		require.NoError(t, err)
		return w
	}

	// The victim's start; then runs that finished with an event missing
	// (they wait for it or their idle timeout, in memory: a finished run
	// is never shed) hold the table past its runs' memory bound, so that
	// every checkpoint sheds what it can: the victim is shed.
	b.Publish(t, first(victim))
	b.WaitAcked(t, group)
	clk.advance(time.Minute)
	var ws []events.Wire
	for i := range held {
		id := fmt.Sprintf("unsure-held-%03d", i)
		for j, d := range fx.Decoded {
			if j == 1 {
				continue
			}
			w, err := rt.Rewrite(d, events.Origin{RunID: id, Host: fx.Origin.Host, Lane: fx.Origin.Lane})
			require.NoError(t, err)
			ws = append(ws, w)
		}
	}
	b.Publish(t, ws...)
	waitMoving(t, "the finished runs acknowledged", func() (uint64, bool) { return acked(b, group) })
	rt.Eventually(t, "the victim shed", func() bool { return r.tbl.IsShed(victim) })
	used, _ := r.tbl.RunMemory()
	require.Greater(t, used, int64(boundBudget), "the finished runs hold the table past its bound")

	// Its idle timeout passes (not the others'): it is read back and
	// closed; the answer to its close's last write (the purge of its open
	// key) is held past the write's timeout: stored, taken for failed.
	var armed, inHook atomic.Bool
	armed.Store(true)
	t.Cleanup(runtable.OnCommitted(func(key string) {
		if key == runtable.SummaryKey(victim) && armed.CompareAndSwap(true, false) {
			proxy.HoldServer()
			inHook.Store(true)
		}
	}))
	t.Cleanup(proxy.ReleaseServer)
	clk.advance(boundIdle - 30*time.Second)
	rt.Eventually(t, "the victim's close under way", inHook.Load)
	rt.Eventually(t, "the victim's close failed", func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "closed state not written") && strings.Contains(l, victim) {
				return true
			}
		}
		return false
	})
	proxy.ReleaseServer()
	require.Empty(t, r.closes.of(victim), "a close that failed delivered the split")

	// The next checkpoints shed what they can (the table is still past
	// its bound); the victim's close is made again.
	rt.Eventually(t, "the victim's split", func() bool { return len(r.closes.of(victim)) > 0 })
	require.Len(t, r.closes.of(victim), 1, "the victim's split, once")
	require.Equal(t, float64(held), counter(t, r.m, "gttsplit_runs_open"), "the finished runs open, the victim closed")
}
