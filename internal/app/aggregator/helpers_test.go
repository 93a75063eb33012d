package aggregator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// TestMain checks that no goroutine outlives the tests. The embedded
// nats-server's goroutine that sets up a stream's source consumer (the
// partitioned stream sources the events stream) may still be winding down
// right after the server's Shutdown; it is the server's, not ours.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*stream).trySetupSourceConsumer.func3"))
}

// The recorded runs every test folds (shared fixtures, testdata/runs).
var (
	fixture4B  = filepath.Join("..", "..", "..", "testdata", "runs", "4b", "events.jsonl")
	fixture27B = filepath.Join("..", "..", "..", "testdata", "runs", "27b", "events.jsonl")
)

// waitFor bounds every poll: generous, for a loaded 2-core machine.
const waitFor = 60 * time.Second

func testLogger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(logLevel(t))
}

func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs an embedded nats-server")
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 20ms until it holds, and fails the test,
// naming what it waited for, after waitFor.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fixture is a recorded run: its events as decoded and as they go on the
// wire, and the split `aggregator replay` computes from the file.
type fixture struct {
	path    string
	origin  events.Origin
	decoded []events.Decoded
	wires   []events.Wire
	report  split.Report
	want    []byte // split.JSON(report): what `replay --format json` prints
}

func foldOptions(t testing.TB) split.Options {
	t.Helper()
	o, err := FoldOptions(config.DefaultAggregator())
	require.NoError(t, err)
	return o
}

// loadFixture reads a recorded stream with events.NewReader and replays
// the file as `aggregator replay` does (ReplayFiles, Report, split.JSON).
func loadFixture(t testing.TB, path string) fixture {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	fx := fixture{path: path}
	r := events.NewReader(f)
	for r.Next() {
		d, err := events.Decode(r.Event())
		require.NoError(t, err)
		w, err := events.ToWire(r.Event())
		require.NoError(t, err)
		fx.decoded = append(fx.decoded, d)
		fx.wires = append(fx.wires, w)
	}
	require.NoError(t, r.Err())
	require.Zero(t, r.Skipped())
	require.NotEmpty(t, fx.decoded)
	fx.origin = fx.decoded[0].Origin

	runs := NewRuns(foldOptions(t))
	st, err := ReplayFiles(runs, []string{path}, testLogger(t))
	require.NoError(t, err)
	require.Equal(t, len(fx.decoded), st.Events)
	require.Equal(t, []string{fx.origin.RunID}, runs.IDs())
	fx.report = Report(runs.Get(fx.origin.RunID))
	fx.want, err = split.JSON(fx.report)
	require.NoError(t, err)
	require.True(t, fx.report.Run.Complete, "the fixture is a complete run")
	return fx
}

// finishedIndex is the position of the run-finished event.
func (fx fixture) finishedIndex(t testing.TB) int {
	t.Helper()
	for i, d := range fx.decoded {
		if d.Finished != nil {
			return i
		}
	}
	t.Fatalf("%s has no run-finished event", fx.path)
	return -1
}

// without returns the fixture's wire events but those at the indexes
// skip, in order.
func (fx fixture) without(skip ...int) []events.Wire {
	var out []events.Wire
	for i, w := range fx.wires {
		if !slices.Contains(skip, i) {
			out = append(out, w)
		}
	}
	return out
}

// replayJSON is the split `aggregator replay` computes from a recorded
// stream holding exactly the given events, one per line.
func replayJSON(t testing.TB, wires []events.Wire) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	var buf bytes.Buffer
	for _, w := range wires {
		buf.Write(w.Data)
		buf.WriteByte('\n')
	}
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	runs := NewRuns(foldOptions(t))
	_, err := ReplayFiles(runs, []string{path}, testLogger(t))
	require.NoError(t, err)
	require.Len(t, runs.IDs(), 1)
	b, err := split.JSON(Report(runs.Get(runs.IDs()[0])))
	require.NoError(t, err)
	return b
}

// rewrite builds the event d describes again with the pkg/events
// constructors, as an event of run o: the content is the same, the id,
// source, subject and attributes follow o.
func rewrite(d events.Decoded, o events.Origin) (events.Wire, error) {
	var ev events.Wire
	build := func() (events.Wire, error) {
		switch {
		case d.Started != nil:
			info := d.Started.Info
			info.ID, info.Host, info.Lane = o.RunID, o.Host, o.Lane
			e, err := events.NewRunStarted(info, d.Started.Detail)
			if err != nil {
				return ev, err
			}
			return events.ToWire(e)
		case d.Lines != nil:
			e, err := events.NewLogLines(o, d.Lines)
			if err != nil {
				return ev, err
			}
			return events.ToWire(e)
		case d.Sample != nil:
			e, err := events.NewFDInfoSample(o, *d.Sample)
			if err != nil {
				return ev, err
			}
			return events.ToWire(e)
		case d.Finished != nil:
			e, err := events.NewRunFinished(o, d.Finished.Info, d.Finished.Detail)
			if err != nil {
				return ev, err
			}
			return events.ToWire(e)
		}
		return ev, fmt.Errorf("event %s of type %s is not rewritten", d.ID, d.Type)
	}
	// The constructors validate; an event the aggregator could not decode
	// would be dead-lettered and its run's split would differ.
	return build()
}

// genRun is one generated run: a fixture's events under another origin.
type genRun struct {
	fx    fixture
	o     events.Origin
	wires []events.Wire
}

// genRuns makes n runs from the fixtures in turn, spread over hosts and
// lanes.
func genRuns(t testing.TB, n int, fxs ...fixture) []genRun {
	t.Helper()
	hosts := []string{"strix01", "strix02", "node-7.lab"}
	lanes := []string{"gpu0", "gpu1", "", "ci lane"}
	out := make([]genRun, n)
	for i := range out {
		fx := fxs[i%len(fxs)]
		o := events.Origin{
			RunID: fmt.Sprintf("%s-gen%03d", fx.origin.RunID, i),
			Host:  hosts[i%len(hosts)],
			Lane:  lanes[(i/len(hosts))%len(lanes)],
		}
		g := genRun{fx: fx, o: o}
		for _, d := range fx.decoded {
			w, err := rewrite(d, o)
			require.NoError(t, err)
			g.wires = append(g.wires, w)
		}
		out[i] = g
	}
	return out
}

// interleave returns the events of runs round robin: the first event of
// each run, then the second of each, and so on (each run's own order kept).
func interleave(runs []genRun) []events.Wire {
	var out []events.Wire
	for i := 0; ; i++ {
		more := false
		for _, r := range runs {
			if i < len(r.wires) {
				out = append(out, r.wires[i])
				more = true
			}
		}
		if !more {
			return out
		}
	}
}

// testBroker is an embedded nats-server with the GTTSPLIT stream and a
// connection the test publishes on.
type testBroker struct {
	srv *server.Server
	url string
	nc  *nats.Conn
	js  jetstream.JetStream
}

func startBroker(t testing.TB) *testBroker {
	t.Helper()
	return startBrokerAt(t, natstest.Start(t))
}

func startBrokerAt(t testing.TB, srv *server.Server) *testBroker {
	t.Helper()
	b := &testBroker{srv: srv, url: srv.ClientURL()}
	b.nc, b.js = connectJS(t, b.url)
	_, err := bus.EnsureStream(testCtx(t), b.js, bus.DefaultStreamConfig(), zerolog.Nop())
	require.NoError(t, err)
	return b
}

// connectJS opens a connection of its own (closed at the end of the test).
func connectJS(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

// publish sends the events in order with their own ids as Nats-Msg-Id,
// and waits for every broker ack.
func (b *testBroker) publish(t testing.TB, ws ...events.Wire) {
	t.Helper()
	b.publishIDs(t, ws, nil)
}

// publishIDs is publish with the Nats-Msg-Id of ws[i] replaced by ids[i]
// when ids[i] is set (a duplicate JetStream does not drop).
func (b *testBroker) publishIDs(t testing.TB, ws []events.Wire, ids []string) {
	t.Helper()
	var futs []jetstream.PubAckFuture
	for i, w := range ws {
		m := nats.NewMsg(w.Subject)
		m.Data = w.Data
		id := w.ID
		if ids != nil && ids[i] != "" {
			id = ids[i]
		}
		m.Header.Set(jetstream.MsgIDHeader, id)
		f, err := b.js.PublishMsgAsync(m)
		require.NoError(t, err)
		futs = append(futs, f)
	}
	waitPublished(t, futs)
}

// waitPublished waits for the broker's acknowledgement of every async
// publish.
func waitPublished(t testing.TB, futs []jetstream.PubAckFuture) {
	t.Helper()
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatalf("publish %s: %v", f.Msg().Subject, err)
		case <-time.After(waitFor):
			t.Fatal("publish: no ack from the broker")
		}
	}
}

// publishRaw publishes a message as it is, on any subject.
func (b *testBroker) publishRaw(t testing.TB, subject string, data []byte) {
	t.Helper()
	_, err := b.js.Publish(testCtx(t), subject, data)
	require.NoError(t, err)
}

// consumerIdle reports whether the durable consumer has nothing pending
// and nothing delivered unacknowledged.
func (b *testBroker) consumerIdle(t testing.TB, durable string) bool {
	t.Helper()
	ci, err := b.consumerInfo(durable)
	if err != nil {
		return false
	}
	return ci.NumPending == 0 && ci.NumAckPending == 0 && ci.NumRedelivered == 0
}

// consumerInfo returns the info of the durable consumer of the events
// stream or, for a served aggregator, the sum over its partition
// consumers (Delivered.Stream then counts deliveries), with the events not
// yet sourced into the partitioned stream counted as pending.
func (b *testBroker) consumerInfo(durable string) (*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := b.js.Consumer(ctx, bus.DefaultStream, durable)
	if err == nil {
		return c.Info(ctx)
	}
	ps, err := b.js.Stream(ctx, bus.PartitionStream(bus.DefaultStream))
	if err != nil {
		return nil, err
	}
	sum := &jetstream.ConsumerInfo{Name: durable}
	n := 0
	parts := bus.DefaultPartitions
	if v, ok := partitionCount(ps.CachedInfo().Config); ok {
		parts = v
	}
	for p := 0; p < parts; p++ {
		pc, err := ps.Consumer(ctx, fmt.Sprintf("%s-p%02d", durable, p))
		if err != nil {
			return nil, err
		}
		ci, err := pc.Info(ctx)
		if err != nil {
			return nil, err
		}
		n++
		sum.NumPending += ci.NumPending
		sum.NumAckPending += ci.NumAckPending
		sum.NumRedelivered += ci.NumRedelivered
		sum.Delivered.Stream += ci.Delivered.Consumer
		sum.Delivered.Consumer += ci.Delivered.Consumer
	}
	// Events of the events stream not yet in the partitioned stream.
	es, err := b.js.Stream(ctx, bus.DefaultStream)
	if err != nil {
		return nil, err
	}
	ei, err := es.Info(ctx, jetstream.WithSubjectFilter("gttsplit.>"))
	if err != nil {
		return nil, err
	}
	var want uint64
	for subj, c := range ei.State.Subjects {
		if k := strings.SplitN(subj, ".", 3); len(k) == 3 && (k[1] == "run" || k[1] == "log" || k[1] == "fdinfo") {
			want += c
		}
	}
	pi, err := ps.Info(ctx)
	if err != nil {
		return nil, err
	}
	if pi.State.Msgs < want {
		sum.NumPending += want - pi.State.Msgs
	}
	return sum, nil
}

// waitAcked waits until the durable consumer acknowledged every message.
func (b *testBroker) waitAcked(t testing.TB, durable string) {
	t.Helper()
	eventually(t, "consumer "+durable+" to acknowledge every message", func() bool { return b.consumerIdle(t, durable) })
}

// streamMsgs returns the messages of the stream on subjects matching
// filter, in stream order.
func (b *testBroker) streamMsgs(t testing.TB, filter string) []jetstream.Msg {
	t.Helper()
	ctx := testCtx(t)
	s, err := b.js.Stream(ctx, bus.DefaultStream)
	require.NoError(t, err)
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	var out []jetstream.Msg
	for uint64(len(out)) < info.NumPending {
		batch, err := c.Fetch(int(info.NumPending)-len(out), jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		for m := range batch.Messages() {
			out = append(out, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			require.NoError(t, err)
		}
	}
	return out
}

// state reads a run's durable state from the state bucket.
func (b *testBroker) state(t testing.TB, runID string) *RunState {
	t.Helper()
	ctx := testCtx(t)
	kv, err := b.js.KeyValue(ctx, StateBucket)
	require.NoError(t, err)
	e, err := kv.Get(ctx, stateKey(runID))
	require.NoError(t, err)
	st, err := UnmarshalState(e.Value(), foldOptions(t))
	require.NoError(t, err)
	return st
}

// testConfig is the aggregator config of a test: the test's NATS server,
// a JSON sink in a temp dir, no HTTP, JSON output.
func testConfig(t testing.TB, url string) config.Aggregator {
	t.Helper()
	cfg := config.DefaultAggregator()
	cfg.NATS.URL = url
	cfg.Embedded.Store = t.TempDir()
	cfg.HTTP.Listen = ""
	cfg.Sinks.JSON.Dir = t.TempDir()
	cfg.Format = "json"
	cfg.ShutdownTimeout = 20 * time.Second
	return cfg
}

// closes records the splits a service wrote, per run, in order.
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

// served is a running Serve.
type served struct {
	cancel context.CancelFunc
	done   chan error
	closes *closes
	http   string // host:port of the HTTP endpoint, when enabled
}

// startServe runs Serve with cfg until the test stops it (or ends).
func startServe(t testing.TB, cfg config.Aggregator, opt ServeOptions) *served {
	t.Helper()
	s := &served{done: make(chan error, 1), closes: newCloses()}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	ready := make(chan struct{})
	httpAddr := make(chan string, 1)
	opt.Ready = func(string) { close(ready) }
	opt.OnClose = s.closes.add
	opt.HTTPReady = func(a string) { httpAddr <- a }
	go func() { s.done <- Serve(ctx, cfg, opt, testLogger(t)) }()
	select {
	case <-ready:
	case err := <-s.done:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(waitFor):
		cancel()
		t.Fatal("serve did not become ready")
	}
	if cfg.HTTP.Listen != "" {
		s.http = <-httpAddr
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop drains Serve (as SIGTERM does) and returns its error; later calls
// return nil.
func (s *served) stop(t testing.TB) error {
	t.Helper()
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		return err
	case <-time.After(waitFor):
		t.Fatal("serve did not stop")
		return nil
	}
}

// sinkDocs reads every document the JSON sink wrote under dir (one
// <host>/<lane>/<run>.json per run), keyed by the run id inside.
func sinkDocs(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".json" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var r split.Report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if _, dup := out[r.Run.ID]; dup {
			return fmt.Errorf("two documents of run %q", r.Run.ID)
		}
		out[r.Run.ID] = b
		return nil
	})
	require.NoError(t, err)
	return out
}

// sinkLines returns splits.jsonl's lines, decoded far enough to name their
// run, with the raw line. An aggregator may be appending to the file.
type sinkLine struct {
	id, host, lane string
	raw            []byte
	dir            string // the sink directory, when the caller sets it
}

func sinkLines(t testing.TB, dir string) []sinkLine {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "splits.jsonl"))
	require.NoError(t, err)
	// A last line without its newline is being appended (or was cut by
	// a writer that was killed): not a line yet.
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	var out []sinkLine
	if len(b) == 0 {
		return nil
	}
	for _, l := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		var r split.Report
		require.NoError(t, json.Unmarshal(l, &r), "splits.jsonl line %q", l)
		out = append(out, sinkLine{id: r.Run.ID, host: r.Run.Host, lane: r.Run.Lane, raw: l})
	}
	return out
}

// compact is the one-line form of a JSON document (a splits.jsonl line).
func compact(t testing.TB, doc []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, json.Compact(&buf, doc))
	return buf.Bytes()
}

// shuffled returns a random permutation of 0..n-1 from a logged seed.
func shuffled(t testing.TB, n int) []int {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("shuffle seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return rng.Perm(n)
}

// logLevel is debug in tests, warn in benchmarks (whose log output is
// kept).
func logLevel(t testing.TB) zerolog.Level {
	if _, ok := t.(*testing.B); ok {
		return zerolog.WarnLevel
	}
	return zerolog.DebugLevel
}

// partitionCount reads the partition count of a partitioned stream from its
// partition() mapping.
func partitionCount(cfg jetstream.StreamConfig) (int, bool) {
	for _, src := range cfg.Sources {
		for _, t := range src.SubjectTransforms {
			if _, rest, ok := strings.Cut(t.Destination, "{{partition("); ok {
				if n, _, ok := strings.Cut(rest, ","); ok {
					v, err := strconv.Atoi(strings.TrimSpace(n))
					return v, err == nil
				}
			}
		}
	}
	return 0, false
}
