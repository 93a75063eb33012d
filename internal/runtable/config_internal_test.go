package runtable

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
)

// A zero consumer key given to the table means its documented default,
// the one the key has (not another fallback of the table's own).
func TestZeroConsumerConfigIsTheDefaults(t *testing.T) {
	t.Parallel()
	require.Equal(t, DefaultConsumerConfig(), ConsumerConfig{}.withDefaults())
	set := ConsumerConfig{AckWait: 1, MaxAckPending: 2, CheckpointInterval: 3, Lanes: "a"}
	require.Equal(t, set, set.withDefaults(), "set values stay")
}

// Deliveries counts the sinks the fanout writes to: a split is settled
// once every one of them settled it.
func TestDeliveriesCountTheFanoutsSinks(t *testing.T) {
	t.Parallel()
	d := NewDeliveries()
	fan, err := sinks.NewFanout(sinks.Settings{}, sinks.FanoutConfig{Observer: d},
		sinks.Target{Name: "a", Sink: new(sinktest.Memory)}, sinks.Target{Name: "b", Sink: new(sinktest.Memory)})
	require.NoError(t, err)
	defer func() { require.NoError(t, fan.Close(context.Background())) }()
	require.Equal(t, []string{"a", "b"}, fan.Targets())
	d.track(fan, 4)
	const run = "r1"
	p := partitionOf(run, 4)
	d.queued(run)
	d.Observe(sinks.Event{Sink: "a", RunID: run, Outcome: sinks.OutcomeDelivered})
	require.True(t, d.pending(p), "one of two sinks settled it")
	require.Empty(t, d.take(p))
	d.Observe(sinks.Event{Sink: "b", RunID: run, Outcome: sinks.OutcomeFailed})
	require.False(t, d.pending(p))
	require.Equal(t, []string{run}, d.take(p), "both sinks settled it")

	none := NewDeliveries()
	none.track(nil, 4)
	require.Zero(t, none.sinks, "no fanout: no sink")
}
