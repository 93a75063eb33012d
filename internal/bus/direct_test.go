package bus_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/stretchr/testify/require"
)

// TestDirectPathOrderAcrossRestartIntegration has three goroutines publish
// a run each while the broker is shut down under them and, once they all
// wait, started again on the same port and store while they go on: Publish
// sends directly before the outage, spools during it and while the spool
// drains (events handed over may still wait when the publisher goes
// direct again), and sends directly once it is drained. The stream holds
// every event exactly once, each run's events in the order its goroutine
// published them, every ack fires once, and nothing is dropped.
func TestDirectPathOrderAcrossRestartIntegration(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	s := natstest.StartAt(t, dir, 0)
	jsFor(t, s)
	cfg := pubConfig(t)
	cfg.NATS.MaxInFlight = 64
	p, err := bus.NewPublisher(connect(t, s.ClientURL()), cfg, testLogger(t))
	require.NoError(t, err)
	defer p.Close(testCtx(t))

	const writers = 3
	runs := make([][]event.Event, writers)
	var all []event.Event
	for g := range runs {
		runs[g] = runEvents(t, fmt.Sprintf("run-direct-%d", g), 400)
		all = append(all, runs[g]...)
	}
	a := newAcks()
	var atGate, done sync.WaitGroup
	up := make(chan struct{})
	errs := make(chan error, writers)
	for g := range runs {
		atGate.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			evs := runs[g]
			cut := 2 * len(evs) / 3
			for i, ev := range evs {
				if i == cut {
					atGate.Done()
					<-up
				}
				if err := p.Publish(testCtx(t), ev, a.cb(ev.ID())); err != nil {
					errs <- err
					if i < cut {
						atGate.Done()
					}
					return
				}
			}
		}()
	}

	// Shut the broker down mid-stream, once the direct path carried some.
	require.Eventually(t, func() bool { return bus.DirectSent(p) >= 100 }, 20*time.Second, time.Millisecond)
	port := natstest.Port(s)
	natstest.Shutdown(s)
	atGate.Wait()
	require.NoError(t, p.Flush(testCtx(t)))
	require.NotZero(t, p.Stats().Spooled, "events published while the broker was down go to the spool")

	s2 := natstest.StartAt(t, dir, port)
	close(up)
	js := jsFor(t, s2)
	done.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return p.Stats().SpoolBytes == 0 }, 20*time.Second, 10*time.Millisecond)
	before := bus.DirectSent(p)
	last := runEvents(t, "run-direct-after", 20)
	publishAll(t, p, last, a)
	runs = append(runs, last)
	all = append(all, last...)
	require.NoError(t, p.Flush(testCtx(t)))
	require.Greater(t, bus.DirectSent(p), before, "back to the direct path once the spool is drained")

	waitMsgs(t, js, uint64(len(all)))
	require.NoError(t, p.Close(testCtx(t)))
	got := exportAll(t, js, bus.Range{})
	require.ElementsMatch(t, ids(all), got.ids, "every event exactly once")
	require.Equal(t, got.ids, got.msgIDs, "Nats-Msg-Id is the event id")
	for _, evs := range runs {
		run := got.decoded[slices.Index(got.ids, evs[0].ID())].Origin.RunID
		var order []string
		for i, d := range got.decoded {
			if d.Origin.RunID == run {
				order = append(order, got.ids[i])
			}
		}
		require.Equal(t, ids(evs), order, "%s: stream order is publish order", run)
	}
	for _, ev := range all {
		require.Equal(t, 1, a.count(ev.ID()), "ack of %s", ev.ID())
	}
	st := p.Stats()
	require.Zero(t, st.Dropped)
	require.Equal(t, uint64(len(all)), st.Published+st.Spooled)
	require.Equal(t, st.Spooled, st.Drained)
	require.Zero(t, p.Leftover().Events)
}

// TestDirectPublishWaitsForRoomIntegration: with max_in_flight 1 and a
// broker that never answers (a plain subscriber takes the events, no
// stream), a second Publish waits for room and gives up with its ctx; once
// the first event's ack times out it goes to the spool, and so does the
// next; when the stream appears both are delivered, once and in order.
func TestDirectPublishWaitsForRoomIntegration(t *testing.T) {
	skipShort(t)
	s := natstest.Start(t)
	silent := natstest.Connect(t, s.ClientURL())
	sub, err := silent.SubscribeSync("gttsplit.>")
	require.NoError(t, err)
	require.NoError(t, silent.Flush())

	cfg := pubConfig(t)
	cfg.NATS.MaxInFlight = 1
	cfg.NATS.AckTimeout = time.Second
	p, err := bus.NewPublisher(connect(t, s.ClientURL()), cfg, testLogger(t))
	require.NoError(t, err)
	defer p.Close(testCtx(t))
	evs := runEvents(t, "run-room", 1)
	a := newAcks()

	require.NoError(t, p.Publish(testCtx(t), evs[0], a.cb(evs[0].ID())))
	require.Equal(t, uint64(1), bus.DirectSent(p))
	ctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, p.Publish(ctx, evs[1], a.cb(evs[1].ID())), context.DeadlineExceeded,
		"no room: the Publish waits and gives up with its ctx")
	require.Eventually(t, func() bool { return p.Stats().Spooled == 1 }, 10*time.Second, 5*time.Millisecond,
		"the unanswered event goes to the spool when its ack times out")
	publishAll(t, p, evs[1:], a)
	require.NoError(t, p.Flush(testCtx(t)))
	require.Equal(t, uint64(1), bus.DirectSent(p), "nothing is sent directly while the spool is not empty")
	require.Equal(t, uint64(len(evs)), p.Stats().Spooled)

	require.NoError(t, sub.Unsubscribe())
	js := jsFor(t, s)
	requireDrainedOnce(t, p, js, evs, a)
	st := p.Stats()
	require.Zero(t, st.Dropped)
	require.Zero(t, st.Published)
	require.Equal(t, st.Spooled, st.Drained)
}
