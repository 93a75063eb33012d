package aggregator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// TestServeSinkBacklogLosesNothingIntegration: a sink that cannot keep up
// (here the JSON sink, failing until the test lets it write) while more
// runs close than its queue holds (sinks.max_pending 2) gets every run's
// split once it can write again, while the aggregator keeps running: the
// splits past the queue are deferred (run ids only) and read back from the
// state bucket in their turn, not dropped until a restart.
func TestServeSinkBacklogLosesNothingIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	cfg := testConfig(t, b.url)
	cfg.Sinks.MaxPending = 2
	cfg.Sinks.Retry.MaxBackoff = 20 * time.Millisecond
	cfg.HTTP.Listen = "127.0.0.1:0"
	const n = 30
	runs := genRuns(t, n, fx)
	// Every run's document goes under a directory named after its host:
	// a file in its place makes each write fail (a transient error).
	dir := cfg.Sinks.JSON.Dir
	hosts := map[string]bool{}
	for _, r := range runs {
		hosts[r.o.Host] = true
	}
	for h := range hosts {
		require.NoError(t, os.WriteFile(filepath.Join(dir, h), nil, 0o644))
	}
	s := startServe(t, cfg, ServeOptions{})
	for _, r := range runs {
		b.publish(t, r.wires...)
	}
	eventually(t, "every run closed", func() bool { _, c := s.closes.count(); return c == n })
	metric := func(name string) int {
		v := metricValue(httpGet(t, s.http, "/metrics", http.StatusOK), name)
		if v == "" {
			return 0
		}
		x, err := strconv.Atoi(v)
		require.NoError(t, err, "%s %q", name, v)
		return x
	}
	require.Greater(t, metric(`gttsplit_sink_deferred_total{sink="json"}`), 0, "the queue was full")
	for h := range hosts {
		require.NoError(t, os.Remove(filepath.Join(dir, h)))
	}

	eventually(t, "every split in splits.jsonl", func() bool {
		seen := map[string]bool{}
		for _, l := range sinkLines(t, dir) {
			seen[l.id] = true
		}
		return len(seen) == n
	})
	lines := sinkLines(t, dir)
	require.Len(t, lines, n, "each split appended once")
	for _, l := range lines {
		want, err := split.JSON(s.closes.of(l.id)[0])
		require.NoError(t, err)
		require.Equal(t, string(compact(t, want)), string(l.raw), "run %s: the split written", l.id)
	}
	deferred := metric(`gttsplit_sink_deferred_total{sink="json"}`)
	require.Equal(t, deferred, metric(`gttsplit_sink_requeued_total{sink="json"}`), "every deferred split read back")
	require.Zero(t, metric(`gttsplit_sink_errors_total{outcome="dropped",sink="json"}`))
	// And the runs' states stop asking for a re-send.
	eventually(t, "no split pending", func() bool {
		for _, r := range runs {
			if b.state(t, r.o.RunID).SinksPending {
				return false
			}
		}
		return true
	})
	require.NoError(t, s.stop(t))
}

// TestServiceReloadSplit: a deferred split is read back while its run is
// closed and pending; not once the run re-opened, nor when its partition
// is not this service's.
func TestServiceReloadSplitIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	stuck := new(sinktest.Memory)
	block := make(chan struct{})
	stuck.Block(block)
	fan, err := sinks.NewFanout(sinks.Settings{Logger: testLogger(t)}, sinks.FanoutConfig{}, sinks.Target{Name: "mem", Sink: stuck})
	require.NoError(t, err)
	defer func() {
		close(block)
		require.NoError(t, fan.Close(context.Background()))
	}()
	a := startService(t, b.url, "reload", ServiceConfig{IdleTimeout: time.Hour, Sinks: fan, Deliveries: newDeliveries(1)})
	b.publish(t, fx.wires...)
	eventually(t, "the split is written", func() bool { n, _ := a.closes.count(); return n >= 1 })
	id := fx.origin.RunID
	ctx := testCtx(t)

	rep, ok, err := a.svc.reloadSplit(ctx, "mem", id)
	require.NoError(t, err)
	require.True(t, ok, "closed, pending")
	got, err := split.JSON(rep)
	require.NoError(t, err)
	require.Equal(t, string(fx.want), string(got))

	_, ok, err = a.svc.reloadSplit(ctx, "mem", "no-such-run")
	require.NoError(t, err)
	require.False(t, ok)

	// A service owning partitions reads back only the splits of the
	// partitions it took: another owner re-sends the others.
	nc, js := connectJS(t, b.url)
	defer nc.Close()
	ps, err := NewService(ctx, js, ServiceConfig{Fold: foldOptions(t), Partitions: 4}, nil, testLogger(t))
	require.NoError(t, err)
	defer ps.closeIndex()
	_, ok, err = ps.reloadSplit(ctx, "mem", id)
	require.NoError(t, err)
	require.False(t, ok, "partition not owned")
	require.NoError(t, ps.Acquire(ctx, ps.partOf(id)))
	_, ok, err = ps.reloadSplit(ctx, "mem", id)
	require.NoError(t, err)
	require.True(t, ok, "partition owned")
	ps.Release(ctx, ps.partOf(id))
	_, ok, err = ps.reloadSplit(ctx, "mem", id)
	require.NoError(t, err)
	require.False(t, ok, "partition released")

	// Re-opened (a late event): nothing to re-send, its next close does.
	st := b.state(t, id)
	st.Closed = false
	raw, err := MarshalState(st)
	require.NoError(t, err)
	kv, err := b.js.KeyValue(ctx, StateBucket)
	require.NoError(t, err)
	_, err = kv.Put(ctx, stateKey(id), raw)
	require.NoError(t, err)
	_, ok, err = a.svc.reloadSplit(ctx, "mem", id)
	require.NoError(t, err)
	require.False(t, ok, "re-opened")
	a.stop()
}

// TestServiceResendsWhatASinkDroppedIntegration: past even its deferred
// ids' cap a sink drops splits; once it caught up, the service reads the
// pending ones back from the state bucket and sends them again, without a
// restart: every run without partitions, and with them the runs of the
// partitions it owns (found by their open markers).
func TestServiceResendsWhatASinkDroppedIntegration(t *testing.T) {
	skipShort(t)
	for _, parts := range []int{0, 4} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) { resendsWhatASinkDropped(t, parts) })
	}
}

func resendsWhatASinkDropped(t *testing.T, parts int) {
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	mem := new(sinktest.Memory)
	block := make(chan struct{})
	mem.Block(block)
	deliv := newDeliveries(1)
	var svc atomic.Pointer[Service]
	reload := func(ctx context.Context, sink, id string) (split.Report, bool, error) {
		s := svc.Load()
		if s == nil {
			return split.Report{}, false, errors.New("no service yet")
		}
		return s.reloadSplit(ctx, sink, id)
	}
	var counts sinks.Counters
	obs := sinks.ObserverFunc(func(e sinks.Event) { counts.Observe(e); deliv.Observe(e) })
	fan, err := sinks.NewFanout(sinks.Settings{Logger: testLogger(t)},
		sinks.FanoutConfig{MaxPending: 1, MaxDeferred: 1, Reload: reload, Observer: obs}, sinks.Target{Name: "mem", Sink: mem})
	require.NoError(t, err)
	a := startService(t, b.url, "overflow", ServiceConfig{IdleTimeout: time.Hour, Sinks: fan, Deliveries: deliv, Partitions: parts})
	svc.Store(a.svc)
	for p := range parts {
		require.NoError(t, a.svc.Acquire(testCtx(t), p))
	}
	const n = 8
	runs := genRuns(t, n, fx)
	for _, r := range runs {
		b.publish(t, r.wires...)
	}
	eventually(t, "every run closed", func() bool { _, c := a.closes.count(); return c == n })
	require.NotZero(t, counts.Snapshot()["mem"].Dropped, "the sink dropped splits")
	close(block)
	eventually(t, "every split reached the sink", func() bool { return len(mem.Runs()) == n })
	eventually(t, "no split pending", func() bool {
		for _, r := range runs {
			if b.state(t, r.o.RunID).SinksPending {
				return false
			}
		}
		return true
	})
	a.stop()
	require.NoError(t, fan.Close(context.Background()))
	for _, r := range runs {
		want, err := split.JSON(a.closes.of(r.o.RunID)[0])
		require.NoError(t, err)
		got, err := split.JSON(mem.Runs()[r.o.RunID])
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "run %s", r.o.RunID)
	}
}
