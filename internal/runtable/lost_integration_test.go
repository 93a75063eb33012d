package runtable_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
)

// A partition whose lease is lost while the broker's answer to its pull is
// on its way: the event that answer brings goes back to the stream as it
// comes, and the partition's next owner (here the same member, which takes
// the partition again) folds it, not an ack wait (10 minutes here) later.
//
// What the broker sends the table is held (its bytes to the broker still
// get through) while an event of one partition is delivered to the pull
// standing there, until the table's leases, whose renewals are not
// answered, are lost (in doubt for a time to live) and the consumer of
// that partition stopped handling messages; then it is let through. The
// event reaches the table after its consumer stopped: before, the
// consumer had dropped its pulls' subscriptions at the stop, so the event
// was delivered and never handed back (the broker sent it again only once
// its ack wait ran out), and this test failed waiting for it to be
// acknowledged. Every wait is on an event: the broker's delivery, the
// consumer's stop, the acknowledgement.
func TestLeaseLostHandsBackWhatItsPullBringsIntegration(t *testing.T) {
	fx, b, proxy := behindProxy(t)
	// Pulls outlive the hold: they are not given up meanwhile, so the
	// event comes on a pull still listened to.
	t.Cleanup(runtable.SetPulls(time.Minute, time.Minute))
	const group = "loststop"
	a := startTable(t, proxy.URL(), group, tableConfig{idle: time.Hour,
		consumer: runtable.ConsumerConfig{AckWait: 10 * time.Minute},
		// The connection is not taken for cut off while the broker's
		// answers are held.
		edit: func(c *config.Aggregator) { c.NATS.PingInterval = time.Hour }}, crashLease)
	a.waitOwns(a.parts)
	p := bus.PartitionOf(fx.Origin.RunID, a.parts)
	stopped := make(chan struct{}, 1)
	t.Cleanup(runtable.OnConsumerStopped(func(q int) {
		if q == p {
			select {
			case stopped <- struct{}{}:
			default:
			}
		}
	}))
	info := func() string {
		infos := partitionInfos(b, group, a.parts)
		if infos == nil {
			return "no answer"
		}
		ci := infos[p]
		return fmt.Sprintf("%d pending, %d delivered and unacknowledged, %d waiting pulls", ci.NumPending, ci.NumAckPending, ci.NumWaiting)
	}
	rt.Eventually(t, "a pull standing on the run's partition", func() bool {
		infos := partitionInfos(b, group, a.parts)
		return infos != nil && infos[p].NumWaiting > 0
	})

	select {
	case <-stopped: // (a lease lost on a loaded machine before)
	default:
	}
	last := len(fx.Wires) - 1
	b.Publish(t, fx.Wires[:last]...)
	rt.Eventually(t, "the run's events but its last folded", func() bool {
		return counter(t, a.m, "gttsplit_events_folded_total") >= float64(last)
	})
	proxy.HoldServer()
	held := true
	t.Cleanup(func() {
		if held {
			proxy.ReleaseServer()
		}
	})
	b.Publish(t, fx.Wires[last])
	rt.Eventually(t, "the run's last event delivered to the table's pull", func() bool {
		infos := partitionInfos(b, group, a.parts)
		return infos != nil && infos[p].NumPending == 0 && infos[p].NumAckPending > 0
	})
	// Its renewals unanswered, the lease is lost a time to live after its
	// validity ran out; the consumer stops then.
	select {
	case <-stopped:
	case <-time.After(rt.WaitFor + 2*crashLease):
		t.Fatalf("the consumer of partition %d did not stop (its lease not lost?): %s", p, info())
	}
	proxy.ReleaseServer()
	held = false

	// The member takes the partition again once the lost lease's key
	// expired; the last event is folded there: the run is closed and
	// every event acknowledged. (The bound is far below the ack wait,
	// which would bring the event back otherwise, and far above what a
	// loaded machine takes.)
	deadline := time.Now().Add(2 * rt.WaitFor)
	for {
		if _, runs := a.closes.count(); runs == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's last event was not handed back and folded (the run is not closed): partition %d: %s", p, info())
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.WaitAcked(t, group)
	splits, _ := a.closes.count()
	require.Equal(t, 1, splits, "reported once")
	st := b.State(t, fx.Origin.RunID, rt.FoldOptions(t))
	require.True(t, st.Closed)
}
