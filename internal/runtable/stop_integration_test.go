package runtable_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
)

// An aggregator stopped (as SIGTERM stops it) while the broker's answers
// to its partitions' pulls are on their way: what those pulls bring after
// the stop goes back to the stream as it comes, and the next owner folds
// it at once, not an ack wait (five minutes here) later.
//
// The first table folds every run's events but its last; then what the
// broker sends it is held (its bytes to the broker still get through)
// while the runs' last events are published and delivered to the pulls
// standing on every partition; the table is stopped, and the hold ends
// once each partition's consumer stopped handling messages. The events
// reach the table after its consumers stopped: before, the stop dropped
// its pulls' subscriptions at once, so the events were delivered and
// never handed back (the broker would send them again only once their ack
// wait ran out), and this test failed waiting for the runs to close. A
// second table then takes every partition: every run is closed, and
// written once. Every wait is on an event (the broker's deliveries, the
// consumers' stops, the runs' closes); the ack wait, the pins (keepPins)
// and the pulls' expiry outlast every wait.
func TestStopHandsBackWhatItsPullsBringIntegration(t *testing.T) {
	const group, parts = "sigstop", 4
	fx, b, proxy, tc, a := patientBehindProxy(t, group, parts)
	runs := runsByPartition(t, fx, parts, 3)
	keepPins(t, b, group, parts)

	var mu sync.Mutex
	stopped := map[int]bool{}
	allStopped := make(chan struct{})
	t.Cleanup(runtable.OnConsumerStopped(func(p int) {
		mu.Lock()
		defer mu.Unlock()
		if stopped[p] {
			return
		}
		if stopped[p] = true; len(stopped) == parts {
			close(allStopped)
		}
	}))
	info := func() string {
		return fmt.Sprint(byPartition(b, group, parts, func(ci *jetstream.ConsumerInfo) string {
			return fmt.Sprintf("%d pending/%d unacknowledged/%d pulls", ci.NumPending, ci.NumAckPending, ci.NumWaiting)
		}))
	}

	events := 0
	for _, g := range runs {
		b.Publish(t, g.Wires[:len(g.Wires)-1]...)
		events += len(g.Wires) - 1
	}
	rt.Eventually(t, "every run's events but its last folded", func() bool {
		return counter(t, a.m, "gttsplit_events_folded_total")-counter(t, a.m, "gttsplit_events_redelivered_total") >= float64(events)
	})
	waitPullStanding(t, b, group, parts)
	mu.Lock()
	require.Empty(t, stopped, "a consumer stopped before the stop")
	mu.Unlock()

	proxy.HoldServer()
	held := true
	t.Cleanup(func() {
		if held {
			proxy.ReleaseServer()
		}
	})
	for _, g := range runs {
		b.Publish(t, g.Wires[len(g.Wires)-1])
	}
	rt.Eventually(t, "the runs' last events delivered to the table's pulls", func() bool {
		left := byPartition(b, group, parts, func(ci *jetstream.ConsumerInfo) uint64 { return ci.NumPending })
		if left == nil {
			return false
		}
		for _, n := range left {
			if n > 0 {
				return false
			}
		}
		return true
	})
	stopDone := make(chan struct{})
	go func() {
		defer close(stopDone)
		a.stop()
	}()
	select {
	case <-allStopped:
	case <-time.After(2 * rt.WaitFor):
		t.Fatalf("the stop did not stop every partition's consumer: %s", info())
	}
	proxy.ReleaseServer()
	held = false
	select {
	case <-stopDone:
	case <-time.After(2 * rt.WaitFor):
		t.Fatalf("the stop did not end: %s", info())
	}

	// The next owner: it folds the last events at once (the bound is far
	// below the ack wait, which would bring them back otherwise, and far
	// above what a loaded machine takes).
	c := startTable(t, b.URL, group, tc)
	deadline := time.Now().Add(2 * rt.WaitFor)
	for {
		_, r1 := a.closes.count()
		_, r2 := c.closes.count()
		if r1+r2 >= len(runs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d runs closed: the events the stopped table's pulls brought were not handed back (%s)", r1+r2, len(runs), info())
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.WaitAcked(t, group)
	for _, g := range runs {
		require.Len(t, append(a.closes.of(g.Origin.RunID), c.closes.of(g.Origin.RunID)...), 1, "run %s written once", g.Origin.RunID)
	}
	_, r1 := a.closes.count()
	_, r2 := c.closes.count()
	t.Logf("%d runs closed: %d by the stopped table, %d by the next; the next table counted %.0f events redelivered (handed back by the stop)",
		len(runs), r1, r2, counter(t, c.m, "gttsplit_events_redelivered_total"))
}

// A quiet partition handed over: its pull, which brought nothing yet, is
// cut at once, and what the broker still sends on it (events published
// right then, before the hand-over's unpin reached the broker) is handed
// back as it comes, not dropped with the pull: the next owner folds them
// at once, not an ack wait (five minutes here) later.
//
// The first table owns every partition, their first pulls standing (a
// minute each: quiet, so a hand-over cuts them). A second table starts:
// the first gives two partitions back. Once the first of them stopped
// its consumer (its pull cut), the connection between the first table
// and the broker is frozen both ways (the hand-over's unpin and lease
// purge wait in it) while a run of that partition is published and the
// broker delivers its events to the cut pull; then it thaws. Every wait
// is on an event (the consumer's stop, the broker's delivery, the run's
// close); the ack wait and the pulls' expiry outlast them.
func TestHandOverCutPullHandsBackWhatItBringsIntegration(t *testing.T) {
	const group, parts = "cutpull", 4
	fx, b, proxy, tc, a := patientBehindProxy(t, group, parts)
	runs := runsByPartition(t, fx, parts, 1)
	waitPullStanding(t, b, group, parts)

	cut := make(chan int, 1)
	t.Cleanup(runtable.OnConsumerStopped(func(p int) {
		select {
		case cut <- p:
		default:
		}
	}))
	frozen := false
	t.Cleanup(func() {
		if frozen {
			proxy.Thaw()
		}
	})
	c := startTable(t, b.URL, group, tc)
	var p int
	select {
	case p = <-cut:
	case <-time.After(2 * rt.WaitFor):
		t.Fatal("the first table handed no partition over")
	}
	proxy.Freeze()
	frozen = true
	g := runs[p] // runsByPartition: one run a partition, in order
	b.Publish(t, g.Wires...)
	info := func() string {
		return fmt.Sprint(byPartition(b, group, parts, func(ci *jetstream.ConsumerInfo) string {
			return fmt.Sprintf("%d pending/%d unacknowledged/%d pulls", ci.NumPending, ci.NumAckPending, ci.NumWaiting)
		}))
	}
	delivered := false
	rt.Eventually(t, "the run's events delivered to the cut pull, or the pull gone", func() bool {
		infos := partitionInfos(b, group, parts)
		if infos == nil {
			return false
		}
		delivered = infos[p].NumAckPending > 0
		return infos[p].NumPending == 0 || infos[p].NumWaiting == 0
	})
	proxy.Thaw()
	frozen = false
	if !delivered {
		t.Logf("partition %d: the cut pull was gone before the run was published (%s): nothing on its way", p, info())
	}

	deadline := time.Now().Add(2 * rt.WaitFor)
	for {
		_, r1 := a.closes.count()
		_, r2 := c.closes.count()
		if r1+r2 >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition %d's run not closed: what the cut pull brought was not handed back (%s)", p, info())
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.WaitAcked(t, group)
	require.Len(t, append(a.closes.of(g.Origin.RunID), c.closes.of(g.Origin.RunID)...), 1, "written once")
	t.Logf("partition %d handed over; its run's %d events delivered to the cut pull: %v; the next table counted %.0f redelivered",
		p, len(g.Wires), delivered, counter(t, c.m, "gttsplit_events_redelivered_total"))
}

// patientBehindProxy starts a broker of parts partitions, a proxy in
// front of it, and a table behind the proxy that owns every partition,
// with what both stop tests need: pulls that outlive every hold (none is
// given up meanwhile, so the events come on pulls still listened to), an
// ack wait of 5 minutes (an event not handed back stalls its run), and a
// connection not taken for cut off while the broker's answers are held.
// It returns tc for the table that takes over.
func patientBehindProxy(t *testing.T, group string, parts int) (rt.Fixture, *rt.Broker, *natstest.Proxy, tableConfig, *table) {
	t.Helper()
	fx, b, proxy := behindProxyParts(t, parts)
	t.Cleanup(runtable.SetPulls(time.Minute, time.Minute))
	tc := tableConfig{idle: time.Hour,
		consumer: runtable.ConsumerConfig{AckWait: 5 * time.Minute},
		edit:     func(c *config.Aggregator) { c.NATS.PingInterval = time.Hour }}
	a := startTable(t, proxy.URL(), group, tc)
	a.waitOwns(parts)
	return fx, b, proxy, tc, a
}

// keepPins sets the pin of group's consumer of each partition to outlast
// the test (the table sets pinnedTTL, 5 s): a pull standing longer than
// the pin (a loaded machine: the table's last pull before the server's
// bytes are held may be older) would meet the events published during
// the hold with a 423 the client never sees, and no pull would take them.
// The table's first pulls after it are answered with the pin's 423 and
// pull again unpinned: pinned then with this time to live.
func keepPins(t *testing.T, b *rt.Broker, group string, parts int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rt.WaitFor)
	defer cancel()
	st, err := b.JS.Stream(ctx, bus.DefaultStream)
	require.NoError(t, err)
	for p := range parts {
		c, err := st.Consumer(ctx, bus.ConsumerName(group, p))
		require.NoError(t, err)
		cfg := c.CachedInfo().Config
		cfg.PinnedTTL = 10 * time.Minute
		_, err = b.JS.UpdateConsumer(ctx, bus.DefaultStream, cfg)
		require.NoError(t, err)
	}
}

// waitPullStanding waits until a pull of the group's consumer stands at
// the broker on each of parts partitions.
func waitPullStanding(t *testing.T, b *rt.Broker, group string, parts int) {
	t.Helper()
	rt.Eventually(t, "a pull standing on every partition", func() bool {
		w := byPartition(b, group, parts, func(ci *jetstream.ConsumerInfo) int { return ci.NumWaiting })
		if w == nil {
			return false
		}
		for _, n := range w {
			if n == 0 {
				return false
			}
		}
		return true
	})
}
