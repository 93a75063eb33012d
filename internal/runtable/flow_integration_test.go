package runtable_test

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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

// foldAllBut publishes 8 runs of fx but the last last events of each,
// waits until table r folded every event published and returns the runs
// and how many events that was.
//
// gttsplit_events_folded_total counts each delivery folded, a redelivered
// event's again: every event was folded once the folds less the
// redeliveries reach the events published (on a loaded machine an event
// may be delivered again while the table folds; the tests count their
// redeliveries from the end of this fold). The wait fails only when no
// event was folded for rt.WaitFor (a loaded machine may take longer than
// that for the whole fold), saying how far it got.
func foldAllBut(t *testing.T, b *rt.Broker, r *table, fx rt.Fixture, last int) ([]rt.Run, int) {
	t.Helper()
	runs := rt.Gen(t, 8, fx)
	events := 0
	for _, g := range runs {
		b.Publish(t, g.Wires[:len(g.Wires)-last]...)
		events += len(g.Wires) - last
	}
	seen, deadline := -1.0, time.Now()
	for {
		folded := counter(t, r.m, "gttsplit_events_folded_total")
		red := counter(t, r.m, "gttsplit_events_redelivered_total")
		if folded-red >= float64(events) {
			t.Logf("%d events folded (%.0f folds, %.0f redelivered during the fold)", events, folded, red)
			return runs, events
		}
		if folded > seen {
			seen, deadline = folded, time.Now().Add(rt.WaitFor)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for every event but the runs' last %d folded: %.0f folds of %d events, %.0f redelivered, none more for %v",
				last, folded, events, red, rt.WaitFor)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitSplits waits until table r wrote n splits. It fails only when no
// event was folded and no split written for rt.WaitFor (a loaded machine
// may take longer than that for the whole), saying how far it got.
func waitSplits(t *testing.T, r *table, n int) {
	t.Helper()
	seen, deadline := -1.0, time.Now()
	for {
		_, c := r.closes.count()
		if c >= n {
			return
		}
		folded := counter(t, r.m, "gttsplit_events_folded_total")
		if p := folded + float64(c); p > seen {
			seen, deadline = p, time.Now().Add(rt.WaitFor)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d splits: %d written, %.0f folds, none more for %v", n, c, folded, rt.WaitFor)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A broker slow to answer (every byte it sends reaches the table 300 ms
// late, as a loaded machine or a busy cluster makes it): each state write
// of a checkpoint waits for its answer, so the checkpoint that writes the
// runs of a partition's backlog takes longer than the 4 s ack wait. The
// messages that checkpoint acknowledges, those folded while it writes,
// those pulled and not handled yet and the one in the handler's hand keep
// their progress acknowledged meanwhile: the table lets no event's ack
// wait run out by its own clock, every run is written once. (Before, a
// checkpoint took its messages out of the list whose progress was
// acknowledged, that list was only looked at between checkpoints, and a
// pull's 64 messages waited in a buffer: 301 of 325 events were delivered
// again.) On a loaded machine the broker may still get a progress
// acknowledgement sent in time, or a delivery, late: such redeliveries
// are said, not failed (judgeRedeliveries).
func TestSlowBrokerRedeliversNothingIntegration(t *testing.T) {
	fx, b, proxy := behindProxy(t)
	const group, ackWait = "slow", 4 * time.Second
	stalls := watchStalls(t)
	var logs timedLog
	log := zerolog.New(io.MultiWriter(&logs, zerolog.NewTestWriter(t))).Level(zerolog.DebugLevel)
	// Leases that outlive renewals waiting behind slow writes.
	r := startTableLog(t, proxy.URL(), group, tableConfig{idle: time.Hour,
		consumer: runtable.ConsumerConfig{AckWait: ackWait, CheckpointInterval: time.Second},
		// This test is about the ack wait's pacing, not about finding a
		// connection cut off (bus's cut-off tests): with pings every 2 s
		// a stall of the test process past three of them (9.5 s at
		// once was measured beside CI) made the client take the
		// connection as stale, and its replacement delivered again
		// what the old one had in flight.
		edit: func(c *config.Aggregator) { c.NATS.PingInterval = time.Minute }}, log, 30*time.Second)
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
	waitSplits(t, r, n)
	b.WaitAcked(t, group)
	splits, _ := r.closes.count()
	require.Equal(t, n, splits, "every run written once")
	progress := counter(t, r.m, "gttsplit_events_progress_acks_total")
	t.Logf("%d events, %.0f progress acks, %.0f checkpoints, %.0f redelivered%s", events, progress, counter(t, r.m, "gttsplit_checkpoints_total"),
		counter(t, r.m, "gttsplit_events_redelivered_total"), redeliveryCauses(t, r.m))
	require.Positive(t, progress, "the checkpoints took longer than the ack wait")
	requireNoOwnRedelivery(t, r.m, &logs, ackWait, stalls)
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
	runs, events := foldAllBut(t, b, r, fx, 1)
	// What a loaded machine redelivered while the table folded, before
	// any answer was held: not this test's (the flow control's, tested
	// with a slow broker above).
	red0 := counter(t, r.m, "gttsplit_events_redelivered_total")

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
	red := counter(t, r.m, "gttsplit_events_redelivered_total") - red0
	t.Logf("%d leases were in doubt, all kept; %d events folded before (%.0f redelivered while they were), %.0f redelivered since%s", strings.Count(logs.String(), "lease in doubt renewed"),
		events, red0, red, redeliveryCauses(t, r.m))
	require.Zero(t, red, "no event delivered twice once the answers were held")
}

// redeliveryCauses is ": " and what table m's redeliveries were traced
// to (gttsplit_events_redelivered_causes_total by cause), "" when none.
func redeliveryCauses(t *testing.T, m *runtable.Metrics) string {
	t.Helper()
	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "gttsplit_events_redelivered_causes_total" {
			continue
		}
		for _, mm := range mf.GetMetric() {
			if v := mm.GetCounter().GetValue(); v > 0 && len(mm.GetLabel()) > 0 {
				out = append(out, fmt.Sprintf("%s %.0f", mm.GetLabel()[0].GetValue(), v))
			}
		}
	}
	if len(out) == 0 {
		return ""
	}
	return ": " + strings.Join(out, ", ")
}

// tracedRedelivery is a redelivery as the table traced it to its earlier
// delivery here (the debug line "event redelivered": redeliver.go).
type tracedRedelivery struct {
	Partition int    `json:"partition"`
	Seq       uint64 `json:"seq"`
	Cause     string `json:"cause"`
	// By the table's own clock: since the earlier delivery came (held)
	// or was settled, since its ack wait last started (when settled, for
	// one settled), and the longest between two starts of its ack wait
	// (its coming, its progress acknowledgements) up to then.
	Since, Waited, Longest time.Duration
	// At is when the redelivery came; Stalled how long the process was
	// held back in the stretch its longest wait lies in.
	At      time.Time
	Stalled time.Duration
}

func (r tracedRedelivery) String() string {
	return fmt.Sprintf("p%d/%d %s (waited %.1fs, longest %.1fs, the process held back %.1fs of it)", r.Partition, r.Seq, r.Cause, r.Waited.Seconds(), r.Longest.Seconds(), r.Stalled.Seconds())
}

// logDuration reads a duration zerolog wrote: milliseconds as a number
// (its default), or a duration's string.
func logDuration(t *testing.T, raw json.RawMessage) time.Duration {
	t.Helper()
	var ms float64
	if json.Unmarshal(raw, &ms) == nil {
		return time.Duration(ms * float64(time.Millisecond))
	}
	var s string
	require.NoError(t, json.Unmarshal(raw, &s), "a duration in the log: %s", raw)
	d, err := time.ParseDuration(s)
	require.NoError(t, err)
	return d
}

// tracedRedeliveries are the redeliveries a table logging at debug level
// to logs traced, each with what stalls says the process was held back.
func tracedRedeliveries(t *testing.T, logs *timedLog, stalls *stallWatch) []tracedRedelivery {
	t.Helper()
	var out []tracedRedelivery
	for _, tl := range logs.all() {
		line := tl.line
		if !strings.Contains(line, `"message":"event redelivered"`) {
			continue
		}
		var l struct {
			Partition int             `json:"partition"`
			Seq       uint64          `json:"seq"`
			Cause     string          `json:"cause"`
			Since     json.RawMessage `json:"since"`
			Waited    json.RawMessage `json:"waited"`
			Longest   json.RawMessage `json:"longest_wait"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &l), line)
		tr := tracedRedelivery{Partition: l.Partition, Seq: l.Seq, Cause: l.Cause, At: tl.at,
			Since: logDuration(t, l.Since), Waited: logDuration(t, l.Waited), Longest: logDuration(t, l.Longest)}
		// Held: the waits lie between its coming and now. Settled: the
		// longest ended by the settling, at the last start before it at
		// the latest when that was not the last wait.
		from, to := tr.At.Add(-tr.Since), tr.At
		if !strings.HasPrefix(tr.Cause, "held_") {
			from, to = to.Add(-tr.Since-tr.Waited-tr.Longest), to.Add(-tr.Since)
		}
		tr.Stalled, _ = stalls.within(from, to)
		out = append(out, tr)
	}
	return out
}

// stallWatch records when a goroutine of the test's process that asks to
// run every stallTick ran late, and by how much: what a loaded machine
// held back every goroutine of the process (the table's progress
// acknowledgements and the embedded broker's timers among them).
type stallWatch struct {
	mu     sync.Mutex
	stalls []stall
}

// stall is a stretch the watch's goroutine ran late: it ended at end,
// d late.
type stall struct {
	end time.Time
	d   time.Duration
}

const stallTick = 50 * time.Millisecond

// watchStalls starts a stallWatch, until the test ends.
func watchStalls(t *testing.T) *stallWatch {
	w := &stallWatch{}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tk := time.NewTicker(stallTick)
		defer tk.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
			}
			now := time.Now()
			if d := now.Sub(last) - stallTick; d > stallTick {
				w.mu.Lock()
				w.stalls = append(w.stalls, stall{end: now, d: d})
				w.mu.Unlock()
			}
			last = now
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
	return w
}

// within is how long the process was held back between from and to, and
// the longest single stall of all.
func (w *stallWatch) within(from, to time.Time) (sum, longest time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.stalls {
		longest = max(longest, s.d)
		start := s.end.Add(-s.d)
		if lo, hi := maxTime(start, from), minTime(s.end, to); hi.After(lo) {
			sum += hi.Sub(lo)
		}
	}
	return sum, longest
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// timedLog is a log's lines as they were written, each with when.
type timedLog struct {
	mu    sync.Mutex
	lines []timedLine
}

type timedLine struct {
	at   time.Time
	line string
}

func (l *timedLog) Write(p []byte) (int, error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l.lines = append(l.lines, timedLine{at: now, line: line})
	}
	return len(p), nil
}

func (l *timedLog) all() []timedLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]timedLine(nil), l.lines...)
}

// judgeRedeliveries tells a table's redeliveries apart by what the table's
// own record (its ledger's clock) says of their earlier delivery, less
// what the machine held the whole process back meanwhile (stallWatch):
//
//   - own: the table let the ack wait run out by its own clock: the earlier
//     delivery was held here (held_*) or acknowledged here (acked) after a
//     wait of ackWait or more between two starts of its ack wait (its
//     coming, its progress acknowledgements) that the process's stalls do
//     not account for: the flow control acknowledges a message's progress
//     by half the ack wait and a look of its goroutine (a tenth) after the
//     last start, later only by as long as the process was held back; or
//     it was handed back here (handed_back) or never seen here (unseen),
//     which nothing in these tests does (no stop, no hand-over, no lease
//     moved);
//   - late: held or acknowledged here, each wait between two starts of its
//     ack wait shorter than ackWait or explained by the process's stalls:
//     the table sent its progress acknowledgements as promised, and the
//     broker got one, or the delivery itself reached the table, late (a
//     loaded machine's scheduling, the network): not the flow control's.
func judgeRedeliveries(trs []tracedRedelivery, ackWait time.Duration) (own, late []tracedRedelivery) {
	for _, tr := range trs {
		kept := tr.Cause == "acked" || strings.HasPrefix(tr.Cause, "held_")
		if kept && (tr.Longest < ackWait || tr.Longest-tr.Stalled < ackWait/2+ackWait/10) {
			late = append(late, tr)
		} else {
			own = append(own, tr)
		}
	}
	return own, late
}

// requireNoOwnRedelivery fails when table m (logging at debug level to
// logs, its ack wait ackWait) let an event's ack wait run out by its own
// clock (judgeRedeliveries; stalls: the process's), or redelivered more
// than it traced; the redeliveries the broker made late are said.
func requireNoOwnRedelivery(t *testing.T, m *runtable.Metrics, logs *timedLog, ackWait time.Duration, stalls *stallWatch) {
	t.Helper()
	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	counted := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "gttsplit_events_redelivered_causes_total" {
			for _, mm := range mf.GetMetric() {
				counted += mm.GetCounter().GetValue()
			}
		}
	}
	trs := tracedRedeliveries(t, logs, stalls)
	require.GreaterOrEqual(t, len(trs), int(counted), "redeliveries counted but not traced in the log")
	sum, stall := stalls.within(time.Time{}, time.Now())
	own, late := judgeRedeliveries(trs, ackWait)
	t.Logf("the process held back %.1fs in all, %.1fs at most at once; %d redelivered by the table's own clock, %d late at the broker", sum.Seconds(), stall.Seconds(), len(own), len(late))
	if len(late) > 0 {
		t.Logf("%d redelivered though the table's own record shows their progress acknowledged in time (each wait between two starts of their ack wait under %v, or explained by the process's stalls): the broker got it, or the delivery came, late: %v",
			len(late), ackWait, late)
	}
	require.Empty(t, own, "redelivered with the ack wait (%v) run out by the table's own clock beyond the process's stalls, or handed back, or not seen here", ackWait)
}

// A connection the client finds stale: the network to the broker stops
// carrying anything (the proxy holds both ways) while the table holds a
// fold's events, every one folded and waiting for a checkpoint, and while
// the runs' next events are published on the partitions' pulls standing at
// the broker; the client's pings go unanswered, it gives the connection up
// and connects again once the network is back (the old connection is cut:
// nothing it held in the network arrives). The progress acknowledgements
// sent meanwhile were lost, and when the network stayed down longer than
// the ack wait the broker put the held events on its redelivery queue; the
// table restarts the ack wait of every event it holds at once on the new
// connection (taking them off that queue) and pulls again: none of the held
// events is delivered again. What the broker sent on the stale
// connection's pulls never arrived: at most those events (one a run here)
// are delivered again. Every run is written once. (Before, the held events
// waited for their next progress acknowledgement, 40 % of the ack wait
// after the lost one: 192 of 192 delivered again, the network down just
// until the connection was found stale. Restarting them with progress
// acknowledgements alone leaves those on the redelivery queue.)
func TestStaleConnectionKeepsWhatItHeldIntegration(t *testing.T) {
	const ackWait = 5 * time.Second
	for _, tc := range []struct {
		name string
		down time.Duration // the least the network stays down
	}{
		{"until found stale", 0},
		{"longer than the ack wait", ackWait * 3 / 2},
	} {
		t.Run(tc.name, func(t *testing.T) { staleConnection(t, ackWait, tc.down) })
	}
}

func staleConnection(t *testing.T, ackWait, down time.Duration) {
	fx, b, proxy := behindProxy(t)
	const group = "stale"
	var logs logBuf
	log := zerolog.New(io.MultiWriter(&logs, zerolog.NewTestWriter(t))).Level(zerolog.InfoLevel)
	r := startTableLog(t, proxy.URL(), group, tableConfig{idle: time.Hour,
		// The product's ratio of ack wait to ping interval (10 s, 2 s):
		// the connection is found stale after 3 pings, 60 % of the ack
		// wait. Nothing written while the connection is down: the folded
		// events wait for a checkpoint (a minute away) or their runs'
		// close.
		consumer: runtable.ConsumerConfig{AckWait: ackWait, CheckpointInterval: time.Minute},
		edit:     func(c *config.Aggregator) { c.NATS.PingInterval = ackWait / 5 }}, log)
	r.waitOwns(r.parts)
	runs, held := foldAllBut(t, b, r, fx, 2)
	red0 := counter(t, r.m, "gttsplit_events_redelivered_total")

	proxy.Freeze()
	frozen := time.Now()
	// On the pulls standing at the broker: sent into the stale
	// connection, never to arrive.
	for _, g := range runs {
		b.Publish(t, g.Wires[len(g.Wires)-2])
	}
	rt.Eventually(t, "the client to find its connection stale", func() bool { return r.nc.Status() != nats.CONNECTED })
	time.Sleep(time.Until(frozen.Add(down))) // the outage's length, not a wait for a condition
	proxy.Cut()
	proxy.Thaw()
	outage := time.Since(frozen)
	rt.Eventually(t, "the client to connect again", func() bool {
		return r.nc.Status() == nats.CONNECTED && r.nc.Stats().Reconnects > 0
	})
	for _, g := range runs {
		b.Publish(t, g.Wires[len(g.Wires)-1])
	}
	rt.Eventually(t, fmt.Sprintf("%d splits", len(runs)), func() bool { _, c := r.closes.count(); return c == len(runs) })
	b.WaitAcked(t, group)
	splits, _ := r.closes.count()
	require.Equal(t, len(runs), splits, "every run written once")
	red := counter(t, r.m, "gttsplit_events_redelivered_total") - red0
	t.Logf("network down %.1f s: %d events held through the stale connection, %d sent into it; %.0f redelivered; lease lost: %v",
		outage.Seconds(), held, len(runs), red, strings.Contains(logs.String(), "partition lease lost"))
	require.LessOrEqual(t, red, float64(len(runs)), "only what was sent into the stale connection is delivered again")
}
