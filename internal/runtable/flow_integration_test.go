package runtable_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
)

// A broker slow to answer (every byte it sends reaches the table 300 ms
// late, as a loaded machine or a busy cluster makes it): each state write
// of a checkpoint waits for its answer, so the checkpoint that writes the
// runs of a partition's backlog takes longer than the 4 s ack wait. The
// messages that checkpoint acknowledges, those folded while it writes,
// those pulled and not handled yet and the one in the handler's hand keep
// their progress acknowledged meanwhile: no event is delivered twice, every
// run is written once. (Before, a checkpoint took its messages out of the
// list whose progress was acknowledged, that list was only looked at
// between checkpoints, and a pull's 64 messages waited in a buffer: 301 of
// 325 events were delivered again.)
func TestSlowBrokerRedeliversNothingIntegration(t *testing.T) {
	skipShort(t)
	opts := rt.FoldOptions(t)
	fx := rt.Load(t, fixture4B, opts)
	srv := natstest.Start(t)
	b := rt.BrokerAt(t, srv)
	proxy := natstest.StartProxy(t, srv.Addr().String())
	const group = "slow"
	// Leases that outlive renewals waiting behind slow writes.
	r := startTable(t, proxy.URL(), group, tableConfig{idle: time.Hour,
		consumer: runtable.ConsumerConfig{AckWait: 4 * time.Second, CheckpointInterval: time.Second}}, 30*time.Second)
	r.waitOwns(r.parts)
	proxy.SetLatency(300 * time.Millisecond)
	// The runs of one partition: its checkpoint writes them one after
	// another.
	byPart := map[int][]rt.Run{}
	var runs []rt.Run
	for _, g := range rt.Gen(t, 160, fx) {
		p := bus.PartitionOf(g.Origin.RunID, r.parts)
		byPart[p] = append(byPart[p], g)
		if len(byPart[p]) > len(runs) {
			runs = byPart[p]
		}
	}
	n := len(runs)
	require.GreaterOrEqual(t, n, 8)
	events := 0
	for _, g := range runs {
		b.Publish(t, g.Wires...)
		events += len(g.Wires)
	}
	rt.Eventually(t, fmt.Sprintf("%d splits", n), func() bool { _, c := r.closes.count(); return c == n })
	b.WaitAcked(t, group)
	splits, _ := r.closes.count()
	require.Equal(t, n, splits, "every run written once")
	progress := counter(t, r.m, "gttsplit_events_progress_acks_total")
	t.Logf("%d events, %.0f progress acks, %.0f checkpoints", events, progress, counter(t, r.m, "gttsplit_checkpoints_total"))
	require.Positive(t, progress, "the checkpoints took longer than the ack wait")
	require.Zero(t, counter(t, r.m, "gttsplit_events_redelivered_total"), "no event delivered twice")
}
