package runtable_test

import (
	"context"
	"fmt"
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

	"github.com/gttsplit/gttsplit/internal/app/aggregator"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/fleet"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/split"
)

func TestMain(m *testing.M) { natstest.VerifyTestMain(m) }

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

// table is an aggregator (aggregator.Node: built and stopped as serve
// builds and stops it) on a connection of its own, whose run table and
// fleet member the test looks at.
type table struct {
	t      testing.TB
	node   *aggregator.Node
	tbl    *runtable.Table
	member *fleet.Member
	nc     *nats.Conn
	m      *runtable.Metrics
	closes *closes
	parts  int
}

// The leases of the tests' tables. A table no test kills holds
// steadyLease: far longer than a renewal takes on a loaded machine under
// -race, so its partitions never move while the test runs (a partition
// that moved is folded again by its next owner: the test would see a
// lease lost, not what it tests). A table a test kills (crash, a frozen
// connection) holds crashLease, so that its partitions go to the next
// table that soon; the waits for that take crashLease more (takeover).
const (
	steadyLease = 20 * time.Second
	crashLease  = 5 * time.Second
)

// takeover waits, for crashLease and rt.WaitFor, until cond holds: what a
// table does once a killed table's leases ran out.
func takeover(t testing.TB, what string, cond func() bool) {
	t.Helper()
	rt.EventuallyWithin(t, what, crashLease+rt.WaitFor, cond)
}

// duplicatesWithin checks that what the table counted as duplicates
// since dups0 (redeliveries since red0) is the n events a test sent
// again: at least n, and no more than n and the redeliveries (an event
// whose acknowledgement came late on a busy machine is delivered again,
// and is a duplicate again).
func duplicatesWithin(t testing.TB, m *runtable.Metrics, dups0, red0 float64, n int) {
	t.Helper()
	dups := counter(t, m, "gttsplit_events_duplicate_total") - dups0
	red := counter(t, m, "gttsplit_events_redelivered_total") - red0
	require.GreaterOrEqual(t, dups, float64(n), "every event sent again is a duplicate")
	require.LessOrEqual(t, dups, float64(n)+red, "duplicates beyond the events sent again and their redeliveries (%v)", red)
}

// tableConfig is what a test sets of its table's aggregator; the rest is
// config.DefaultAggregator()'s.
type tableConfig struct {
	idle  time.Duration        // idle_timeout
	now   func() time.Time     // the table's clock (nil: time.Now)
	store runtable.StoreConfig // store.* (zero: keep everything)
	// consumer is the run table's consumer.* keys; a zero field is the
	// tests': ack_wait 2s (a crashed table's events come again soon),
	// checkpoint_interval 500ms, max_ack_pending 512.
	consumer runtable.ConsumerConfig
	// sinks opens the fanout (aggregator.ServeOptions.Sinks; nil: no
	// sink), shutdown bounds its close at stop (zero: 20s).
	sinks    func(sinks.Settings, sinks.FanoutConfig) (*sinks.Fanout, error)
	shutdown time.Duration
	// edit, if set, changes the aggregator's configuration last (keys
	// no other field sets).
	edit func(*config.Aggregator)
	// http, if set, has the table serve HTTP on a loopback port and is
	// told its address.
	http func(addr string)
}

// memSinks opens a fanout over one sink, "mem", with the fanout config
// the aggregator wires, changed by edit (if not nil).
func memSinks(s sinks.Sink, edit func(*sinks.FanoutConfig)) func(sinks.Settings, sinks.FanoutConfig) (*sinks.Fanout, error) {
	return func(set sinks.Settings, fc sinks.FanoutConfig) (*sinks.Fanout, error) {
		if edit != nil {
			edit(&fc)
		}
		return sinks.NewFanout(set, fc, sinks.Target{Name: "mem", Sink: s})
	}
}

// startTable starts a table of group on its own connection to url, with
// leases of lease (steadyLease when none is given).
func startTable(t testing.TB, url, group string, tc tableConfig, lease ...time.Duration) *table {
	t.Helper()
	return startTableLog(t, url, group, tc, testLogger(t), lease...)
}

// startTableLog is startTable logging to log.
func startTableLog(t testing.TB, url, group string, tc tableConfig, log zerolog.Logger, lease ...time.Duration) *table {
	t.Helper()
	cfg := config.DefaultAggregator()
	cfg.NATS.URL, cfg.HTTP.Listen, cfg.Embedded.Store = url, "", t.TempDir()
	cfg.Consumer.Fleet = fleet.Config{Group: group, LeaseTTL: append(lease, steadyLease)[0]}
	c := runtable.ConsumerConfig{AckWait: 2 * time.Second, CheckpointInterval: 500 * time.Millisecond, MaxAckPending: 512, Lanes: tc.consumer.Lanes}
	if tc.consumer.AckWait > 0 {
		c.AckWait = tc.consumer.AckWait
	}
	if tc.consumer.CheckpointInterval > 0 {
		c.CheckpointInterval = tc.consumer.CheckpointInterval
	}
	if tc.consumer.MaxAckPending > 0 {
		c.MaxAckPending = tc.consumer.MaxAckPending
	}
	cfg.Consumer.Table = c
	cfg.IdleTimeout, cfg.Store, cfg.ShutdownTimeout = tc.idle, tc.store, 20*time.Second
	if tc.shutdown > 0 {
		cfg.ShutdownTimeout = tc.shutdown
	}
	if tc.edit != nil {
		tc.edit(&cfg)
	}
	r := &table{t: t, closes: newCloses()}
	opt := aggregator.ServeOptions{OnClose: r.closes.add, Now: tc.now, Sinks: tc.sinks,
		Heartbeat: 100 * time.Millisecond, Step: 1024}
	if tc.http != nil {
		cfg.HTTP.Listen, opt.HTTPReady = "127.0.0.1:0", tc.http
	}
	n, err := aggregator.Open(rt.Ctx(t), cfg, opt, log)
	require.NoError(t, err)
	n.Start(context.Background())
	r.node, r.tbl, r.member, r.nc, r.m, r.parts = n, n.Table(), n.Member(), n.Conn(), n.Metrics(), n.Layout().Partitions
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

// waitOwns waits until the table holds n partitions (those of a killed
// table once its leases ran out) and has loaded each: the member holds a
// lease while the table still loads its partition's runs (a partition
// counts in gttsplit_partitions_owned once its load is done).
//
// The wait ends with a failure only when the table took no lease it had
// not held before and loaded no partition more for crashLease+rt.WaitFor:
// on a loaded machine (a replicated bucket's writes, each partition's
// consumer made or looked up) taking every partition may take longer than
// that, one after another, and a broker that answered no renewal for a
// lease's time to live takes the lease away (the member takes it again: a
// new lease, progress, though fewer are held than before; more than 4
// leases taken a partition fail). The failure says which partitions the
// table did not take and who it saw holding them.
func (r *table) waitOwns(n int) {
	r.t.Helper()
	best, deadline := -1, time.Now()
	mine, takes := map[int]bool{}, 0
	for {
		owned, gauge := r.owned(), int(counter(r.t, r.m, "gttsplit_partitions_owned"))
		if owned == n && gauge == n {
			return
		}
		view, _ := r.member.View()
		for _, v := range view {
			if v.Mine && !mine[v.Partition] {
				takes++
				deadline = time.Now().Add(crashLease + rt.WaitFor)
			}
			mine[v.Partition] = v.Mine
		}
		if owned+gauge > best {
			best, deadline = owned+gauge, time.Now().Add(crashLease+rt.WaitFor)
		}
		if takes > 4*len(view) {
			r.t.Fatalf("the table took %d leases of %d partitions: they keep being lost (%d held now, of %d to hold)", takes, len(view), owned, n)
		}
		if time.Now().After(deadline) {
			view, members := r.member.View()
			var missing []string
			for _, v := range view {
				if !v.Mine {
					missing = append(missing, fmt.Sprintf("%d (owner %q)", v.Partition, v.Owner))
				}
			}
			r.t.Fatalf("timed out waiting for the table to own its partitions: %d of %d held, %d counted owned, none more for %v; not held: %v; live members: %v",
				owned, n, gauge, crashLease+rt.WaitFor, missing, members)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop is the graceful stop: the sinks close, the member hands every
// partition over (written, acknowledged, given back). Later calls do
// nothing.
func (r *table) stop() { _ = r.node.Stop(context.Background()) }

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
