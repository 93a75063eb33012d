package runtable_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/config"
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
// consumers' stops, the runs' closes); the ack wait and the pulls'
// expiry outlast every wait.
func TestStopHandsBackWhatItsPullsBringIntegration(t *testing.T) {
	const group, parts = "sigstop", 4
	fx, b, proxy := behindProxyParts(t, parts)
	// Pulls outlive the hold: none is given up meanwhile, so the events
	// come on pulls still listened to.
	t.Cleanup(runtable.SetPulls(time.Minute, time.Minute))
	tc := tableConfig{idle: time.Hour,
		consumer: runtable.ConsumerConfig{AckWait: 5 * time.Minute},
		// The connection is not taken for cut off while the broker's
		// answers are held.
		edit: func(c *config.Aggregator) { c.NATS.PingInterval = time.Hour }}
	a := startTable(t, proxy.URL(), group, tc)
	a.waitOwns(parts)
	runs := runsByPartition(t, fx, parts, 3)

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
