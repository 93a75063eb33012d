package aggregator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// TestServiceResendsUnsettledSplitsIntegration: a split the sinks did not
// settle before the aggregator stopped is re-sent by the next one, and the
// state stops asking once every sink settled it.
func TestServiceResendsUnsettledSplitsIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	const durable = "resend"

	// A sink that never answers in time: the split stays unsettled.
	stuck := new(sinktest.Memory)
	block := make(chan struct{})
	stuck.Block(block)
	deliv := newDeliveries(1)
	fan1, err := sinks.NewFanout(sinks.Settings{Logger: testLogger(t)}, sinks.FanoutConfig{Observer: deliv},
		sinks.Target{Name: "mem", Sink: stuck})
	require.NoError(t, err)
	a := startService(t, b.url, durable, ServiceConfig{IdleTimeout: time.Hour, Sinks: fan1, Deliveries: deliv})
	b.publish(t, fx.wires...)
	eventually(t, "the split is written", func() bool { n, _ := a.closes.count(); return n >= 1 })
	a.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_ = fan1.Close(ctx) // gives up: the sink is blocked
	cancel()
	close(block)
	st := b.state(t, fx.origin.RunID)
	require.True(t, st.Closed)
	require.True(t, st.SinksPending, "no sink settled the split")

	// The next aggregator re-sends it, and clears the flag once delivered.
	mem := new(sinktest.Memory)
	deliv2 := newDeliveries(1)
	fan2, err := sinks.NewFanout(sinks.Settings{Logger: testLogger(t)}, sinks.FanoutConfig{Observer: deliv2},
		sinks.Target{Name: "mem", Sink: mem})
	require.NoError(t, err)
	c := startService(t, b.url, durable, ServiceConfig{IdleTimeout: time.Hour, Sinks: fan2, Deliveries: deliv2})
	eventually(t, "the split re-sent", func() bool { _, ok := mem.Runs()[fx.origin.RunID]; return ok })
	eventually(t, "the flag cleared", func() bool {
		c.svc.Flush(context.Background())
		return !b.state(t, fx.origin.RunID).SinksPending
	})
	c.stop()
	require.NoError(t, fan2.Close(context.Background()))
	got, err := split.JSON(mem.Runs()[fx.origin.RunID])
	require.NoError(t, err)
	require.Equal(t, string(fx.want), string(got), "the re-sent split is the written one")
}

func TestDeliveriesSettleWhenEverySinkDid(t *testing.T) {
	t.Parallel()
	d := newDeliveries(2)
	d.queued("r")
	d.Observe(sinks.Event{Sink: "file", RunID: "r", Outcome: sinks.OutcomeDelivered})
	require.Empty(t, d.take(), "one of two sinks")
	d.Observe(sinks.Event{Sink: "json", RunID: "r", Outcome: sinks.OutcomeRetrying, Err: errors.New("x")})
	require.Empty(t, d.take(), "a retry settles nothing")
	d.Observe(sinks.Event{Sink: "json", RunID: "r", Outcome: sinks.OutcomeFailed, Err: errors.New("x")})
	require.Equal(t, []string{"r"}, d.take(), "delivered or failed for good: settled")
	require.Empty(t, d.take())
}
