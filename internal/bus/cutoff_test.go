package bus_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
)

// TestCutOffNoticedIntegration is the cut-off collector as found: its
// link to the broker cut (a proxy that stops forwarding without closing
// anything, as a network partition does), it went on as if connected for
// minutes (the client's pings came every 2 minutes), holding its
// publishes in memory until their acks timed out, then trying to drain
// its spool into the silence. Now the broker's silence is noticed within
// nats.ping_interval × 3 (CutOffAfter): the connection is dropped with a
// WARN that says why, every event published since is spooled, and once
// the link is back every event is delivered, once, in order. The bound
// the test waits is three times what the behaviour needs (the machine is
// loaded), far below the minutes of before.
func TestCutOffNoticedIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	s := natstest.Start(t)
	js := jsFor(t, s)
	proxy := natstest.StartProxy(t, s.Addr().String())
	cfg := pubConfig(t)
	cfg.NATS.URL = proxy.URL()
	cfg.NATS.PingInterval = time.Second
	var logs syncBuf
	log := zerolog.New(&logs)
	nc, err := bus.Connect(testCtx(t), cfg.NATS, bus.DialOptions{ReconnectWait: 100 * time.Millisecond}, log)
	require.NoError(t, err)
	p, err := bus.NewPublisher(nc, cfg, log)
	require.NoError(t, err)
	defer p.Close(context.Background())

	evs := runEvents(t, "cut-off", 400)
	a := newAcks()
	var sent atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { // a child's output: an event every 10 ms
		defer close(done)
		for _, ev := range evs {
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			if p.Publish(ctx, ev, a.cb(ev.ID())) != nil {
				return
			}
			sent.Add(1)
		}
	}()
	waitMsgs(t, js, 20)

	proxy.Freeze()
	cut := time.Now()
	atCut := sent.Load()
	needs := cfg.NATS.CutOffAfter() + cfg.NATS.PingInterval // the cut falls between two pings
	require.Eventually(t, func() bool { return !p.Connected() }, 3*needs, 10*time.Millisecond,
		"the cut is noticed within %s (×3 for the load)", needs)
	t.Logf("cut off noticed after %s (needs at most %s)", time.Since(cut).Round(time.Millisecond), needs)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "the broker answered no ping") }, needs, 10*time.Millisecond)
	// What the child writes meanwhile goes to the spool, acknowledged
	// there: nothing waits in memory for a broker that is not there.
	// Nor is the child held up: its events keep their pace (a reconnect
	// attempt holds the connection's lock while it waits for the silent
	// broker, and the publisher does not wait for it).
	noticed, before := sent.Load(), p.Stats().Spooled
	require.Eventually(t, func() bool { return sent.Load() >= noticed+100 && p.Stats().Spooled >= before+100 }, 3*needs, 10*time.Millisecond,
		"sent %d at the cut, %d when it was noticed, %d now; %+v", atCut, noticed, sent.Load(), p.Stats())
	require.Contains(t, logs.String(), "spooling events")

	proxy.Thaw()
	<-func() chan struct{} { stop(); return done }()
	n := int(sent.Load())
	requireDrainedOnce(t, p, js, evs[:n], a)
	require.False(t, strings.Contains(logs.String(), `"level":"error"`), logs.String())
}
