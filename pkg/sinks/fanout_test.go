package sinks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// clock records every wait. With hold set, each Sleep blocks until the
// test calls release (or the sleep's ctx ends); otherwise it returns at
// once.
type clock struct {
	hold    bool
	mu      sync.Mutex
	slept   []time.Duration
	entered chan time.Duration
	rel     chan struct{}
}

func newClock(hold bool) *clock {
	return &clock{hold: hold, entered: make(chan time.Duration, 100), rel: make(chan struct{})}
}

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.slept = append(c.slept, d)
	c.mu.Unlock()
	if !c.hold {
		return ctx.Err()
	}
	c.entered <- d
	select {
	case <-c.rel:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *clock) Slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.slept...)
}

// waitSleep waits until a worker is sleeping.
func (c *clock) waitSleep(t *testing.T) {
	t.Helper()
	select {
	case <-c.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no worker went to sleep")
	}
}

func (c *clock) release() { c.rel <- struct{}{} }

// events collects a Fanout's events.
type events struct {
	ch chan sinks.Event
}

func newEvents() *events { return &events{ch: make(chan sinks.Event, 1000)} }

func (e *events) Observe(ev sinks.Event) { e.ch <- ev }

// next returns the next event of sink name with outcome o, skipping others.
func (e *events) next(t *testing.T, name string, o sinks.Outcome) sinks.Event {
	t.Helper()
	for {
		select {
		case ev := <-e.ch:
			if ev.Sink == name && ev.Outcome == o {
				return ev
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s event from %s", o, name)
		}
	}
}

func newFanout(t *testing.T, c *clock, cfg sinks.FanoutConfig, targets ...sinks.Target) *sinks.Fanout {
	t.Helper()
	if cfg.Rand == nil {
		cfg.Rand = func() float64 { return 0.5 }
	}
	set := sinks.Settings{Logger: zerolog.New(zerolog.NewTestWriter(t))}
	if c != nil {
		set.Sleep = c.Sleep
	}
	f, err := sinks.NewFanout(set, cfg, targets...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // never wait in cleanup
		_ = f.Close(ctx)
	})
	return f
}

func TestFanoutConformance(t *testing.T) {
	t.Parallel()
	sinktest.Conformance(t, func(t *testing.T) sinks.Sink {
		return newFanout(t, newClock(false), sinks.FanoutConfig{},
			sinks.Target{Name: "a", Sink: &sinktest.Memory{}},
			sinks.Target{Name: "b", Sink: &sinktest.Memory{}})
	})
}

func TestFanoutRetriesTransientWithBackoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClock(false)
	m := &sinktest.Memory{}
	m.FailNext(sinktest.ErrInjected, sinktest.ErrInjected, sinktest.ErrInjected)
	ev := newEvents()
	f := newFanout(t, c, sinks.FanoutConfig{Observer: ev}, sinks.Target{Name: "m", Sink: m})

	require.NoError(t, f.Write(ctx, sinktest.Report("run-1")))
	require.NoError(t, f.Flush(ctx))
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, c.Slept())
	require.Len(t, m.Reports(), 1)
	for i := 1; i <= 3; i++ {
		e := ev.next(t, "m", sinks.OutcomeRetrying)
		require.Equal(t, i, e.Attempt)
		require.ErrorIs(t, e.Err, sinktest.ErrInjected)
		require.Equal(t, "run-1", e.RunID)
	}
	require.Equal(t, 4, ev.next(t, "m", sinks.OutcomeDelivered).Attempt)
	require.Equal(t, map[string]int{"m": 0}, f.Pending())
}

func TestFanoutBackoffResetsAfterSuccess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClock(false)
	m := &sinktest.Memory{}
	f := newFanout(t, c, sinks.FanoutConfig{}, sinks.Target{Name: "m", Sink: m})
	m.FailNext(sinktest.ErrInjected, sinktest.ErrInjected)
	require.NoError(t, f.Write(ctx, sinktest.Report("run-1")))
	require.NoError(t, f.Flush(ctx))
	m.FailNext(sinktest.ErrInjected)
	require.NoError(t, f.Write(ctx, sinktest.Report("run-2")))
	require.NoError(t, f.Flush(ctx))
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, time.Second}, c.Slept())
}

func TestFanoutRemoteHintHonoured(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClock(false)
	m := &sinktest.Memory{}
	m.FailNext(sinks.RetryAfter(errors.New("429"), 42*time.Second), sinks.RetryAfter(errors.New("429"), 9*time.Hour))
	f := newFanout(t, c, sinks.FanoutConfig{}, sinks.Target{Name: "m", Sink: m})
	require.NoError(t, f.Write(ctx, sinktest.Report("run-1")))
	require.NoError(t, f.Flush(ctx))
	require.Equal(t, []time.Duration{42 * time.Second, time.Hour}, c.Slept(), "hints honoured, capped by MaxHint")
	require.Len(t, m.Reports(), 1)
}

func TestFanoutPermanentNotRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClock(false)
	m := &sinktest.Memory{}
	m.FailNext(sinks.Permanent(errors.New("issue o/r#1: 404 Not Found")))
	ev := newEvents()
	f := newFanout(t, c, sinks.FanoutConfig{Observer: ev}, sinks.Target{Name: "m", Sink: m})
	require.NoError(t, f.Write(ctx, sinktest.Report("run-1")))
	require.NoError(t, f.Flush(ctx))
	e := ev.next(t, "m", sinks.OutcomeFailed)
	require.Equal(t, 1, e.Attempt)
	require.ErrorContains(t, e.Err, "404")
	require.Empty(t, c.Slept())
	require.Empty(t, m.Reports())
	require.Equal(t, 1, m.Attempts())
}

// TestFanoutFlushWaitsForObservers: when Flush returns, the observer has
// seen the outcome of every report (a counter read right after Flush is
// exact). The observer is slow on purpose: were outcomes observed after the
// report was settled, Flush would return while it is still counting.
func TestFanoutFlushWaitsForObservers(t *testing.T) {
	t.Parallel()
	for _, fail := range []error{nil, sinks.Permanent(errors.New("401 Bad credentials"))} {
		m := &sinktest.Memory{}
		if fail != nil {
			m.FailNext(fail)
		}
		var counts sinks.Counters
		slow := sinks.ObserverFunc(func(e sinks.Event) {
			time.Sleep(50 * time.Millisecond)
			counts.Observe(e)
		})
		f := newFanout(t, newClock(false), sinks.FanoutConfig{Observer: slow}, sinks.Target{Name: "m", Sink: m})
		require.NoError(t, f.Write(context.Background(), sinktest.Report("run-1")))
		require.NoError(t, f.Flush(context.Background()))
		c := counts.Snapshot()["m"]
		if fail != nil {
			require.Equal(t, uint64(1), c.Failed)
		} else {
			require.Equal(t, uint64(1), c.Delivered)
		}
	}
}

func TestFanoutFailingSinkDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	stuck, good := &sinktest.Memory{}, &sinktest.Memory{}
	stuck.Block(make(chan struct{})) // never released
	ev := newEvents()
	var counts sinks.Counters
	obs := sinks.ObserverFunc(func(e sinks.Event) { ev.Observe(e); counts.Observe(e) })
	f := newFanout(t, newClock(false), sinks.FanoutConfig{Observer: obs},
		sinks.Target{Name: "stuck", Sink: stuck}, sinks.Target{Name: "good", Sink: good})

	for i := range 3 {
		require.NoError(t, f.Write(context.Background(), sinktest.Report(fmt.Sprintf("run-%d", i))))
	}
	for range 3 {
		ev.next(t, "good", sinks.OutcomeDelivered)
	}
	require.Len(t, good.Reports(), 3)
	require.Equal(t, 3, f.Pending()["stuck"], "the stuck sink keeps its reports queued")

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // shutdown deadline already over
	err := f.Close(ctx)
	require.ErrorIs(t, err, sinks.ErrUndelivered)
	require.ErrorIs(t, err, context.Canceled)
	require.EqualError(t, err, "delivery cut short: context canceled\nstuck: 3 reports not delivered before close")
	require.True(t, stuck.Closed())
	require.True(t, good.Closed())
	require.Equal(t, uint64(3), counts.Snapshot()["stuck"].Dropped)
	require.Equal(t, uint64(3), counts.Snapshot()["good"].Delivered)
}

func TestFanoutKeepsReportQueuedUntilClose(t *testing.T) {
	t.Parallel()
	c := newClock(true)
	m := &sinktest.Memory{}
	for range 100 {
		m.FailNext(sinktest.ErrInjected)
	}
	ev := newEvents()
	f := newFanout(t, c, sinks.FanoutConfig{Observer: ev}, sinks.Target{Name: "m", Sink: m})
	require.NoError(t, f.Write(context.Background(), sinktest.Report("run-1")))
	for range 5 {
		c.waitSleep(t)
		require.Equal(t, map[string]int{"m": 1}, f.Pending())
		c.release()
	}
	c.waitSleep(t) // after the 6th failure

	done := make(chan error, 1)
	go func() { done <- f.Close(context.Background()) }() // no deadline at all
	// Close cut the backoff short: a 7th attempt, which fails; the drain
	// retries with a backoff of at most a second, and after the third
	// failure since Close it gives up on the sink instead of retrying until
	// the shutdown deadline.
	c.waitSleep(t)
	require.Equal(t, 7, m.Attempts())
	c.release()
	c.waitSleep(t)
	c.release()
	err := <-done
	require.Equal(t, 9, m.Attempts())
	for _, d := range c.Slept()[6:] {
		require.LessOrEqual(t, d, time.Second, "backoff while draining is capped")
	}
	require.ErrorIs(t, err, sinks.ErrUndelivered)
	require.ErrorIs(t, err, sinktest.ErrInjected)
	// The sink's last error ends the line, once, with no "sinks:" stutter.
	require.EqualError(t, err, "m: 1 report not delivered before close: "+sinktest.ErrInjected.Error())
	e := ev.next(t, "m", sinks.OutcomeDropped)
	require.Equal(t, "run-1", e.RunID)
	require.ErrorIs(t, e.Err, sinks.ErrUndelivered)
	require.ErrorIs(t, e.Err, sinktest.ErrInjected)
	require.Empty(t, m.Reports())
}

func TestFanoutCloseDeliversPending(t *testing.T) {
	t.Parallel()
	c := newClock(true)
	m := &sinktest.Memory{}
	m.FailNext(sinktest.ErrInjected, sinktest.ErrInjected)
	f := newFanout(t, c, sinks.FanoutConfig{}, sinks.Target{Name: "m", Sink: m})
	require.NoError(t, f.Write(context.Background(), sinktest.Report("run-1")))
	c.waitSleep(t)

	done := make(chan error, 1)
	go func() { done <- f.Close(context.Background()) }()
	c.waitSleep(t) // the immediate attempt at Close failed too
	c.release()
	require.NoError(t, <-done)
	require.Len(t, m.Reports(), 1, "delivered during Close")
	require.True(t, m.Closed())
	require.NoError(t, f.Close(context.Background()), "second Close")
	require.ErrorIs(t, f.Write(context.Background(), sinktest.Report("run-2")), sinks.ErrClosed)
}

func TestFanoutNewerReportSupersedesQueued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClock(true)
	m := &sinktest.Memory{}
	m.FailNext(sinktest.ErrInjected)
	f := newFanout(t, c, sinks.FanoutConfig{}, sinks.Target{Name: "m", Sink: m})

	v1 := sinktest.Report("run-1")
	require.NoError(t, f.Write(ctx, v1))
	c.waitSleep(t) // v1 failed once and waits
	v2, v3 := v1, v1
	v2.Flags = []string{"v2"}
	v3.Flags = []string{"v3"}
	require.NoError(t, f.Write(ctx, v2))
	require.NoError(t, f.Write(ctx, v3))
	require.Equal(t, map[string]int{"m": 1}, f.Pending(), "one queued report per run")
	c.release()
	require.NoError(t, f.Flush(ctx))
	require.Equal(t, []split.Report{v3}, m.Reports(), "only the newest split is written")
	require.Equal(t, 2, m.Attempts())
}

func TestFanoutQueueFullDropsOldest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newClock(true)
	m := &sinktest.Memory{}
	m.FailNext(sinktest.ErrInjected)
	ev := newEvents()
	f := newFanout(t, c, sinks.FanoutConfig{MaxPending: 2, Observer: ev}, sinks.Target{Name: "m", Sink: m})

	require.NoError(t, f.Write(ctx, sinktest.Report("run-a")))
	c.waitSleep(t) // run-a is queued again, the worker waits
	require.NoError(t, f.Write(ctx, sinktest.Report("run-b")))
	require.NoError(t, f.Write(ctx, sinktest.Report("run-c")))
	e := ev.next(t, "m", sinks.OutcomeDropped)
	require.Equal(t, "run-a", e.RunID)
	require.ErrorIs(t, e.Err, sinks.ErrQueueFull)
	c.release()
	require.NoError(t, f.Flush(ctx))
	runs := m.Runs()
	require.Len(t, runs, 2)
	require.Contains(t, runs, "run-b")
	require.Contains(t, runs, "run-c")
}

type panicSink struct{ sinktest.Memory }

func (p *panicSink) Write(ctx context.Context, r split.Report) error { panic("renderer bug") }

func TestFanoutPanickingSinkFailsPermanently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ev := newEvents()
	good := &sinktest.Memory{}
	f := newFanout(t, newClock(false), sinks.FanoutConfig{Observer: ev},
		sinks.Target{Name: "bad", Sink: &panicSink{}}, sinks.Target{Name: "good", Sink: good})
	require.NoError(t, f.Write(ctx, sinktest.Report("run-1")))
	require.NoError(t, f.Flush(ctx))
	e := ev.next(t, "bad", sinks.OutcomeFailed)
	require.ErrorContains(t, e.Err, "panicked")
	require.Len(t, good.Reports(), 1)
}

func TestFanoutConcurrentClose(t *testing.T) {
	t.Parallel()
	m := &sinktest.Memory{}
	f := newFanout(t, newClock(false), sinks.FanoutConfig{}, sinks.Target{Name: "m", Sink: m})
	require.NoError(t, f.Write(context.Background(), sinktest.Report("run-1")))
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = f.Close(context.Background()) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, m.Reports(), 1)
}

func TestNewFanoutRejectsBadTargets(t *testing.T) {
	t.Parallel()
	m := &sinktest.Memory{}
	_, err := sinks.NewFanout(sinks.Settings{}, sinks.FanoutConfig{}, sinks.Target{Name: "a", Sink: m}, sinks.Target{Name: "a", Sink: m})
	require.ErrorContains(t, err, "duplicate")
	_, err = sinks.NewFanout(sinks.Settings{}, sinks.FanoutConfig{}, sinks.Target{Sink: m})
	require.Error(t, err)
	_, err = sinks.NewFanout(sinks.Settings{}, sinks.FanoutConfig{}, sinks.Target{Name: "a"})
	require.Error(t, err)
}

// store is what a Fanout's Reload reads back: the latest report of each
// run, as the aggregator's state bucket holds it.
type store struct {
	mu    sync.Mutex
	runs  map[string]split.Report
	fail  []error // the next reloads' errors
	calls int
}

func newStore() *store { return &store{runs: map[string]split.Report{}} }

// put records r as its run's latest report and returns it.
func (s *store) put(r split.Report) split.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs[r.Run.ID] = r
	return r
}

func (s *store) drop(run string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.runs, run)
}

func (s *store) reload(ctx context.Context, sink, run string) (split.Report, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if len(s.fail) > 0 {
		err := s.fail[0]
		s.fail = s.fail[1:]
		return split.Report{}, false, err
	}
	r, ok := s.runs[run]
	return r, ok, nil
}

func (s *store) reloads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// counts sums a Fanout's outcomes per run id.
func drainEvents(ev *events) map[sinks.Outcome][]string {
	out := map[sinks.Outcome][]string{}
	for {
		select {
		case e := <-ev.ch:
			out[e.Outcome] = append(out[e.Outcome], e.RunID)
		default:
			return out
		}
	}
}

func TestFanoutQueueFullDefersAndReloads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := &sinktest.Memory{}
	block := make(chan struct{})
	m.Block(block)
	st := newStore()
	ev := newEvents()
	f := newFanout(t, newClock(false), sinks.FanoutConfig{MaxPending: 3, Reload: st.reload, Observer: ev},
		sinks.Target{Name: "m", Sink: m})

	const n = 40
	var want []string
	for i := range n {
		r := st.put(sinktest.Report(fmt.Sprintf("run-%02d", i)))
		want = append(want, r.Run.ID)
		require.NoError(t, f.Write(ctx, r))
	}
	require.Equal(t, n, f.Pending()["m"], "deferred reports count as pending")
	require.Positive(t, f.Deferred()["m"])
	close(block)
	require.NoError(t, f.Flush(ctx))
	require.Zero(t, f.Deferred()["m"])

	var got []string
	for _, r := range m.Reports() {
		got = append(got, r.Run.ID)
	}
	require.Equal(t, want, got, "every report written once, in the order given")
	out := drainEvents(ev)
	require.Empty(t, out[sinks.OutcomeDropped])
	require.NotEmpty(t, out[sinks.OutcomeDeferred])
	require.ElementsMatch(t, out[sinks.OutcomeDeferred], out[sinks.OutcomeRequeued], "each deferred report reloaded once")
	require.Equal(t, len(out[sinks.OutcomeDeferred]), st.reloads())
	require.LessOrEqual(t, len(out[sinks.OutcomeDeferred]), n-3, "at least MaxPending reports were held")
	require.Zero(t, f.Pending()["m"])
}

func TestFanoutDeferredReportIsReloadedLatest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, st, ev, f := deferringFanout(t)

	require.NoError(t, f.Write(ctx, st.put(sinktest.Report("run-a"))))
	m.inFlight(t, "run-a")
	require.NoError(t, f.Write(ctx, st.put(sinktest.Report("run-b"))))
	require.NoError(t, f.Write(ctx, st.put(sinktest.Report("run-c"))))
	require.Equal(t, "run-c", ev.next(t, "m", sinks.OutcomeDeferred).RunID)
	// A newer report of the deferred run: still deferred (the queue is
	// full); the reload gives the newest.
	newer := sinktest.Report("run-c")
	newer.Run.Command = "llama-cli -m other.gguf"
	require.NoError(t, f.Write(ctx, st.put(newer)))
	close(m.open)
	require.NoError(t, f.Flush(ctx))
	var cs []split.Report
	for _, r := range m.Reports() {
		if r.Run.ID == "run-c" {
			cs = append(cs, r)
		}
	}
	require.Len(t, cs, 1, "the deferred run is written once")
	require.Equal(t, newer.Run.Command, cs[0].Run.Command)
}

func TestFanoutDeferredReportTakesReportWhenRoom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, st, ev, f := deferringFanout(t)

	require.NoError(t, f.Write(ctx, st.put(sinktest.Report("run-a"))))
	m.inFlight(t, "run-a")
	require.NoError(t, f.Write(ctx, st.put(sinktest.Report("run-b"))))
	require.NoError(t, f.Write(ctx, st.put(sinktest.Report("run-c")))) // deferred
	require.Equal(t, "run-c", ev.next(t, "m", sinks.OutcomeDeferred).RunID)
	m.open <- struct{}{} // run-a written; run-b is taken: room for one report
	m.inFlight(t, "run-b")
	// A newer report of the deferred run-c is held: no reload needed.
	require.NoError(t, f.Write(ctx, st.put(sinktest.Report("run-c"))))
	close(m.open)
	require.NoError(t, f.Flush(ctx))
	require.Zero(t, st.reloads())
	require.Empty(t, drainEvents(ev)[sinks.OutcomeRequeued])
	require.Len(t, m.Runs(), 3)
}

func TestFanoutDeferredReportWithdrawn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, st, ev, f := deferringFanout(t)

	require.NoError(t, f.Write(ctx, st.put(sinktest.Report("run-a"))))
	m.inFlight(t, "run-a")
	for _, id := range []string{"run-b", "run-c", "run-d"} {
		require.NoError(t, f.Write(ctx, st.put(sinktest.Report(id))))
	}
	st.drop("run-d") // nothing to write for it any more
	close(m.open)
	require.NoError(t, f.Flush(ctx))
	require.Equal(t, "run-d", ev.next(t, "m", sinks.OutcomeWithdrawn).RunID)
	require.NotContains(t, m.Runs(), "run-d")
	require.Contains(t, m.Runs(), "run-c")
}

func TestFanoutReloadErrorIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newGated()
	st := newStore()
	st.fail = []error{sinktest.ErrInjected}
	ev := newEvents()
	c := newClock(false)
	f := newFanout(t, c, sinks.FanoutConfig{MaxPending: 1, Reload: st.reload, Observer: ev},
		sinks.Target{Name: "m", Sink: m})

	require.NoError(t, f.Write(ctx, st.put(sinktest.Report("run-a"))))
	m.inFlight(t, "run-a")
	require.NoError(t, f.Write(ctx, st.put(sinktest.Report("run-b"))))
	require.NoError(t, f.Write(ctx, st.put(sinktest.Report("run-c"))))
	close(m.open)
	require.NoError(t, f.Flush(ctx))
	e := ev.next(t, "m", sinks.OutcomeRetrying)
	require.Equal(t, "run-c", e.RunID)
	require.ErrorIs(t, e.Err, sinktest.ErrInjected)
	require.Len(t, m.Runs(), 3)
	require.Equal(t, []time.Duration{time.Second}, c.Slept())
}

func TestFanoutDropsPastMaxDeferred(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newGated()
	st := newStore()
	ev := newEvents()
	f := newFanout(t, newClock(false), sinks.FanoutConfig{MaxPending: 1, MaxDeferred: 2, Reload: st.reload, Observer: ev},
		sinks.Target{Name: "m", Sink: m})

	require.NoError(t, f.Write(ctx, st.put(sinktest.Report("run-a"))))
	m.inFlight(t, "run-a")
	for _, id := range []string{"run-b", "run-c", "run-d", "run-e"} {
		require.NoError(t, f.Write(ctx, st.put(sinktest.Report(id))))
	}
	e := ev.next(t, "m", sinks.OutcomeDropped)
	require.Equal(t, "run-b", e.RunID, "the oldest queued report")
	require.ErrorIs(t, e.Err, sinks.ErrQueueFull)
	close(m.open)
	require.NoError(t, f.Flush(ctx))
	require.Len(t, m.Runs(), 4)
	require.NotContains(t, m.Runs(), "run-b")
}

// gated is a Memory whose writes say when they start (entered) and wait
// for open to be closed.
type gated struct {
	sinktest.Memory
	entered chan string
	open    chan struct{}
}

func newGated() *gated { return &gated{entered: make(chan string, 1000), open: make(chan struct{})} }

func (g *gated) Write(ctx context.Context, r split.Report) error {
	g.entered <- r.Run.ID
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.Memory.Write(ctx, r)
}

// inFlight waits until the sink's worker is writing run.
func (g *gated) inFlight(t *testing.T, run string) {
	t.Helper()
	select {
	case got := <-g.entered:
		require.Equal(t, run, got)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s not written", run)
	}
}

func TestFanoutDeferredReportsSurviveAFailingSink(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newGated()
	close(m.open)
	errs := make([]error, 25)
	for i := range errs {
		errs[i] = sinktest.ErrInjected
	}
	m.FailNext(errs...)
	st := newStore()
	ev := newEvents()
	f := newFanout(t, newClock(false), sinks.FanoutConfig{MaxPending: 2, Reload: st.reload, Observer: ev},
		sinks.Target{Name: "m", Sink: m})
	for i := range 10 {
		require.NoError(t, f.Write(ctx, st.put(sinktest.Report(fmt.Sprintf("run-%d", i)))))
	}
	require.NoError(t, f.Flush(ctx))
	require.Len(t, m.Runs(), 10)
	out := drainEvents(ev)
	require.NotEmpty(t, out[sinks.OutcomeDeferred])
	require.Empty(t, out[sinks.OutcomeDropped])
	require.ElementsMatch(t, out[sinks.OutcomeDeferred], out[sinks.OutcomeRequeued],
		"each deferral ends in one reload (a reloaded report that fails again and finds no room is deferred again)")
}

// deferringFanout is a Fanout of one gated sink "m" that holds one report
// and defers the others, reloading them from a store, with its observed
// events.
func deferringFanout(t *testing.T) (*gated, *store, *events, *sinks.Fanout) {
	t.Helper()
	m, st, ev := newGated(), newStore(), newEvents()
	f := newFanout(t, newClock(false), sinks.FanoutConfig{MaxPending: 1, Reload: st.reload, Observer: ev},
		sinks.Target{Name: "m", Sink: m})
	return m, st, ev, f
}

// TestFanoutDrainHonoursRetryAfter: while Close drains, a wait the remote
// end asked for (Retry-After) is kept when it ends before Close's
// deadline, as before Close; before, the drain cut every wait to a second
// (the retry came too soon and was refused again: replay and quickstart
// ignored Retry-After, serve honoured it).
func TestFanoutDrainHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	c := newClock(true)
	m := &sinktest.Memory{}
	limited := sinks.RetryAfter(errors.New("429 Too Many Requests"), 5*time.Second)
	m.FailNext(limited, limited)
	var counts sinks.Counters
	f := newFanout(t, c, sinks.FanoutConfig{Observer: &counts}, sinks.Target{Name: "m", Sink: m})
	require.NoError(t, f.Write(context.Background(), sinktest.Report("run-1")))
	c.waitSleep(t) // the first refusal, before Close

	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.Close(ctx) }()
	// Close cut the wait short: a second attempt, refused while draining.
	c.waitSleep(t)
	require.Equal(t, 2, m.Attempts())
	require.Equal(t, []time.Duration{5 * time.Second, 5 * time.Second}, c.Slept(), "the wait the server asked for, while draining too")
	c.release()
	require.NoError(t, <-done)
	require.Equal(t, uint64(1), counts.Snapshot()["m"].Delivered)
}

// TestFanoutDrainGivesUpPastDeadline: a wait the remote end asks for
// that ends after Close's deadline is not waited for: the report is
// undelivered at once, with the server's answer as the reason.
func TestFanoutDrainGivesUpPastDeadline(t *testing.T) {
	t.Parallel()
	c := newClock(true)
	m := &sinktest.Memory{}
	refused := sinks.RetryAfter(errors.New("429 Too Many Requests"), time.Hour)
	m.FailNext(refused, refused)
	f := newFanout(t, c, sinks.FanoutConfig{}, sinks.Target{Name: "m", Sink: m})
	require.NoError(t, f.Write(context.Background(), sinktest.Report("run-1")))
	c.waitSleep(t) // the first refusal, before Close
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := f.Close(ctx) // cuts the wait short: refused again, an hour to wait
	require.EqualError(t, err, "m: 1 report not delivered before close: 429 Too Many Requests")
	require.ErrorIs(t, err, sinks.ErrUndelivered)
	require.Equal(t, []time.Duration{time.Hour}, c.Slept(), "no wait past the deadline")
	require.Equal(t, 2, m.Attempts())
}

// TestFanoutLogsRoundDelays: the retry delay of the log line is rounded
// to the millisecond (a jittered 1.246913578s is logged as 1247 ms, not
// 1246.913578), while the wait itself keeps its jitter.
func TestFanoutLogsRoundDelays(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var logs []byte
	w := zerolog.SyncWriter(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, b...)
		return len(b), nil
	}))
	c := newClock(false)
	m := &sinktest.Memory{}
	m.FailNext(sinktest.ErrInjected)
	set := sinks.Settings{Logger: zerolog.New(w), Sleep: c.Sleep}
	f, err := sinks.NewFanout(set, sinks.FanoutConfig{Retry: sinks.DefaultRetryPolicy(), Rand: func() float64 { return 0.623456789 }}, sinks.Target{Name: "m", Sink: m})
	require.NoError(t, err)
	require.NoError(t, f.Write(context.Background(), sinktest.Report("run-1")))
	require.NoError(t, f.Flush(context.Background()))
	require.NoError(t, f.Close(context.Background()))
	require.Len(t, c.Slept(), 1)
	require.NotZero(t, c.Slept()[0]%time.Millisecond, "the wait keeps its jitter")
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, string(logs), fmt.Sprintf(`"retry_in":%d,`, c.Slept()[0].Round(time.Millisecond)/time.Millisecond))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestFanoutHeldBytesBounded: with MaxPendingBytes, two blocked sinks hold
// together no more of their reports in memory than that (counted by their
// JSON size), far fewer than MaxPending; the others are deferred (only
// their run ids kept) and every report still reaches both sinks once, in
// order, none dropped.
func TestFanoutHeldBytesBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore()
	size, err := json.Marshal(st.put(sinktest.Report("run-size")))
	require.NoError(t, err)
	limit := int64(10 * len(size)) // ten reports of the two sinks' together
	var ms []*sinktest.Memory
	var targets []sinks.Target
	block := make(chan struct{})
	for _, name := range []string{"a", "b"} {
		m := &sinktest.Memory{}
		m.Block(block)
		ms = append(ms, m)
		targets = append(targets, sinks.Target{Name: name, Sink: m})
	}
	ev := newEvents()
	f := newFanout(t, newClock(false), sinks.FanoutConfig{MaxPending: 1024, MaxPendingBytes: limit, Reload: st.reload, Observer: ev}, targets...)

	const n = 100 // the events' channel takes what they are observed
	var want []string
	for i := range n {
		r := st.put(sinktest.Report(fmt.Sprintf("run-%03d", i)))
		want = append(want, r.Run.ID)
		require.NoError(t, f.Write(ctx, r))
		held := 0
		for name, p := range f.Pending() {
			held += p - f.Deferred()[name]
		}
		// Each sink may have one report in flight besides what it holds.
		require.LessOrEqual(t, held, 10+2, "reports held in memory after %d written", i+1)
		require.LessOrEqual(t, f.HeldBytes(), limit)
	}
	close(block)
	require.NoError(t, f.Flush(ctx))
	for _, m := range ms {
		var got []string
		for _, r := range m.Reports() {
			got = append(got, r.Run.ID)
		}
		require.Equal(t, want, got, "every report written once, in the order given")
	}
	out := drainEvents(ev)
	require.Empty(t, out[sinks.OutcomeDropped])
	require.Greater(t, len(out[sinks.OutcomeDeferred]), n, "most reports deferred")
	require.Zero(t, f.HeldBytes())
}

// gatedBatch is a BatchWriter that says when an attempt has its reports
// (entered) and writes them once gate is closed.
type gatedBatch struct {
	sinktest.Memory
	entered chan int
	gate    chan struct{}
}

func (g *gatedBatch) WriteBatch(ctx context.Context, rs []split.Report, keep func(split.Report) bool) ([]bool, error) {
	select {
	case g.entered <- len(rs):
	default:
	}
	<-g.gate
	kept := sinks.Kept(rs, keep)
	for i, r := range rs {
		if kept[i] {
			if err := g.Write(ctx, r); err != nil {
				return nil, err
			}
		}
	}
	return kept, nil
}

// TestFanoutHeldBytesCountInFlight: the reports an attempt has taken from
// the queue are still in memory until it ends, so MaxPendingBytes counts
// them: with a batch of reports in flight, the queue holds only what is
// left of the limit, and the rest is deferred. (Before, taking a batch
// freed its bytes: a sink that took its whole queue at each attempt made
// room for as much again, and a memory bound of ten reports held 5 in
// flight and 10 queued.) Every report is still written once, in order, and
// the count comes back to zero.
func TestFanoutHeldBytesCountInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore()
	size, err := json.Marshal(st.put(sinktest.Report("run-999"))) // as long as the others
	require.NoError(t, err)
	limit := int64(10 * len(size)) // ten reports
	g := &gatedBatch{entered: make(chan int, 1), gate: make(chan struct{})}
	ev := newEvents()
	f := newFanout(t, newClock(false), sinks.FanoutConfig{MaxPending: 1024, MaxPendingBytes: limit, Batch: 256, Reload: st.reload, Observer: ev},
		sinks.Target{Name: "batch", Sink: g})
	var once sync.Once
	release := func() { once.Do(func() { close(g.gate) }) }
	t.Cleanup(release) // before the fanout's Close, should the test fail

	var want []string
	write := func(i int) {
		r := st.put(sinktest.Report(fmt.Sprintf("run-%03d", i)))
		want = append(want, r.Run.ID)
		require.NoError(t, f.Write(ctx, r))
	}
	// The first report, alone in the queue: the attempt takes it.
	write(0)
	require.Equal(t, 1, <-g.entered, "the first attempt's batch")
	const n = 40
	for i := 1; i < n; i++ {
		write(i)
		require.LessOrEqual(t, f.HeldBytes(), limit, "after %d written", i+1)
	}
	// In memory: the one in flight and what the queue holds, ten in all.
	queuedHeld := f.Pending()["batch"] - 1 - f.Deferred()["batch"]
	require.Equal(t, 9, queuedHeld, "reports held in the queue beside the one in flight")
	require.Equal(t, limit, f.HeldBytes())

	release()
	require.NoError(t, f.Flush(ctx))
	var got []string
	for _, r := range g.Reports() {
		got = append(got, r.Run.ID)
	}
	require.Equal(t, want, got, "every report written once, in the order given")
	require.Empty(t, drainEvents(ev)[sinks.OutcomeDropped])
	require.Zero(t, f.HeldBytes())
}
