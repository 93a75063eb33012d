package runtable_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
)

// A backlog's interleaved runs each get a message every round, so each
// always has messages waiting for its write: a run was written whenever
// its oldest waited 40 % of the ack wait (its first progress
// acknowledgement), every run of the partition with it, for as long as the
// fold lasted. Now a waiting message gets its progress acknowledged twice
// before its run's write is due: over rounds a quarter of the ack wait
// apart, a run is written about every 1.2 ack waits, not every 0.4 (plus
// its close), nothing is delivered twice, and every run closes once with
// every event. The bound is in rounds, not in time: maxWrites is what
// writes every two progress acknowledgements (0.8 ack wait) would make,
// and two more; the cadence before this change wrote every two rounds
// (12 and 13 a run, the close included).
func TestBacklogRunsWrittenAfterTheirProgressAcksIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	const (
		group   = "backlogwrites"
		ackWait = 4 * time.Second
		pace    = ackWait / 4
		n       = 8
	)
	a := startTable(t, b.URL, group, tableConfig{idle: time.Hour,
		consumer: runtable.ConsumerConfig{AckWait: ackWait, CheckpointInterval: time.Second, MaxAckPending: 4096}})
	a.waitOwns(a.parts)
	runs := rt.Gen(t, n, fx)
	rounds := min(24, fx.FinishedIndex(t))
	require.Greater(t, rounds, 12, "the fixture's rounds before its run-finished event")
	folded := 0
	for i := range rounds {
		for _, r := range runs {
			b.Publish(t, r.Wires[i])
		}
		folded += n
		rt.Eventually(t, "the round folded", func() bool {
			return counter(t, a.m, "gttsplit_events_folded_total") >= float64(folded)
		})
		time.Sleep(pace)
	}
	for _, r := range runs {
		b.Publish(t, r.Wires[rounds:]...)
	}
	rt.Eventually(t, "every run closed", func() bool { _, c := a.closes.count(); return c == n })
	b.WaitAcked(t, group)
	splits, _ := a.closes.count()
	require.Equal(t, n, splits, "every run written once")
	for _, r := range runs {
		st := b.State(t, r.Origin.RunID, rt.FoldOptions(t))
		require.True(t, st.Closed, r.Origin.RunID)
	}
	writes := counter(t, a.m, "gttsplit_state_writes_total") / n
	progress := counter(t, a.m, "gttsplit_events_progress_acks_total")
	redelivered := counter(t, a.m, "gttsplit_events_redelivered_total")
	maxWrites := float64(rounds)*pace.Seconds()/(2*0.4*ackWait.Seconds()) + 2
	t.Logf("%d interleaved runs, %d rounds %v apart (ack wait %v): %.1f run states written a run (%s; at most %.1f), %.0f progress acks (%.2f an event), %.0f redelivered%s",
		n, rounds, pace, ackWait, writes, labelled(t, a.m, "gttsplit_state_writes_causes_total", n), maxWrites,
		progress, progress/float64(n*len(fx.Wires)), redelivered, redeliveryCauses(t, a.m))
	require.LessOrEqual(t, writes, maxWrites, "run states written a run")
	require.Zero(t, redelivered, "no event delivered twice")
}

// labelled says a labelled counter's series, each divided by per.
func labelled(t *testing.T, m *runtable.Metrics, name string, per int) string {
	t.Helper()
	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mm := range mf.GetMetric() {
			if v := mm.GetCounter().GetValue(); v > 0 && len(mm.GetLabel()) > 0 {
				out = append(out, fmt.Sprintf("%s %.2f", mm.GetLabel()[0].GetValue(), v/float64(per)))
			}
		}
	}
	return strings.Join(out, ", ")
}
