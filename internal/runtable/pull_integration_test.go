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
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
)

// A pull answered after the table stopped waiting for it: the broker's
// answers reach the table late (the proxy holds them, as a loaded machine
// that reads its socket late or a loaded broker that takes a pull late
// does) while the partitions' pulls standing at the broker get a backlog's
// events, and are held until each of those partitions gave its pull up and
// pulled again. What those pulls brought then comes, late: it is folded
// and acknowledged as any other, nothing is delivered twice, every run is
// written once. (Before, nats.go's Fetch dropped what came on a pull
// after its own timer, the pull's expiry and a second, and the broker
// delivered it again an ack wait later: ~290 of a 1,000-run backlog's
// 27,000 events at load 37-48.)
func TestLatePullAnswersFoldedIntegration(t *testing.T) {
	fx, b, proxy := behindProxy(t)
	const group = "late"
	// Short pulls, each given up a second past its expiry (as nats.go's
	// Fetch did; the table's own grace is half the ack wait): the hold
	// below is a small part of the ack wait. Undone after the table
	// stopped.
	t.Cleanup(runtable.SetPulls(time.Second, time.Second))
	var logs logBuf
	log := zerolog.New(io.MultiWriter(&logs, zerolog.NewTestWriter(t))).Level(zerolog.InfoLevel)
	r := startTableLog(t, proxy.URL(), group, tableConfig{idle: time.Hour,
		// An ack wait the hold below stays well inside, on a loaded
		// machine too.
		consumer: runtable.ConsumerConfig{AckWait: 30 * time.Second},
		// Pings the held answers would leave unanswered would replace
		// the connection: this test holds the answers only.
		edit: func(c *config.Aggregator) { c.NATS.PingInterval = time.Hour }}, log, time.Minute)
	r.waitOwns(r.parts)

	// The pull requests the table sends, by consumer: the test's own
	// connection sees them as the broker takes them (a request the
	// broker served events on was taken before: once a round trip to
	// the broker returned, it is among those counted).
	pulls := map[string]int{}
	tap, err := b.NC.SubscribeSync("$JS.API.CONSUMER.MSG.NEXT.>")
	require.NoError(t, err)
	t.Cleanup(func() { _ = tap.Unsubscribe() })
	count := func() {
		require.NoError(t, b.NC.Flush())
		n, _, err := tap.Pending()
		require.NoError(t, err)
		for range n {
			m, err := tap.NextMsg(rt.WaitFor)
			require.NoError(t, err)
			pulls[m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]]++
		}
	}
	count()

	proxy.HoldServer()
	runs := rt.Gen(t, 8, fx)
	events := 0
	parts := map[string]bool{}
	for _, g := range runs {
		b.Publish(t, g.Wires...)
		events += len(g.Wires)
		parts[bus.ConsumerName(group, bus.PartitionOf(g.Origin.RunID, r.parts))] = true
	}
	rt.Eventually(t, "every event delivered on the pulls standing", func() bool {
		ci, err := b.ConsumerInfo(group)
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == events
	})
	count()
	sent := map[string]int{}
	for c := range parts {
		sent[c] = pulls[c]
	}
	rt.Eventually(t, "every partition with events to give its pull up and pull again", func() bool {
		count()
		for c := range parts {
			if pulls[c] == sent[c] {
				return false
			}
		}
		return true
	})
	proxy.ReleaseServer()

	rt.Eventually(t, fmt.Sprintf("%d splits", len(runs)), func() bool { _, c := r.closes.count(); return c == len(runs) })
	b.WaitAcked(t, group)
	splits, _ := r.closes.count()
	require.Equal(t, len(runs), splits, "every run written once")
	red := counter(t, r.m, "gttsplit_events_redelivered_total")
	late := counter(t, r.m, "gttsplit_events_pulled_late_total")
	t.Logf("%d events on %d partitions' pulls answered late: %.0f came on a pull given up, %.0f redelivered%s", events, len(parts), late, red, redeliveryCauses(t, r.m))
	require.Zero(t, red, "no event delivered twice")
	require.Equal(t, float64(events), late, "every event came on a pull the table had given up")
	require.False(t, strings.Contains(logs.String(), "partition lease lost"), "a lease lost")
}
