package runtable_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/fleet"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs an embedded nats-server")
	}
}

func testLogger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
}

// closes records the splits a table wrote, per run, in order.
type closes struct {
	mu   sync.Mutex
	runs map[string][]split.Report
	n    int
}

func newCloses() *closes { return &closes{runs: map[string][]split.Report{}} }

func (c *closes) add(id string, r split.Report) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs[id] = append(c.runs[id], r)
	c.n++
}

// count returns the splits written and the distinct runs they are of.
func (c *closes) count() (splits, runs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, len(c.runs)
}

func (c *closes) of(id string) []split.Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]split.Report(nil), c.runs[id]...)
}

// table is a run table and its fleet member on a connection of their own,
// wired as `aggregator serve` wires them.
type table struct {
	t      testing.TB
	tbl    *runtable.Table
	member *fleet.Member
	nc     *nats.Conn
	m      *runtable.Metrics
	closes *closes
	parts  int
	cancel context.CancelFunc
	done   chan struct{}
}

// testLease is the lease time to live of the tests: a crashed table's
// partitions go to the next one that soon.
const testLease = 3 * time.Second

// startTable starts a table of group on its own connection to url. cfg's
// fold, stream, group, partitions, OnClose and metrics are filled in.
func startTable(t testing.TB, url, group string, cfg runtable.Config, lease ...time.Duration) *table {
	t.Helper()
	return startTableLog(t, url, group, cfg, testLogger(t), lease...)
}

// startTableLog is startTable logging to log.
func startTableLog(t testing.TB, url, group string, cfg runtable.Config, log zerolog.Logger, lease ...time.Duration) *table {
	t.Helper()
	nc, js := rt.Connect(t, url)
	ctx := rt.Ctx(t)
	lay, err := bus.EnsurePartitioned(ctx, js, bus.DefaultStream, 0, 1, testLogger(t))
	require.NoError(t, err)
	kv, err := runtable.EnsureBucket(ctx, js, 1, testLogger(t))
	require.NoError(t, err)
	r := &table{t: t, nc: nc, m: runtable.NewMetrics(), closes: newCloses(), parts: lay.Partitions, done: make(chan struct{})}
	cfg.Fold = rt.FoldOptions(t)
	cfg.Stream, cfg.Consumer.Durable, cfg.Partitions, cfg.Legacy = bus.DefaultStream, group, lay.Partitions, lay.Legacy
	cfg.OnClose, cfg.Metrics = r.closes.add, r.m
	if cfg.Consumer.AckWait == 0 {
		cfg.Consumer.AckWait = 2 * time.Second
	}
	r.tbl, err = runtable.New(ctx, js, kv, cfg, log)
	require.NoError(t, err)
	r.member, err = fleet.Join(ctx, js, fleet.Config{Group: group, Partitions: lay.Partitions, Bucket: runtable.Bucket, KV: kv,
		LeaseTTL: append(lease, testLease)[0], Heartbeat: 100 * time.Millisecond, Step: lay.Partitions}, r.tbl, log)
	require.NoError(t, err)
	mctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); r.member.Run(mctx) }()
	t.Cleanup(r.stop)
	return r
}

// owned is the number of partitions the table holds.
func (r *table) owned() int {
	view, _ := r.member.View()
	n := 0
	for _, v := range view {
		if v.Mine {
			n++
		}
	}
	return n
}

// waitOwns waits until the table holds n partitions.
func (r *table) waitOwns(n int) {
	r.t.Helper()
	rt.Eventually(r.t, "the table to own its partitions", func() bool { return r.owned() == n })
}

// stop is the graceful stop: the member hands every partition over
// (written, acknowledged, given back).
func (r *table) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	<-r.done
	r.tbl.Close()
}

// crash is the abrupt stop: the connection goes away first, so nothing is
// written, acknowledged or given back (the leases expire).
func (r *table) crash() {
	r.nc.Close()
	r.stop()
}

// counter reads a counter or gauge (of a vector: the one with the given
// label values) from the table's registry.
func counter(t testing.TB, m *runtable.Metrics, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
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

// fakeClock is the table's injected clock.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 11, 7, 15, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// kvBytes returns the messages and bytes of the state bucket's stream.
func kvBytes(t testing.TB, b *rt.Broker) (uint64, uint64) {
	t.Helper()
	s, err := b.JS.Stream(rt.Ctx(t), "KV_"+runtable.Bucket)
	require.NoError(t, err)
	info, err := s.Info(rt.Ctx(t))
	require.NoError(t, err)
	return info.State.Msgs, info.State.Bytes
}

// getKey reads a key of the state bucket (jetstream.ErrKeyNotFound when
// it is not there).
func getKey(t testing.TB, b *rt.Broker, key string) error {
	t.Helper()
	kv, err := b.JS.KeyValue(rt.Ctx(t), runtable.Bucket)
	require.NoError(t, err)
	_, err = kv.Get(rt.Ctx(t), key)
	return err
}

var _ = jetstream.ErrKeyNotFound

type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
