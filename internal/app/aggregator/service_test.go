package aggregator

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// running is a Service consuming a durable consumer on a connection of its
// own, as Serve wires it (consumer, Handlers, Loop).
type running struct {
	svc    *Service
	m      *metrics
	nc     *nats.Conn
	closes *closes
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startService starts a Service on its own connection to url, consuming
// durable, wired as Serve wires it. cfg's OnClose is replaced by the
// recorder, its AckFloor set as Serve sets it.
func startService(t testing.TB, url, durable string, cfg ServiceConfig, opts ...func(*bus.ConsumerConfig)) *running {
	t.Helper()
	nc, js := connectJS(t, url)
	r := &running{nc: nc, m: newMetrics(), closes: newCloses()}
	cfg.Fold = foldOptions(t)
	cfg.OnClose = r.closes.add
	cc := bus.DefaultConsumerConfig()
	cc.Durable, cc.AckWait, cc.NakDelay = durable, 2*time.Second, 100*time.Millisecond
	for _, o := range opts {
		o(&cc)
	}
	cons, err := bus.NewConsumer(testCtx(t), js, cc, testLogger(t))
	require.NoError(t, err)
	cfg.AckFloor = ConsumerAckFloor(js, cc) // as Serve does
	svc, err := NewService(testCtx(t), js, cfg, r.m, testLogger(t))
	require.NoError(t, err)
	r.svc = svc
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(2)
	go func() { defer r.wg.Done(); svc.Loop(ctx) }()
	go func() {
		defer r.wg.Done()
		hs := StartHandlers(ctx, DefaultHandlers(), svc.Handle, cc.NakDelay, testLogger(t))
		_ = cons.Consume(ctx, hs.Handle)
		hs.Close()
	}()
	t.Cleanup(r.stop)
	return r
}

// stop is the graceful stop: consuming ends (the consumer drains), then the
// last flush writes and acknowledges what was folded.
func (r *running) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	r.wg.Wait()
	r.svc.Drain(context.Background())
}

// crash is the abrupt stop: the connection goes away without a flush or a
// drain, so acknowledgements not yet sent are lost and what was folded but
// not written is gone with the Service.
func (r *running) crash() {
	r.nc.Close()
	r.cancel()
	r.cancel = nil
	r.wg.Wait()
	r.svc.closeIndex() // its goroutine would be gone with the process
}

// counter reads a counter (of a vector: the one with the given label
// values) from the service's registry.
func counter(t testing.TB, m *metrics, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mm := range mf.GetMetric() {
			if labelsMatch(mm.GetLabel(), labels) {
				if mm.GetCounter() != nil {
					return mm.GetCounter().GetValue()
				}
				return mm.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func labelsMatch(ls []*dto.LabelPair, want []string) bool {
	if len(ls) != len(want) {
		return false
	}
	for i, l := range ls {
		if l.GetValue() != want[i] {
			return false
		}
	}
	return true
}

// TestServiceCrashRestartIntegration crashes a Service mid-run (its
// connection closed without a flush, so some events are folded and not
// acknowledged), starts another on the same server and bucket, and feeds
// the rest: the split is byte for byte the uninterrupted one, and it was
// written once.
func TestServiceCrashRestartIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	const durable = "crash"
	third := len(fx.wires) / 3

	a := startService(t, b.url, durable, ServiceConfig{IdleTimeout: time.Hour})
	b.publish(t, fx.wires[:third]...)
	b.waitAcked(t, durable) // the first third is durable
	// The second third: crash as soon as the service has taken it.
	b.publish(t, fx.wires[third:2*third]...)
	eventually(t, "the second third delivered", func() bool {
		ci, err := b.consumerInfo(durable)
		return err == nil && ci.Delivered.Stream >= uint64(2*third)
	})
	a.crash()
	_, n := a.closes.count()
	require.Zero(t, n)

	c := startService(t, b.url, durable, ServiceConfig{IdleTimeout: time.Hour})
	b.publish(t, fx.wires[2*third:]...)
	eventually(t, "the split after the restart", func() bool { n, _ := c.closes.count(); return n >= 1 })
	b.waitAcked(t, durable)
	c.stop()

	got := c.closes.of(fx.origin.RunID)
	require.Len(t, got, 1, "one split")
	js, err := split.JSON(got[0])
	require.NoError(t, err)
	require.Equal(t, string(fx.want), string(js))
	// Nothing was folded twice: the counts equal the recorded run's.
	require.Equal(t, fx.report.Detail.Samples, got[0].Detail.Samples)
	require.Equal(t, fx.report.Detail.PackedTraceLines, got[0].Detail.PackedTraceLines)
	st := b.state(t, fx.origin.RunID)
	require.True(t, st.Closed)
	require.Equal(t, 1, st.Splits)
	require.Equal(t, string(fx.want), st.Reported)
	t.Logf("redelivered after the crash: %v", counter(t, c.m, "gttsplit_events_redelivered_total"))
}

// fakeClock is the Service's injected clock.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 11, 7, 15, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestServiceIdleTimeoutIntegration folds a run whose run-finished event
// never comes: it stays open until the idle timeout passes on the
// Service's clock, then gets an incomplete split (run.complete false, flag
// incomplete). The late run-finished event re-opens it and the complete
// split, the replay's, replaces it.
func TestServiceIdleTimeoutIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	const durable = "idle"
	const idle = 10 * time.Minute
	clk := newFakeClock()
	r := startService(t, b.url, durable, ServiceConfig{IdleTimeout: idle, Now: clk.now})

	fin := fx.finishedIndex(t)
	open := fx.without(fin)
	b.publish(t, open...)
	b.waitAcked(t, durable)
	clk.advance(idle - time.Second)
	time.Sleep(3 * flushEvery) // flushes run; not idle long enough yet
	n, _ := r.closes.count()
	require.Zero(t, n, "closed before the idle timeout")

	clk.advance(2 * time.Second)
	eventually(t, "the incomplete split", func() bool { n, _ := r.closes.count(); return n == 1 })
	inc := r.closes.of(fx.origin.RunID)[0]
	require.False(t, inc.Run.Complete)
	require.Contains(t, inc.Flags, "incomplete")
	require.Equal(t, clk.now().Format(time.RFC3339Nano), inc.Run.Finished)
	require.Equal(t, fx.report.Detail.Samples, inc.Detail.Samples)
	require.Equal(t, float64(1), counter(t, r.m, "gttsplit_runs_completed_total", "incomplete"))
	require.Equal(t, float64(0), counter(t, r.m, "gttsplit_runs_open"))
	st := b.state(t, fx.origin.RunID)
	require.True(t, st.Closed)
	require.Equal(t, 1, st.Splits)

	// The run-finished event arrives late: the run re-opens and closes
	// complete, with the replay's split.
	b.publish(t, fx.wires[fin])
	eventually(t, "the complete split", func() bool { n, _ := r.closes.count(); return n == 2 })
	b.waitAcked(t, durable)
	got, err := split.JSON(r.closes.of(fx.origin.RunID)[1])
	require.NoError(t, err)
	require.Equal(t, string(fx.want), string(got))
	require.Equal(t, float64(1), counter(t, r.m, "gttsplit_runs_completed_total", "complete"))
	require.Equal(t, float64(0), counter(t, r.m, "gttsplit_runs_open"), "the gauge does not drift")
	st = b.state(t, fx.origin.RunID)
	require.Equal(t, 2, st.Splits)
	require.Equal(t, string(fx.want), st.Reported)
}

// TestServiceSharedConsumerIntegration runs two Services on one durable
// consumer, as two aggregators share the work, and publishes 30 runs
// interleaved: both take part (their writes of the same runs conflict and
// are re-applied), each run gets exactly one split, from one of them, and
// it is exactly right (as written, as the split event, in the bucket).
func TestServiceSharedConsumerIntegration(t *testing.T) {
	skipShort(t)
	const n = 30
	fxs := []fixture{loadFixture(t, fixture4B), loadFixture(t, fixture27B)}
	runs := genRuns(t, n, fxs...)
	b := startBroker(t)
	const durable = "shared"
	cfg := ServiceConfig{IdleTimeout: time.Hour}
	long := func(cc *bus.ConsumerConfig) { cc.AckWait = 30 * time.Second } // no redelivery on a slow machine
	s1 := startService(t, b.url, durable, cfg, long)
	s2 := startService(t, b.url, durable, cfg, long)
	b.publish(t, interleave(runs)...)

	closed := func() int {
		ids := map[string]bool{}
		for _, s := range []*running{s1, s2} {
			s.closes.mu.Lock()
			for id := range s.closes.runs {
				ids[id] = true
			}
			s.closes.mu.Unlock()
		}
		return len(ids)
	}
	eventually(t, "every run closed", func() bool { return closed() == n })
	b.waitAcked(t, durable)
	s1.stop()
	s2.stop()

	f1 := counter(t, s1.m, "gttsplit_events_folded_total")
	f2 := counter(t, s2.m, "gttsplit_events_folded_total")
	t.Logf("folded: %v and %v; conflicts re-applied: %v and %v", f1, f2,
		counter(t, s1.m, "gttsplit_state_conflicts_total"), counter(t, s2.m, "gttsplit_state_conflicts_total"))
	n1, _ := s1.closes.count()
	n2, _ := s2.closes.count()
	t.Logf("splits written: %d and %d for %d runs; redelivered: %v and %v", n1, n2, n,
		counter(t, s1.m, "gttsplit_events_redelivered_total"), counter(t, s2.m, "gttsplit_events_redelivered_total"))
	require.Positive(t, f1, "the first service took part")
	require.Positive(t, f2, "the second service took part")
	require.Zero(t, counter(t, s1.m, "gttsplit_state_persist_errors_total")+counter(t, s2.m, "gttsplit_state_persist_errors_total"))

	// Each run was closed once, by one of them, with its final split: none
	// was closed early while the other still held some of its events.
	require.Equal(t, n, n1+n2, "one split per run")
	for _, s := range []*running{s1, s2} {
		for _, g := range runs {
			for _, r := range s.closes.of(g.o.RunID) {
				js, err := split.JSON(r)
				require.NoError(t, err)
				require.Equal(t, string(wantFor(t, g)), string(js), g.o.RunID)
			}
		}
	}
	last := lastSplits(t, b)
	for _, g := range runs {
		want := wantFor(t, g)
		st := b.state(t, g.o.RunID)
		require.True(t, st.Closed, g.o.RunID)
		require.Equal(t, string(want), st.Reported, g.o.RunID)
		r, ok := last[g.o.RunID]
		require.True(t, ok, "no split event of %s", g.o.RunID)
		js, err := split.JSON(r)
		require.NoError(t, err)
		require.Equal(t, string(want), string(js), g.o.RunID)
	}
}

// wantFor is the split of a generated run: its fixture's, under its own
// id, host and lane.
func wantFor(t testing.TB, g genRun) []byte {
	t.Helper()
	r := g.fx.report
	var c split.Report
	b, err := json.Marshal(r)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &c))
	c.Run.ID, c.Run.Host, c.Run.Lane = g.o.RunID, g.o.Host, g.o.Lane
	js, err := split.JSON(c)
	require.NoError(t, err)
	return js
}

// lastSplits returns, per run, the split event with the highest n on
// gttsplit.split.>.
func lastSplits(t testing.TB, b *testBroker) map[string]split.Report {
	t.Helper()
	out := map[string]split.Report{}
	ns := map[string]int{}
	for _, m := range b.streamMsgs(t, "gttsplit.split.>") {
		d, err := events.DecodeBytes(m.Data())
		require.NoError(t, err)
		require.NotNil(t, d.Split)
		if n, ok := ns[d.Origin.RunID]; !ok || d.SplitN > n {
			ns[d.Origin.RunID], out[d.Origin.RunID] = d.SplitN, *d.Split
		}
	}
	return out
}

// exportMsgs returns the stream's messages as bus.Msg values (through an
// ordered consumer: acknowledging them is a no-op), in stream order.
func exportMsgs(t testing.TB, b *testBroker) []bus.Msg {
	t.Helper()
	var out []bus.Msg
	_, err := bus.Export(testCtx(t), b.js, bus.DefaultStream, bus.Range{Subjects: []string{"gttsplit.run.>", "gttsplit.log.>", "gttsplit.fdinfo.>"}}, func(m bus.Msg) error {
		out = append(out, m)
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestServiceConflictIntegration drives two Services by hand through the
// race the compare-and-set is for: both fold parts of one run from the
// same stored state; the second write loses, re-reads and re-applies its
// events; the run closes complete with the replay's split. Then the first
// Service, still holding its stale copy, reaches the idle timeout: it
// must not close the run again as incomplete from that copy.
func TestServiceConflictIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	b.publish(t, fx.wires...)
	msgs := exportMsgs(t, b)
	require.Len(t, msgs, len(fx.wires))

	clk := newFakeClock()
	ctx := testCtx(t)
	newSvc := func() (*Service, *metrics, *closes) {
		_, js := connectJS(t, b.url)
		m, c := newMetrics(), newCloses()
		s, err := NewService(ctx, js, ServiceConfig{Fold: foldOptions(t), IdleTimeout: time.Minute, Now: clk.now, OnClose: c.add}, m, testLogger(t))
		require.NoError(t, err)
		return s, m, c
	}
	s1, m1, c1 := newSvc()
	s2, m2, c2 := newSvc()

	// Both start from the same stored state: the first few events.
	k := 4
	for _, m := range msgs[:k] {
		require.NoError(t, s1.Handle(ctx, m))
	}
	s1.Flush(ctx)
	for _, m := range msgs[k : k+1] {
		require.NoError(t, s2.Handle(ctx, m)) // s2 loads the stored state
	}
	// s1 folds the middle, s2 the rest; s1 writes first.
	mid := len(msgs) / 2
	for _, m := range msgs[k+1 : mid] {
		require.NoError(t, s1.Handle(ctx, m))
	}
	for _, m := range msgs[mid:] {
		require.NoError(t, s2.Handle(ctx, m))
	}
	s1.Flush(ctx)
	s2.Flush(ctx) // conflicts, re-applies, closes
	require.Equal(t, float64(1), counter(t, m2, "gttsplit_state_conflicts_total"))
	require.Zero(t, counter(t, m1, "gttsplit_state_persist_errors_total")+counter(t, m2, "gttsplit_state_persist_errors_total"))
	got := c2.of(fx.origin.RunID)
	require.Len(t, got, 1)
	js, err := split.JSON(got[0])
	require.NoError(t, err)
	require.Equal(t, string(fx.want), string(js))

	// s1 still holds its copy of the run, last written before s2's.
	clk.advance(2 * time.Minute)
	s1.Flush(ctx)
	s2.Flush(ctx)
	n, _ := c1.count()
	require.Zero(t, n, "the stale copy wrote a split: %+v", c1.of(fx.origin.RunID))
	st := b.state(t, fx.origin.RunID)
	require.True(t, st.Closed)
	require.Equal(t, 1, st.Splits)
	require.Equal(t, string(fx.want), st.Reported)
	rep, ok, err := s1.Snapshot(ctx, fx.origin.RunID)
	require.NoError(t, err)
	require.True(t, ok)
	js, err = split.JSON(rep)
	require.NoError(t, err)
	require.Equal(t, string(fx.want), string(js), "the snapshot is the stored split")
	require.GreaterOrEqual(t, counter(t, m1, "gttsplit_runs_open"), float64(0))
}

// TestServiceAckFloorIntegration: a finished run is closed only once the
// consumer's ack floor reached its run-finished message (every event
// before it is durable), and Drain closes a finished run that never
// settles, so a stopping aggregator writes what finished.
func TestServiceAckFloorIntegration(t *testing.T) {
	skipShort(t)
	fx4, fx27 := loadFixture(t, fixture4B), loadFixture(t, fixture27B)
	b := startBroker(t)
	b.publish(t, fx4.wires...)
	b.publish(t, fx27.wires...)
	msgs := exportMsgs(t, b)
	require.Len(t, msgs, len(fx4.wires)+len(fx27.wires))
	fin4 := msgs[fx4.finishedIndex(t)].Metadata().StreamSeq

	var floor atomic.Uint64
	ctx := testCtx(t)
	_, js := connectJS(t, b.url)
	m, c := newMetrics(), newCloses()
	s, err := NewService(ctx, js, ServiceConfig{Fold: foldOptions(t), IdleTimeout: time.Hour, OnClose: c.add,
		AckFloor: func(context.Context) (uint64, error) { return floor.Load(), nil }}, m, testLogger(t))
	require.NoError(t, err)
	for _, msg := range msgs[:len(fx4.wires)] {
		require.NoError(t, s.Handle(ctx, msg))
	}
	s.Flush(ctx)
	floor.Store(fin4 - 1)
	s.Flush(ctx)
	n, _ := c.count()
	require.Zero(t, n, "closed before the events ahead of run-finished were acknowledged")
	require.Equal(t, float64(1), counter(t, m, "gttsplit_runs_open"))

	floor.Store(fin4)
	s.Flush(ctx)
	got := c.of(fx4.origin.RunID)
	require.Len(t, got, 1)
	js4, err := split.JSON(got[0])
	require.NoError(t, err)
	require.Equal(t, string(fx4.want), string(js4))

	// The 27B run finishes, the floor never reaches it: Drain closes it.
	for _, msg := range msgs[len(fx4.wires):] {
		require.NoError(t, s.Handle(ctx, msg))
	}
	s.Flush(ctx)
	n, _ = c.count()
	require.Equal(t, 1, n)
	s.Drain(ctx)
	got = c.of(fx27.origin.RunID)
	require.Len(t, got, 1)
	js27, err := split.JSON(got[0])
	require.NoError(t, err)
	require.Equal(t, string(fx27.want), string(js27))
	require.Equal(t, float64(0), counter(t, m, "gttsplit_runs_open"))
}
