package bus_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testLogger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
}

func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs an embedded nats-server")
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// connect connects with short reconnect waits and closes at the end.
func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := bus.Connect(testCtx(t), bus.Config{URL: url, ConnectTimeout: time.Second}, bus.DialOptions{ReconnectWait: 20 * time.Millisecond}, testLogger(t))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// jsFor returns a JetStream context on a fresh connection to s, with the
// GTTSPLIT stream created.
func jsFor(t testing.TB, s *server.Server) jetstream.JetStream {
	t.Helper()
	js := bareJS(t, s)
	_, err := bus.EnsureStream(testCtx(t), js, bus.DefaultStreamConfig(), zerolog.Nop())
	require.NoError(t, err)
	return js
}

// bareJS is a JetStream context on s, creating nothing.
func bareJS(t testing.TB, s *server.Server) jetstream.JetStream {
	t.Helper()
	return natstest.JetStream(t, s.ClientURL())
}

func pubConfig(t testing.TB) bus.PublisherConfig {
	cfg := bus.DefaultPublisherConfig()
	cfg.NATS.MaxInFlight = 16
	cfg.NATS.AckTimeout = 2 * time.Second
	cfg.RetryInterval = 20 * time.Millisecond
	cfg.Spool.Dir = t.TempDir()
	cfg.SegmentBytes = 8 << 10 // small segments: rotation is exercised
	return cfg
}

// runEvents builds the events of one run: started, n log batches of 3 lines
// alternating between stderr and stdout (one line counter), a sample after
// every third batch, finished.
func runEvents(t testing.TB, runID string, n int) []event.Event {
	t.Helper()
	o := events.Origin{RunID: runID, Host: "host1", Lane: "gpu0"}
	t0 := time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)
	var out []event.Event
	add := func(ev event.Event, err error) {
		t.Helper()
		require.NoError(t, err)
		out = append(out, ev)
	}
	add(events.NewRunStarted(split.RunInfo{ID: runID, Host: o.Host, Lane: o.Lane, Command: "llama-cli -v", Started: t0}, events.StartDetail{PID: 42}))
	seq, sample := uint64(1), uint64(0)
	for i := range n {
		stream := []string{"stderr", "stdout"}[i%2]
		var lines []split.Line
		for range 3 {
			lines = append(lines, split.Line{Stream: stream, Seq: seq, Text: fmt.Sprintf("load_tensors: line %d %s", seq, strings.Repeat("x", 40))})
			seq++
		}
		add(events.NewLogLines(o, lines))
		if i%3 == 2 {
			add(events.NewFDInfoSample(o, split.Sample{Seq: sample, Time: t0.Add(time.Duration(sample) * time.Second),
				Procs: []split.ProcFDs{{PID: 42, FDs: []split.FDInfo{{FD: 9, Text: "drm-driver:\tamdgpu\ndrm-total-gtt:\t1024 KiB\n"}}}}}))
			sample++
		}
	}
	add(events.NewRunFinished(o, split.FinishInfo{Finished: t0.Add(time.Minute)}, events.FinishDetail{Duration: time.Minute}))
	return out
}

func ids(evs []event.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID()
	}
	return out
}

// acks counts ack callbacks per event id.
type acks struct {
	mu sync.Mutex
	n  map[string]int
}

func newAcks() *acks { return &acks{n: map[string]int{}} }

func (a *acks) cb(id string) func() {
	return func() {
		a.mu.Lock()
		a.n[id]++
		a.mu.Unlock()
	}
}

func (a *acks) count(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[id]
}

func (a *acks) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.n {
		n += c
	}
	return n
}

func publishAll(t testing.TB, p *bus.Publisher, evs []event.Event, a *acks) {
	t.Helper()
	for _, ev := range evs {
		require.NoError(t, p.Publish(testCtx(t), ev, a.cb(ev.ID())))
	}
}

// storedRun publishes n events of a run to s (the stream js has) through
// a publisher of its own, closes it, waits until the stream holds them,
// and returns them.
func storedRun(t testing.TB, s *server.Server, js jetstream.JetStream, runID string, n int) []event.Event {
	t.Helper()
	p, err := bus.NewPublisher(connect(t, s.ClientURL()), pubConfig(t), testLogger(t))
	require.NoError(t, err)
	evs := runEvents(t, runID, n)
	publishAll(t, p, evs, newAcks())
	require.NoError(t, p.Close(testCtx(t)))
	waitMsgs(t, js, uint64(len(evs)))
	return evs
}

// waitMsgs waits until the stream holds n messages.
func waitMsgs(t testing.TB, js jetstream.JetStream, n uint64) {
	t.Helper()
	var last uint64
	require.Eventually(t, func() bool {
		s, err := js.Stream(context.Background(), bus.DefaultStream)
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background())
		if err != nil {
			return false
		}
		last = info.State.Msgs
		return last >= n
	}, 20*time.Second, 20*time.Millisecond, "stream never reached %d messages (last %d)", n, last)
}

// exported is the stream's content in stream order.
type exported struct {
	ids      []string
	subjects []string
	msgIDs   []string
	decoded  []events.Decoded
}

func exportAll(t testing.TB, js jetstream.JetStream, r bus.Range) exported {
	t.Helper()
	var out exported
	_, err := bus.Export(testCtx(t), js, bus.DefaultStream, r, func(m bus.Msg) error {
		d, err := m.Decode()
		if err != nil {
			return err
		}
		out.ids = append(out.ids, d.ID)
		out.subjects = append(out.subjects, m.Subject())
		out.msgIDs = append(out.msgIDs, m.Headers().Get(jetstream.MsgIDHeader))
		if ct := m.Headers().Get("Content-Type"); ct != events.StructuredContentType {
			return fmt.Errorf("event %s: Content-Type %q", d.ID, ct)
		}
		out.decoded = append(out.decoded, d)
		return nil
	})
	require.NoError(t, err)
	return out
}

// requireDrainedOnce waits until the stream holds every one of evs and
// p's spool is empty, closes p, and checks each event is on the stream
// once, in order, and was acknowledged to its caller once.
func requireDrainedOnce(t testing.TB, p *bus.Publisher, js jetstream.JetStream, evs []event.Event, a *acks) {
	t.Helper()
	waitMsgs(t, js, uint64(len(evs)))
	require.Eventually(t, func() bool { return p.Stats().SpoolBytes == 0 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, p.Close(testCtx(t)))
	requireExactlyOnceInOrder(t, exportAll(t, js, bus.Range{}), evs)
	for _, ev := range evs {
		require.Equal(t, 1, a.count(ev.ID()), "ack of %s", ev.ID())
	}
}

// requireExactlyOnceInOrder checks the stream holds each of want once, and
// that per log stream the batches come in order of their first seq, and
// the samples in order of their seq.
func requireExactlyOnceInOrder(t testing.TB, got exported, want []event.Event) {
	t.Helper()
	require.ElementsMatch(t, ids(want), got.ids, "every event exactly once")
	require.Equal(t, got.ids, got.msgIDs, "Nats-Msg-Id is the event id")
	last := map[string]uint64{}
	seen := map[string]bool{}
	for _, d := range got.decoded {
		key, seq := "", uint64(0)
		switch {
		case d.Lines != nil:
			key, seq = d.Origin.RunID+"/"+d.Lines[0].Stream, d.Lines[0].Seq
		case d.Sample != nil:
			key, seq = d.Origin.RunID+"/fdinfo", d.Sample.Seq
		default:
			continue
		}
		if seen[key] {
			require.Greater(t, seq, last[key], "%s out of order", key)
		}
		seen[key], last[key] = true, seq
	}
	// And the same order as published, overall.
	require.Equal(t, ids(want), got.ids, "stream order is publish order")
}

func zeroLogger() zerolog.Logger { return zerolog.Nop() }
