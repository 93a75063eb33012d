package aggregator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// TestMain checks that no goroutine outlives the tests.
func TestMain(m *testing.M) { natstest.VerifyTestMain(m, removeAggregatorBin) }

// The recorded runs every test folds (shared fixtures, testdata/runs).
var (
	fixture4B  = rt.Runs("4b")
	fixture27B = rt.Runs("27b")
)

// waitFor bounds every poll: generous, for a loaded 2-core machine.
const waitFor = rt.WaitFor

func testLogger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(logLevel(t))
}

func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs an embedded nats-server")
	}
}

func testCtx(t testing.TB) context.Context { return rt.Ctx(t) }

// eventually polls cond until it holds (see rt.Eventually).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	rt.Eventually(t, what, cond)
}

// fixture is a recorded run (rt.Fixture); genRun a run generated from one.
type (
	fixture = rt.Fixture
	genRun  = rt.Run
)

func foldOptions(t testing.TB) split.Options {
	t.Helper()
	o, err := FoldOptions(config.DefaultAggregator())
	require.NoError(t, err)
	return o
}

// loadFixture reads a recorded stream and replays it as `aggregator
// replay` does.
func loadFixture(t testing.TB, path string) fixture {
	t.Helper()
	fx := rt.Load(t, path, foldOptions(t))
	runs := runtable.NewRuns(foldOptions(t))
	st, err := ReplayFiles(runs, []string{path}, testLogger(t))
	require.NoError(t, err)
	require.Equal(t, len(fx.Decoded), st.Events)
	got, err := split.JSON(runtable.Report(runs.Get(fx.Origin.RunID)))
	require.NoError(t, err)
	require.Equal(t, string(fx.Want), string(got), "ReplayFiles folds as the run table does")
	return fx
}

// replayJSON is the split `aggregator replay` computes from a recorded
// stream holding exactly the given events.
func replayJSON(t testing.TB, wires []events.Wire) []byte {
	t.Helper()
	return rt.ReplayJSON(t, wires, foldOptions(t))
}

func genRuns(t testing.TB, n int, fxs ...fixture) []genRun { t.Helper(); return rt.Gen(t, n, fxs...) }

func interleave(runs []genRun) []events.Wire { return rt.Interleave(runs) }

// testBroker is an embedded nats-server with the GTTSPLIT stream and a
// connection the test publishes on (rt.Broker).
type testBroker struct {
	*rt.Broker
	url string
	js  jetstream.JetStream
}

func startBroker(t testing.TB) *testBroker {
	t.Helper()
	return startBrokerAt(t, natstest.Start(t))
}

func startBrokerAt(t testing.TB, srv *server.Server) *testBroker {
	t.Helper()
	b := rt.BrokerAt(t, srv)
	return &testBroker{Broker: b, url: b.URL, js: b.JS}
}

func connectJS(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return rt.Connect(t, url)
}

func (b *testBroker) publish(t testing.TB, ws ...events.Wire) { t.Helper(); b.Publish(t, ws...) }
func (b *testBroker) publishIDs(t testing.TB, ws []events.Wire, ids []string) {
	t.Helper()
	b.PublishIDs(t, ws, ids)
}
func (b *testBroker) publishRaw(t testing.TB, subject string, data []byte) {
	t.Helper()
	b.PublishRaw(t, subject, data)
}
func (b *testBroker) consumerInfo(durable string) (*jetstream.ConsumerInfo, error) {
	return b.ConsumerInfo(durable)
}
func (b *testBroker) waitAcked(t testing.TB, durable string) { t.Helper(); b.WaitAcked(t, durable) }
func (b *testBroker) streamMsgs(t testing.TB, filter string) []jetstream.Msg {
	t.Helper()
	return b.StreamMsgs(t, filter)
}
func (b *testBroker) state(t testing.TB, runID string) *runtable.RunState {
	t.Helper()
	return b.State(t, runID, foldOptions(t))
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
	url    string // the broker it connected to
}

// startServe runs Serve with cfg until the test stops it (or ends).
func startServe(t testing.TB, cfg config.Aggregator, opt ServeOptions) *served {
	t.Helper()
	return startServeLog(t, cfg, opt, testLogger(t))
}

// startServeLog is startServe logging to log.
func startServeLog(t testing.TB, cfg config.Aggregator, opt ServeOptions, log zerolog.Logger) *served {
	t.Helper()
	s := &served{done: make(chan error, 1), closes: newCloses()}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	ready := make(chan struct{})
	httpAddr := make(chan string, 1)
	opt.Ready = func(url string) { s.url = url; close(ready) }
	opt.OnClose = s.closes.add
	opt.HTTPReady = func(a string) { httpAddr <- a }
	go func() { s.done <- Serve(ctx, cfg, opt, log) }()
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
func compact(t testing.TB, doc []byte) []byte { t.Helper(); return rt.Compact(t, doc) }

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
