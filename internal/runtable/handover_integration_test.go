package runtable_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// A partition handed over in the middle of its backlog settles what it
// pulled. One table owns every partition and folds a backlog whose events
// reach it 300 ms after the broker sent them (a loaded machine reading its
// socket late). Once every partition is in the middle of it (its second
// pull sent), what the broker sends the table is held while a second table
// starts, however long that takes: meanwhile the first table folds what it
// holds and pulls at most once more a partition, and it sees the second
// only once that pull's events, on their way, are let through. It then
// gives the second partitions back, one after another, each with a pull's
// events in hand or on their way, as a fleet's members started together
// do. What the giving table pulled is folded and acknowledged by its
// hand-over's last checkpoint: of a partition handed over (and whose lease
// was not lost), no event pulled is handed back by the first table, none
// is delivered again to the second but those a last write that failed
// handed back, every run is written once, and the second table folds the
// rest of the backlog. (Before, a hand-over naked what was queued and the
// event in the handler's hand, and stopped listening to the pull whose
// events were on their way: in seven runs under -race at load 25-43, 13
// to 60 events were delivered again to the second table in four, and in
// three 64 to 84 were never acknowledged, the test's runs left open; 58 of
// a 1,000-run backlog's 27,000 events at load 33-37.)
//
// Nothing in it waits on the clock: the hold starts on the broker's
// deliveries and ends on the second table's member being live; the ack
// wait, the leases and a pull's wait for its end outlast any hold (ten
// minutes); and the runs' first events are folded before it, so that
// nothing the first table folds while held needs an answer from the
// broker (a run's first event reads the state bucket: held, that read
// would time out and hand the event back).
func TestHandOverMidFoldSettlesWhatWasPulledIntegration(t *testing.T) {
	// Four partitions: two are handed over; the events the first table
	// holds at once stay few enough to fold quickly under -race.
	const group, parts = "handover", 4
	fx, b, proxy := behindProxyParts(t, parts)
	// Longer than any hold below (a second table's start, many seconds
	// under -race on a loaded machine): the ack wait (the held events are
	// not delivered again meanwhile), the leases (the first table's
	// renewals' answers are held with the rest; a hand-over purges its
	// lease, so the time to live does not slow the test), and how long a
	// pull's end is waited for (a pull given up while its answers are
	// held would be followed by another, each bringing its events, and the
	// partition would look idle once let through: one that is cut at once
	// at a hand-over). Pulls expire as a busy partition's do.
	const long = 10 * time.Minute
	t.Cleanup(runtable.SetPulls(runtable.PullExpiry, long))
	consumer := runtable.ConsumerConfig{AckWait: long}
	// Pings the held answers would leave unanswered would replace the
	// first table's connection.
	tc := tableConfig{idle: time.Hour, consumer: consumer, edit: func(c *config.Aggregator) {
		c.Consumer.Stream.Partitions, c.NATS.PingInterval = parts, time.Hour
	}}
	var logs1, logs2 logBuf
	first := startTableLog(t, proxy.URL(), group, tc, zerolog.New(&logs1).With().Timestamp().Logger().Level(zerolog.DebugLevel), long)
	first.waitOwns(first.parts)

	// runsEach runs in every partition: each partition's backlog is four
	// of a table's pulls (64 events) and more, so the hold below finds
	// every partition in the middle of it.
	const runsEach = 12
	runs := runsByPartition(t, fx, first.parts, runsEach)
	// Every run's first event folded first (see above).
	var starts, rest []events.Wire
	for _, g := range runs {
		starts = append(starts, g.Wires[0])
		rest = append(rest, g.Wires[1:]...)
	}
	b.Publish(t, starts...)
	rt.Eventually(t, "every run's first event folded", func() bool {
		return counter(t, first.m, "gttsplit_events_folded_total") >= float64(len(starts))
	})

	proxy.SetLatency(300 * time.Millisecond)
	for i := 0; i < len(rest); i += 1000 { // (the client's bound on publishes awaiting their ack)
		b.Publish(t, rest[i:min(i+1000, len(rest))]...)
	}
	// Every partition's second pull sent: its first brought events, its
	// pulls are a busy partition's (one that brought nothing before
	// would be cut at once at a hand-over).
	busy := uint64(runsEach + runtable.PullBatch)
	rt.Eventually(t, fmt.Sprintf("every partition delivered more than %d events", busy), func() bool {
		d := byPartition(b, group, parts, func(ci *jetstream.ConsumerInfo) uint64 { return ci.Delivered.Consumer })
		return d != nil && slices.Min(d) > busy
	})
	proxy.HoldServer()
	second := startTableLog(t, b.URL, group, tableConfig{idle: time.Hour, consumer: consumer,
		edit: func(c *config.Aggregator) { c.Consumer.Stream.Partitions = parts }},
		zerolog.New(&logs2).With().Timestamp().Logger().Level(zerolog.DebugLevel), long)
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
			t.Fatalf("timed out waiting for %d runs closed: %d, none more for %v (an event lost on its way is delivered again only an ack wait later); by partition, delivered and not acknowledged: %v; %s",
				len(runs), last, rt.WaitFor, byPartition(b, group, parts, func(ci *jetstream.ConsumerInfo) int { return ci.NumAckPending }), handedBack(&logs1, &logs2))
		}
	}
	b.WaitAcked(t, group)
	s1, _ := first.closes.count()
	s2, _ := second.closes.count()
	took := counter(t, second.m, "gttsplit_events_folded_total")
	red := counter(t, first.m, "gttsplit_events_redelivered_total") + counter(t, second.m, "gttsplit_events_redelivered_total")

	hb := scanHandOver(&logs1, &logs2)
	moved, wrong := 0, []string{}
	for p := range hb.over {
		if hb.lost[p] {
			continue
		}
		moved++
		if hb.pulled[p] > 0 || hb.again[p] > hb.back[p] {
			wrong = append(wrong, fmt.Sprintf("partition %d: %d pulled and handed back, %d delivered again, %d handed back by a failed last write",
				p, hb.pulled[p], hb.again[p], hb.back[p]))
		}
	}
	t.Logf("%d events of %d runs: %d partitions handed over (%d with their lease lost before), %.0f events folded by the second table; redelivered %.0f%s%s",
		len(starts)+len(rest), len(runs), len(hb.over), len(hb.over)-moved, took, red, redeliveryCauses(t, first.m), redeliveryCauses(t, second.m))
	require.Positive(t, moved, "partitions handed over")
	require.Positive(t, took, "events folded by the second table: a partition handed over with its backlog not folded yet")
	require.Equal(t, len(runs), s1+s2, "every run written once")
	require.Empty(t, wrong, "a partition handed over settles what it pulled")
}

// behindProxyParts is behindProxy with an events stream of parts
// partitions.
func behindProxyParts(t *testing.T, parts int) (rt.Fixture, *rt.Broker, *natstest.Proxy) {
	t.Helper()
	skipShort(t)
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	srv := natstest.Start(t)
	_, js := rt.Connect(t, srv.ClientURL())
	_, err := bus.EnsureStream(rt.Ctx(t), js, bus.StreamConfig{Partitions: parts}, zerolog.Nop())
	require.NoError(t, err)
	return fx, rt.BrokerAt(t, srv), natstest.StartProxy(t, srv.Addr().String())
}

// runsByPartition generates runs of fx until every one of parts partitions
// has n, and returns n of each, partition by partition.
func runsByPartition(t *testing.T, fx rt.Fixture, parts, n int) []rt.Run {
	t.Helper()
	by := make([][]rt.Run, parts)
	for _, g := range rt.Gen(t, 4*parts*n, fx) {
		p := bus.PartitionOf(g.Origin.RunID, parts)
		if len(by[p]) < n {
			by[p] = append(by[p], g)
		}
	}
	var out []rt.Run
	for p, rs := range by {
		require.Len(t, rs, n, "runs generated in partition %d", p)
		out = append(out, rs...)
	}
	return out
}

// partitionInfos are the infos of group's consumer of each partition
// (nil when the broker did not answer, as on a loaded machine).
func partitionInfos(b *rt.Broker, group string, parts int) []*jetstream.ConsumerInfo {
	ctx, cancel := context.WithTimeout(context.Background(), rt.WaitFor/2)
	defer cancel()
	st, err := b.JS.Stream(ctx, bus.DefaultStream)
	if err != nil {
		return nil
	}
	out := make([]*jetstream.ConsumerInfo, parts)
	for p := range out {
		c, err := st.Consumer(ctx, bus.ConsumerName(group, p))
		if err != nil {
			return nil
		}
		if out[p], err = c.Info(ctx); err != nil {
			return nil
		}
	}
	return out
}

// byPartition is f of group's consumer of each partition, as the broker
// tells it (nil when it did not answer): what it delivered, what it has no
// acknowledgement of.
func byPartition[T any](b *rt.Broker, group string, parts int, f func(*jetstream.ConsumerInfo) T) []T {
	infos := partitionInfos(b, group, parts)
	if infos == nil {
		return nil
	}
	out := make([]T, parts)
	for p, ci := range infos {
		out[p] = f(ci)
	}
	return out
}

// handOver is what two tables' debug logs (JSON) say of the partitions
// the first handed over to the second.
type handOver struct {
	// over: taken by the second (the first holds every partition until
	// it gives it back); lost: its lease lost by the first.
	over, lost map[int]bool
	// back: events the first table's last checkpoint of a partition
	// handed back because its writes failed (why "release", naked at
	// once: a loaded machine under -race); pulled: events it handed back
	// otherwise ("stop", "not folded", ...); again: events delivered
	// again to the second.
	back, pulled, again map[int]int
}

func scanHandOver(logs1, logs2 *logBuf) handOver {
	h := handOver{over: map[int]bool{}, lost: map[int]bool{}, back: map[int]int{}, pulled: map[int]int{}, again: map[int]int{}}
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
	scan(logs1, func(msg, why string, p int) {
		switch {
		case strings.HasPrefix(msg, "fleet: partition lease lost"):
			h.lost[p] = true
		case msg == "event handed back" && why == "release":
			h.back[p]++
		case msg == "event handed back":
			h.pulled[p]++
		}
	})
	scan(logs2, func(msg, _ string, p int) {
		switch msg {
		case "fleet: partition taken":
			h.over[p] = true // once the first gave it back (or lost it)
		case "event redelivered":
			h.again[p]++
		}
	})
	return h
}

// handedBack says, by partition, what the first table handed back and the
// second got again so far.
func handedBack(logs1, logs2 *logBuf) string {
	h := scanHandOver(logs1, logs2)
	var out []string
	for p := range h.over {
		out = append(out, fmt.Sprintf("partition %d (lease lost %v): %d pulled and handed back, %d delivered again, %d handed back by a failed last write",
			p, h.lost[p], h.pulled[p], h.again[p], h.back[p]))
	}
	return fmt.Sprintf("%d partitions handed over: %s", len(h.over), strings.Join(out, "; "))
}
