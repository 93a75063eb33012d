package runtable_test

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
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
// its close), the table lets no event's ack wait run out by its own clock
// (judgeRedeliveries), and every run closes once with every event. The
// bound is in the rounds' measured time, not their planned one (a loaded
// machine stretches each round's fold): maxWrites is what writes every two
// progress acknowledgements (0.8 ack wait) over that time would make, and
// two more; the cadence before this change wrote every progress
// acknowledgement (13 a run over 24 rounds at 1 s, against 9.5).
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
	stalls := watchStalls(t)
	var logs timedLog
	log := zerolog.New(io.MultiWriter(&logs, zerolog.NewTestWriter(t))).Level(zerolog.DebugLevel)
	a := startTableLog(t, b.URL, group, tableConfig{idle: time.Hour,
		consumer: runtable.ConsumerConfig{AckWait: ackWait, CheckpointInterval: time.Second, MaxAckPending: 4096}}, log)
	a.waitOwns(a.parts)
	runs := rt.Gen(t, n, fx)
	rounds := min(24, fx.FinishedIndex(t))
	require.Greater(t, rounds, 12, "the fixture's rounds before its run-finished event")
	folded, start := 0, time.Now()
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
	spent := time.Since(start)
	for _, r := range runs {
		b.Publish(t, r.Wires[rounds:]...)
	}
	waitSplits(t, a, n)
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
	maxWrites := spent.Seconds()/(2*0.4*ackWait.Seconds()) + 2
	t.Logf("%d interleaved runs, %d rounds %v apart (ack wait %v), taking %.1fs: %.1f run states written a run (%s; at most %.1f), %.0f progress acks (%.2f an event), %.0f redelivered%s",
		n, rounds, pace, ackWait, spent.Seconds(), writes, labelled(t, a.m, "gttsplit_state_writes_causes_total", n), maxWrites,
		progress, progress/float64(n*len(fx.Wires)), redelivered, redeliveryCauses(t, a.m))
	require.LessOrEqual(t, writes, maxWrites, "run states written a run")
	requireNoOwnRedelivery(t, a.m, &logs, ackWait, stalls)
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
