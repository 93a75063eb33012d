package runtable_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
)

// A backlog's interleaved runs are each written when their messages need
// it, not at every checkpoint: with an ack wait of minutes, runs whose
// events come one round at a time, each round folded and followed by
// checkpoints, are written once each, closed (every changed run was
// written again at every checkpoint: once a round, 27 times a 4B run).
func TestChangedRunsWrittenWhenTheirMessagesNeedItIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	a := startTable(t, b.URL, "held", tableConfig{idle: time.Hour,
		consumer: runtable.ConsumerConfig{AckWait: 5 * time.Minute, CheckpointInterval: 200 * time.Millisecond}})
	a.waitOwns(a.parts)
	const n = 6
	runs := rt.Gen(t, n, fx)
	folded := 0
	for i := range runs[0].Wires {
		for _, r := range runs {
			b.Publish(t, r.Wires[i])
		}
		folded += n
		rt.Eventually(t, "the round folded", func() bool {
			return counter(t, a.m, "gttsplit_events_folded_total") >= float64(folded)
		})
		// Two checkpoints began after the round was folded: the old
		// code wrote every run the round changed.
		c0 := counter(t, a.m, "gttsplit_checkpoints_total")
		rt.Eventually(t, "two checkpoints", func() bool {
			return counter(t, a.m, "gttsplit_checkpoints_total") >= c0+2
		})
	}
	rt.Eventually(t, "every run closed", func() bool { _, c := a.closes.count(); return c == n })
	b.WaitAcked(t, "held")
	for _, r := range runs {
		st := b.State(t, r.Origin.RunID, rt.FoldOptions(t))
		require.True(t, st.Closed, r.Origin.RunID)
	}
	writes := counter(t, a.m, "gttsplit_state_writes_total")
	t.Logf("%d runs of %d events: %.0f run states written", n, len(runs[0].Wires), writes)
	require.LessOrEqual(t, writes, float64(2*n), "run states written a run")
}

// A changed run whose messages wait is written once their progress was
// acknowledged twice (and before a third): a run that never completes is
// written, and its messages acknowledged, none delivered twice.
func TestHeldRunWrittenWithinTheAckWaitIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	a := startTable(t, b.URL, "heldopen", tableConfig{idle: time.Hour,
		consumer: runtable.ConsumerConfig{AckWait: 6 * time.Second, CheckpointInterval: 200 * time.Millisecond}})
	a.waitOwns(a.parts)
	b.Publish(t, fx.Wires[:len(fx.Wires)/2]...)
	b.WaitAcked(t, "heldopen")
	require.Positive(t, counter(t, a.m, "gttsplit_state_writes_total"), "the open run written")
	require.Zero(t, counter(t, a.m, "gttsplit_events_redelivered_total"), "no event delivered twice")
	n, _ := a.closes.count()
	require.Zero(t, n, "the run is open")
}
