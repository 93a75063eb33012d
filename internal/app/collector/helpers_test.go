package collector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/sources/procwrap/procwraptest"
)

// binDir holds the binaries the tests build (cmd/collector); TestMain
// removes it.
var binDir string

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == procwraptest.Arg {
		os.Exit(procwraptest.Main(os.Args[2:]))
	}
	// The children re-execute this binary; built with -race it would
	// sleep a second at exit.
	_ = os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	var err error
	if binDir, err = os.MkdirTemp("", "gttsplit-collector-test-"); err != nil {
		panic(err)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { _ = os.RemoveAll(binDir) }))
}

// waitFor bounds every poll: generous, for a loaded 2-core machine.
const waitFor = 60 * time.Second

// fixture4B is the real llama.cpp -v log of the 4B reference run: 1564
// lines, the last one without a newline.
var fixture4B = filepath.Join("..", "..", "..", "testdata", "runs", "4b", "split.log")

// startBroker starts an embedded nats-server with the events stream, as
// the aggregator (or an operator) makes it: a collector creates none.
func startBroker(t testing.TB) *server.Server { return withStream(t, natstest.Start(t)) }

// startBrokerAt is startBroker on a chosen store and port.
func startBrokerAt(t testing.TB, store string, port int) *server.Server {
	return withStream(t, natstest.StartAt(t, store, port))
}

// withStream makes sure srv has the events stream.
func withStream(t testing.TB, srv *server.Server) *server.Server {
	t.Helper()
	nc := natstest.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = bus.EnsureStream(testCtx(t), js, bus.DefaultStreamConfig(), zerolog.Nop())
	require.NoError(t, err)
	nc.Close()
	return srv
}

func testLogger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
}

func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: runs child processes and an embedded nats-server")
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitFor)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 10ms until it holds, failing the test after
// waitFor.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// absPath is filepath.Abs that fails the test.
func absPath(t testing.TB, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	require.NoError(t, err)
	return a
}

// childArgv is the command line of a test child running ops.
func childArgv(t testing.TB, ops ...string) []string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	return append([]string{exe, procwraptest.Arg}, ops...)
}

// readRecord reads what a child's record operation wrote.
func readRecord(t testing.TB, path string) procwraptest.Record {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var r procwraptest.Record
	require.NoError(t, json.Unmarshal(b, &r))
	return r
}

// fixtureLines returns the 4B log's lines, each with its "\n" (the last has
// none), and the bytes print sends to stdout and to stderr.
func fixtureLines(t testing.TB) (lines [][]byte, stdout, stderr []byte) {
	t.Helper()
	b, err := os.ReadFile(fixture4B)
	require.NoError(t, err)
	lines = procwraptest.Lines(b)
	require.Equal(t, 1564, len(lines))
	for i, l := range lines {
		if procwraptest.ToStdout(i) {
			stdout = append(stdout, l...)
		} else {
			stderr = append(stderr, l...)
		}
	}
	return lines, stdout, stderr
}

// lineText is a fixture line as the collector captures it.
func lineText(l []byte) string { return strings.TrimSuffix(string(l), "\n") }

// testConfig is the collector's default config made hermetic: a fixed host
// and lane, a spool, state and source dir of the test, and no cards (an
// empty sysfs).
func testConfig(t testing.TB) config.Collector {
	t.Helper()
	cfg := config.DefaultCollector()
	cfg.Host, cfg.Lane = "testhost", "gpu0"
	cfg.Spool.Dir = filepath.Join(t.TempDir(), "spool")
	cfg.Attach.StateDir = filepath.Join(t.TempDir(), "state")
	cfg.SourceDir = t.TempDir()
	cfg.Sample.SysRoot = t.TempDir()
	cfg.Log.Level = "debug"
	return cfg
}

// syncBuffer is a bytes.Buffer the child's copying goroutine and the test
// can share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

func (b *syncBuffer) String() string { return string(b.Bytes()) }

// testIO is the IO of a collector command under test.
type testIO struct {
	stdout, stderr syncBuffer
	sigs           chan os.Signal
}

func newTestIO() *testIO { return &testIO{sigs: make(chan os.Signal, 4)} }

func (o *testIO) io() IO {
	return IO{Stdin: strings.NewReader(""), Stdout: &o.stdout, Stderr: &o.stderr, Signals: o.sigs}
}

// readJSONL decodes a recorded stream; every line must be a valid event.
func readJSONL(t testing.TB, path string) []events.Decoded {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []events.Decoded
	r := events.NewReader(f)
	for r.Next() {
		d, err := events.Decode(r.Event())
		require.NoError(t, err, "%s line %d", path, r.Line())
		out = append(out, d)
	}
	require.NoError(t, r.Err())
	require.Zero(t, r.Skipped(), "%s: lines that are no events", path)
	return out
}

// streamMsg is one message of the stream, decoded.
type streamMsg struct {
	events.Decoded
	MsgID string // the Nats-Msg-Id header
}

// jsConn connects to url (directly, not through the collector's path) and
// returns a JetStream context.
//
// Its requests without a deadline of their own wait up to waitFor for the
// broker's answer, not nats.go's 5 s: the test's reads of what the
// collector published (streamOf, polled until a count is reached) got
// "context deadline exceeded" from a present broker on a loaded machine
// (the stream's info answered past 5 s beside CI at load ~15-40).
func jsConn(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, url), jetstream.WithDefaultTimeout(waitFor))
	require.NoError(t, err)
	return js
}

// streamOf returns the messages of the GTTSPLIT stream that belong to
// runID, in stream order; an absent stream holds none.
//
// It gives up once no message came for waitFor (not after waitFor in
// all: a stream of 100 MB, decoded under -race on a loaded machine, takes
// longer than that and is still under way).
func streamOf(t testing.TB, js jetstream.JetStream, runID string) []streamMsg {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	came := make(chan struct{}, 1)
	go func() {
		idle := time.NewTimer(waitFor)
		defer idle.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-came:
				idle.Reset(waitFor)
			case <-idle.C:
				cancel()
				return
			}
		}
	}()
	var out []streamMsg
	_, err := bus.Export(ctx, js, bus.DefaultStream, bus.Range{}, func(m bus.Msg) error {
		select {
		case came <- struct{}{}:
		default:
		}
		d, err := m.Decode()
		if err != nil {
			return err
		}
		if d.Origin.RunID == runID {
			out = append(out, streamMsg{Decoded: d, MsgID: m.Headers().Get(jetstream.MsgIDHeader)})
		}
		return nil
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	require.NoError(t, err)
	return out
}

// lineSeqs returns how often each line sequence number occurs in msgs, and
// the text of each.
func lineSeqs(msgs []events.Decoded) (count map[uint64]int, text map[uint64]string, stream map[uint64]string) {
	count, text, stream = map[uint64]int{}, map[uint64]string{}, map[uint64]string{}
	for _, d := range msgs {
		for _, l := range d.Lines {
			count[l.Seq]++
			text[l.Seq] = l.Text
			stream[l.Seq] = l.Stream
		}
	}
	return count, text, stream
}

// requireEachLineOnce checks that count holds the sequence numbers 1..n,
// each once, and says which are missing or repeated.
func requireEachLineOnce(t testing.TB, count map[uint64]int, n int) {
	t.Helper()
	var missing, repeated []uint64
	for seq := uint64(1); seq <= uint64(n); seq++ {
		switch c := count[seq]; {
		case c == 0:
			missing = append(missing, seq)
		case c > 1:
			repeated = append(repeated, seq)
		}
	}
	if len(missing)+len(repeated) > 0 || len(count) != n {
		t.Fatalf("want lines 1..%d once each; %d distinct, missing %d %s, repeated %d %s", n, len(count),
			len(missing), seqRanges(missing), len(repeated), seqRanges(repeated))
	}
}

// seqRanges prints sorted numbers as ranges: [3-7 9].
func seqRanges(s []uint64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", s[i], s[j])
		} else {
			fmt.Fprintf(&b, "%d", s[i])
		}
		i = j + 1
	}
	b.WriteByte(']')
	return b.String()
}

func decodedOf(msgs []streamMsg) []events.Decoded {
	out := make([]events.Decoded, len(msgs))
	for i, m := range msgs {
		out[i] = m.Decoded
	}
	return out
}

// countTypes counts events by type.
func countTypes(msgs []events.Decoded) map[string]int {
	n := map[string]int{}
	for _, d := range msgs {
		n[d.Type]++
	}
	return n
}

// collectorBinary builds cmd/collector once per test binary.
var collectorBinary = sync.OnceValues(func() (string, error) {
	out := filepath.Join(binDir, "collector")
	cmd := exec.Command("go", "build", "-o", out, "github.com/gttsplit/gttsplit/cmd/collector")
	b, err := cmd.CombinedOutput()
	if err != nil {
		return "", errors.New("go build cmd/collector: " + err.Error() + ": " + string(b))
	}
	return out, nil
})

// deadBroker returns the URL of a port where a nats-server listened and
// no longer does, and that port (to start one there later).
func deadBroker(t testing.TB) (string, int) {
	t.Helper()
	dead, err := natstest.NewServer(t.TempDir(), 0)
	require.NoError(t, err)
	url, port := dead.ClientURL(), natstest.Port(dead)
	natstest.Shutdown(dead)
	return url, port
}

// segmentBytes sums the sizes of the spool segments (*.seg) under dir (0
// when it does not exist).
func segmentBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.HasSuffix(path, ".seg") {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

var _ io.Writer = (*syncBuffer)(nil)
