package runtable_test

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
)

// behindProxy loads fixture4B and starts a broker with a proxy in front of
// it: the table under test talks to the broker through the proxy, the test
// publishes and reads the broker directly.
func behindProxy(t *testing.T) (rt.Fixture, *rt.Broker, *natstest.Proxy) {
	t.Helper()
	skipShort(t)
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	srv := natstest.Start(t)
	return fx, rt.BrokerAt(t, srv), natstest.StartProxy(t, srv.Addr().String())
}

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
	fx, b, proxy := behindProxy(t)
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

// A lease "in doubt": the table's connection stays up but the broker's
// answers are held back (the machine too loaded to read them, a connection
// about to be replaced) until a lease's validity ran out with its renewal
// unanswered. The broker stored the renewals meanwhile: the key never left
// the table, nobody else could take the partition. Once the answers come,
// the leases are valid again and the partitions' work was kept: the events
// folded before (waiting for a checkpoint, their progress acknowledged)
// are not handed back, nothing is delivered twice, every run is written
// once. (Before, the lease was lost the moment its validity ran out: its
// partition's folded events were handed back and delivered again once the
// key expired and the member took the partition anew.)
func TestLeaseInDoubtKeepsItsWorkIntegration(t *testing.T) {
	fx, b, proxy := behindProxy(t)
	const group, ttl = "doubt", 20 * time.Second
	var logs logBuf
	log := zerolog.New(io.MultiWriter(&logs, zerolog.NewTestWriter(t))).Level(zerolog.InfoLevel)
	r := startTableLog(t, proxy.URL(), group, tableConfig{idle: time.Hour,
		// Nothing written while the answers are held: the folded events
		// wait for a checkpoint (a minute away) or their runs' close.
		consumer: runtable.ConsumerConfig{AckWait: 4 * time.Second, CheckpointInterval: time.Minute},
		// Pings the held answers would leave unanswered would replace
		// the connection: this test holds the answers only.
		edit: func(c *config.Aggregator) { c.NATS.PingInterval = time.Hour }}, log, ttl)
	r.waitOwns(r.parts)
	runs := rt.Gen(t, 8, fx)
	events := 0
	for _, g := range runs {
		b.Publish(t, g.Wires[:len(g.Wires)-1]...)
		events += len(g.Wires) - 1
	}
	rt.Eventually(t, "every event but the runs' last folded", func() bool {
		return counter(t, r.m, "gttsplit_events_folded_total") == float64(events)
	})

	proxy.HoldServer()
	rt.Eventually(t, "a lease's validity to run out", func() bool {
		s := logs.String()
		return strings.Contains(s, "lease in doubt") || strings.Contains(s, "partition lease lost")
	})
	proxy.ReleaseServer()
	rt.Eventually(t, "every lease in doubt renewed or lost", func() bool {
		s := logs.String()
		return strings.Contains(s, "partition lease lost") ||
			strings.Count(s, "lease in doubt renewed") == strings.Count(s, "lease in doubt:")
	})
	require.False(t, strings.Contains(logs.String(), "partition lease lost"), "a lease whose key stayed the table's was dropped")

	for _, g := range runs {
		b.Publish(t, g.Wires[len(g.Wires)-1])
	}
	rt.Eventually(t, fmt.Sprintf("%d splits", len(runs)), func() bool { _, c := r.closes.count(); return c == len(runs) })
	b.WaitAcked(t, group)
	splits, _ := r.closes.count()
	require.Equal(t, len(runs), splits, "every run written once")
	require.False(t, strings.Contains(logs.String(), "partition lease lost"), "a lease lost")
	t.Logf("%d leases were in doubt, all kept; %d events folded before, %.0f redelivered", strings.Count(logs.String(), "lease in doubt renewed"),
		events, counter(t, r.m, "gttsplit_events_redelivered_total"))
	require.Zero(t, counter(t, r.m, "gttsplit_events_redelivered_total"), "no event delivered twice")
}
