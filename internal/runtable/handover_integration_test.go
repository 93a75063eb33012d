package runtable_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// A partition handed over in the middle of its backlog settles what it
// pulled. One table owns every partition and folds a backlog whose events
// reach it 300 ms after the broker sent them (a loaded machine reading its
// socket late): while it folds, each partition has a pull's events on
// their way, or queued, or in the handler's hand. What the broker sends
// it is held while the backlog is published and a second table starts,
// so that the backlog is still there when the first sees the second and
// gives it partitions back, one after another, as a fleet's members
// started together do. What the
// giving table pulled is folded and acknowledged by its hand-over's last
// checkpoint: of a partition handed over (and whose lease was not lost),
// no event pulled is handed back by the first table, none is delivered
// again to the second but those a last write that failed handed back, and
// every run is written once. A lease lost on a machine too
// loaded to renew it in time (the hold delays the renewals' answers)
// hands its partition's events back, as it should: such partitions are
// left out. (Before, a hand-over naked what was queued and the event in
// the handler's hand, and stopped listening to the pull whose events were
// on their way: 54 delivered again to the second table in this test; 58
// of a 1,000-run backlog's 27,000 events at load 33-37.)
//
// Not under -race unless GTTSPLIT_HANDOVER_RACE is set: there the hold
// (publishing 7,500 events and a second table's start) grew past the ack
// wait on a loaded machine, the first table's given-up pulls piled up
// behind it, and the run said nothing about a hand-over.
func TestHandOverMidFoldSettlesWhatWasPulledIntegration(t *testing.T) {
	if runtable.RaceEnabled && os.Getenv("GTTSPLIT_HANDOVER_RACE") == "" {
		t.Skip("under -race the hold outgrows the ack wait on a loaded machine; GTTSPLIT_HANDOVER_RACE=1 runs it")
	}
	fx, b, proxy := behindProxy(t)
	const group = "handover"
	// An ack wait the hold below stays well inside on a loaded machine
	// (a second table's start); pings the held answers would leave
	// unanswered would replace the first table's connection.
	tc := tableConfig{idle: time.Hour, consumer: runtable.ConsumerConfig{AckWait: time.Minute},
		edit: func(c *config.Aggregator) { c.NATS.PingInterval = time.Hour }}
	// Leases that outlast the hold below on a loaded machine under -race
	// (publishing the backlog, the second table's start): the first
	// table's renewals' answers are held with the rest. A hand-over
	// purges its lease: the time to live does not slow the test.
	const lease = time.Minute
	var logs1, logs2 logBuf
	first := startTableLog(t, proxy.URL(), group, tc, zerolog.New(&logs1).Level(zerolog.DebugLevel), lease)
	first.waitOwns(first.parts)

	// The backlog is published while the broker's answers are held: the
	// first table gets a pull's worth a partition once they are let
	// through, the rest waits in the stream, however long publishing
	// took on a loaded machine.
	proxy.SetLatency(300 * time.Millisecond)
	proxy.HoldServer()
	runs := rt.Gen(t, 300, fx)
	var wires []events.Wire
	for _, g := range runs {
		wires = append(wires, g.Wires...)
	}
	for i := 0; i < len(wires); i += 1000 { // (the client's bound on publishes awaiting their ack)
		b.Publish(t, wires[i:min(i+1000, len(wires))]...)
	}
	second := startTableLog(t, b.URL, group, tableConfig{idle: time.Hour, consumer: runtable.ConsumerConfig{AckWait: time.Minute}},
		zerolog.New(&logs2).Level(zerolog.DebugLevel), lease)
	rt.Eventually(t, "the second table's member live", func() bool {
		_, members := second.member.View()
		return len(members) == 2
	})
	proxy.ReleaseServer()
	second.waitOwns(second.parts / 2)
	proxy.SetLatency(0) // the hand-overs are done: the rest folds at speed

	closed := func() int {
		_, n1 := first.closes.count()
		_, n2 := second.closes.count()
		return n1 + n2
	}
	// On a loaded machine under -race the fold takes minutes: the wait
	// fails only when no run closed for rt.WaitFor.
	for last, since := -1, time.Now(); closed() < len(runs); time.Sleep(50 * time.Millisecond) {
		if n := closed(); n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) > rt.WaitFor {
			t.Fatalf("timed out waiting for %d runs closed: %d, none more for %v", len(runs), last, rt.WaitFor)
		}
	}
	b.WaitAcked(t, group)
	s1, _ := first.closes.count()
	s2, _ := second.closes.count()
	took := counter(t, second.m, "gttsplit_events_folded_total")
	red := counter(t, first.m, "gttsplit_events_redelivered_total") + counter(t, second.m, "gttsplit_events_redelivered_total")

	// By partition, from the tables' logs: handed over by the first,
	// its lease lost there, events it handed back, events delivered
	// again to the second.
	// A release's last checkpoint whose writes failed (a loaded machine
	// under -race) hands back what they held, at once (why "release"):
	// those may come again; nothing else may.
	over, lost := map[int]bool{}, map[int]bool{}
	back, pulled, again := map[int]int{}, map[int]int{}, map[int]int{}
	scan := func(logs *logBuf, f func(msg, why string, p int)) {
		for _, line := range strings.Split(logs.String(), "\n") {
			var e struct {
				Message   string `json:"message"`
				Why       string `json:"why"`
				Partition *int   `json:"partition"`
			}
			if json.Unmarshal([]byte(line), &e) == nil && e.Partition != nil {
				f(e.Message, e.Why, *e.Partition)
			}
		}
	}
	scan(&logs1, func(msg, why string, p int) {
		switch {
		case msg == "fleet: partition handed over", strings.HasPrefix(msg, "fleet: lease not given back"):
			over[p] = true // (a lease not deleted in time expires by itself)
		case strings.HasPrefix(msg, "fleet: partition lease lost"):
			lost[p] = true
		case msg == "event handed back" && why == "release":
			back[p]++
		case msg == "event handed back":
			pulled[p]++ // pulled and not folded: "stop", "not folded", ...
		}
	})
	scan(&logs2, func(msg, _ string, p int) {
		if msg == "event redelivered" {
			again[p]++
		}
	})
	moved, wrong := 0, []string{}
	for p := range over {
		if lost[p] {
			continue
		}
		moved++
		if pulled[p] > 0 || again[p] > back[p] {
			wrong = append(wrong, fmt.Sprintf("partition %d: %d pulled and handed back, %d delivered again, %d handed back by a failed last write",
				p, pulled[p], again[p], back[p]))
		}
	}
	t.Logf("%d events of %d runs: %d partitions handed over (%d with their lease lost before), %.0f events folded after it by their new owner; redelivered %.0f%s%s",
		len(wires), len(runs), len(over), len(over)-moved, took, red, redeliveryCauses(t, first.m), redeliveryCauses(t, second.m))
	require.Positive(t, moved, "partitions handed over")
	require.Equal(t, len(runs), s1+s2, "every run written once")
	require.Empty(t, wrong, "a partition handed over settles what it pulled")
}
