// Package runtabletest holds what the tests of the run table and of the
// aggregator share: the recorded runs as fixtures (their events and the
// split a replay computes), runs generated from them under other ids, and
// a real embedded NATS server to publish them to. Nothing here is a mock.
package runtabletest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// FoldOptions are the fold's options of an aggregator with the default
// configuration.
func FoldOptions(t testing.TB) split.Options {
	t.Helper()
	d := config.DefaultAggregator()
	p, err := llamalog.NewParser(d.Split.TracePattern, d.Split.TraceNamePattern)
	require.NoError(t, err)
	return split.Options{Parser: p, UnattributedThresholdPct: d.Split.UnattributedThresholdPct}
}

// WaitFor bounds every poll: generous, for a loaded 2-core machine.
const WaitFor = 60 * time.Second

// Runs returns the path of a recorded run under testdata/runs ("4b",
// "27b").
func Runs(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "testdata", "runs", name, "events.jsonl")
}

// Eventually polls cond every 20ms until it holds, and fails the test,
// naming what it waited for, after WaitFor.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, what, WaitFor, cond)
}

// EventuallyWithin is Eventually failing after d: for a wait that
// includes a known time (a killed owner's leases running out) besides
// WaitFor.
func EventuallyWithin(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Ctx is a context that ends with the test (or after 2×WaitFor).
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*WaitFor)
	t.Cleanup(cancel)
	return ctx
}

// Fixture is a recorded run: its events as decoded and as they go on the
// wire, and the split a replay of the file computes.
type Fixture struct {
	Path    string
	Origin  events.Origin
	Decoded []events.Decoded
	Wires   []events.Wire
	Report  split.Report
	Want    []byte // split.JSON(Report): what `replay --format json` prints
}

// Load reads a recorded stream and folds it as `aggregator replay` does.
func Load(t testing.TB, path string, opts split.Options) Fixture {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	fx := Fixture{Path: path}
	r := events.NewReader(f)
	runs := runtable.NewRuns(opts)
	for r.Next() {
		d, err := events.Decode(r.Event())
		require.NoError(t, err)
		w, err := events.ToWire(r.Event())
		require.NoError(t, err)
		fx.Decoded = append(fx.Decoded, d)
		fx.Wires = append(fx.Wires, w)
		runs.Apply(d, time.Time{})
	}
	require.NoError(t, r.Err())
	require.Zero(t, r.Skipped())
	require.NotEmpty(t, fx.Decoded)
	fx.Origin = fx.Decoded[0].Origin
	require.Equal(t, []string{fx.Origin.RunID}, runs.IDs())
	fx.Report = runtable.Report(runs.Get(fx.Origin.RunID))
	fx.Want, err = split.JSON(fx.Report)
	require.NoError(t, err)
	require.True(t, fx.Report.Run.Complete, "the fixture is a complete run")
	return fx
}

// FinishedIndex is the position of the run-finished event.
func (fx Fixture) FinishedIndex(t testing.TB) int {
	t.Helper()
	for i, d := range fx.Decoded {
		if d.Finished != nil {
			return i
		}
	}
	t.Fatalf("%s has no run-finished event", fx.Path)
	return -1
}

// Without returns the fixture's wire events but those at the indexes
// skip, in order.
func (fx Fixture) Without(skip ...int) []events.Wire {
	var out []events.Wire
	for i, w := range fx.Wires {
		if !slices.Contains(skip, i) {
			out = append(out, w)
		}
	}
	return out
}

// Starts returns the fixture's first event (its run start) under n run
// ids, fmt.Sprintf(format, i) for i from 0, on the fixture's host and
// lane: a flood of runs that open and never finish.
func (fx Fixture) Starts(t testing.TB, format string, n int) []events.Wire {
	t.Helper()
	out := make([]events.Wire, 0, n)
	for i := range n {
		w, err := Rewrite(fx.Decoded[0], events.Origin{RunID: fmt.Sprintf(format, i), Host: fx.Origin.Host, Lane: fx.Origin.Lane})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, w)
	}
	return out
}

// ReplayJSON is the split a replay computes from exactly the given events.
func ReplayJSON(t testing.TB, wires []events.Wire, opts split.Options) []byte {
	t.Helper()
	runs := runtable.NewRuns(opts)
	for _, w := range wires {
		d, err := events.DecodeBytes(w.Data)
		require.NoError(t, err)
		runs.Apply(d, time.Time{})
	}
	require.Len(t, runs.IDs(), 1)
	b, err := split.JSON(runtable.Report(runs.Get(runs.IDs()[0])))
	require.NoError(t, err)
	return b
}

// Rewrite builds the event d describes again with the pkg/events
// constructors, as an event of run o: the content is the same, the id,
// source, subject and attributes follow o.
func Rewrite(d events.Decoded, o events.Origin) (events.Wire, error) {
	e, err := Event(d, o)
	if err != nil {
		return events.Wire{}, err
	}
	return events.ToWire(e)
}

// Event is Rewrite's event before it is encoded: what a collector hands
// its publisher.
func Event(d events.Decoded, o events.Origin) (event.Event, error) {
	switch {
	case d.Started != nil:
		info := d.Started.Info
		info.ID, info.Host, info.Lane = o.RunID, o.Host, o.Lane
		return events.NewRunStarted(info, d.Started.Detail)
	case d.Lines != nil:
		return events.NewLogLines(o, d.Lines)
	case d.Sample != nil:
		return events.NewFDInfoSample(o, *d.Sample)
	case d.Finished != nil:
		return events.NewRunFinished(o, d.Finished.Info, d.Finished.Detail)
	}
	return event.Event{}, fmt.Errorf("event %s of type %s is not rewritten", d.ID, d.Type)
}

// Run is one generated run: a fixture's events under another origin.
type Run struct {
	Fx     Fixture
	Origin events.Origin
	Wires  []events.Wire
}

// Gen makes n runs from the fixtures in turn, spread over hosts and lanes.
func Gen(t testing.TB, n int, fxs ...Fixture) []Run {
	t.Helper()
	hosts := []string{"strix01", "strix02", "node-7.lab"}
	lanes := []string{"gpu0", "gpu1", "", "ci lane"}
	out := make([]Run, n)
	for i := range out {
		fx := fxs[i%len(fxs)]
		o := events.Origin{
			RunID: fmt.Sprintf("%s-gen%03d", fx.Origin.RunID, i),
			Host:  hosts[i%len(hosts)],
			Lane:  lanes[(i/len(hosts))%len(lanes)],
		}
		g := Run{Fx: fx, Origin: o}
		for _, d := range fx.Decoded {
			w, err := Rewrite(d, o)
			require.NoError(t, err)
			g.Wires = append(g.Wires, w)
		}
		out[i] = g
	}
	return out
}

// Interleave returns the events of runs round robin: the first event of
// each run, then the second of each, and so on (each run's own order
// kept).
func Interleave(runs []Run) []events.Wire {
	var out []events.Wire
	for i := 0; ; i++ {
		more := false
		for _, r := range runs {
			if i < len(r.Wires) {
				out = append(out, r.Wires[i])
				more = true
			}
		}
		if !more {
			return out
		}
	}
}

// Broker is an embedded nats-server with the GTTSPLIT stream and a
// connection the test publishes on.
type Broker struct {
	Srv *server.Server
	URL string
	NC  *nats.Conn
	JS  jetstream.JetStream
}

// StartBroker starts an embedded server for the test, with the events
// stream.
func StartBroker(t testing.TB) *Broker {
	t.Helper()
	return BrokerAt(t, natstest.Start(t))
}

// BrokerAt is StartBroker on a server the test started.
func BrokerAt(t testing.TB, srv *server.Server) *Broker {
	t.Helper()
	b := &Broker{Srv: srv, URL: srv.ClientURL()}
	b.NC, b.JS = Connect(t, b.URL)
	_, err := bus.EnsureStream(Ctx(t), b.JS, bus.DefaultStreamConfig(), zerolog.Nop())
	require.NoError(t, err)
	return b
}

// Connect opens a connection of its own (closed at the end of the test).
func Connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc := natstest.Connect(t, url)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

// Publish sends the events in order with their own ids as Nats-Msg-Id,
// and waits for every broker ack.
func (b *Broker) Publish(t testing.TB, ws ...events.Wire) {
	t.Helper()
	b.PublishIDs(t, ws, nil)
}

// PublishIDs is Publish with the Nats-Msg-Id of ws[i] replaced by ids[i]
// when ids[i] is set (a duplicate JetStream does not drop).
//
// A message whose ack has not come after publishAttempt (doubling) is
// sent again with the same Nats-Msg-Id, as a publisher does: the leader
// of a replicated stream that loses its leadership with the message
// proposed answers nothing, whether the message was stored or not, and
// the stream's duplicate window (at least 2 minutes, longer than these
// attempts) drops a copy stored already. It fails when a message got no
// ack for WaitFor (the messages before it acked).
func (b *Broker) PublishIDs(t testing.TB, ws []events.Wire, ids []string) {
	t.Helper()
	msg := func(i int) *nats.Msg {
		m := nats.NewMsg(ws[i].Subject)
		m.Data = ws[i].Data
		id := ws[i].ID
		if ids != nil && ids[i] != "" {
			id = ids[i]
		}
		m.Header.Set(jetstream.MsgIDHeader, id)
		return m
	}
	send := func(i int) jetstream.PubAckFuture {
		f, err := b.JS.PublishMsgAsync(msg(i))
		require.NoError(t, err)
		return f
	}
	futs := make([]jetstream.PubAckFuture, len(ws))
	for i := range ws {
		futs[i] = send(i)
	}
	for i, f := range futs {
		b.awaitAck(t, ws[i].Subject, []jetstream.PubAckFuture{f}, func() jetstream.PubAckFuture { return send(i) })
	}
}

// publishAttempt is how long PublishIDs waits for a message's ack before
// it sends the message again (then twice as long, and so on).
const publishAttempt = 5 * time.Second

// msgIDInProcess is the broker's error code for a message whose
// Nats-Msg-Id is that of one it is storing now.
const msgIDInProcess jetstream.ErrorCode = 10158

// awaitAck waits for an ack to any of fs (the sends of one message so
// far), sending the message again (resend) at each attempt's end, and a
// second after a send failed with none left: the connection dropped it
// (nats.go fails the acks it waits for when the connection goes), or the
// stream had no leader to answer (no response from stream). A send the
// broker refuses because another of the message is in process waits for
// that one.
func (b *Broker) awaitAck(t testing.TB, subject string, fs []jetstream.PubAckFuture, resend func() jetstream.PubAckFuture) {
	t.Helper()
	start := time.Now()
	attempt := publishAttempt
	next := start.Add(attempt)
	sends := len(fs)
	var failed time.Time
	for {
		for i := 0; i < len(fs); i++ {
			select {
			case ack := <-fs[i].Ok():
				if sends > 1 {
					t.Logf("publish %s: acked after %v, sent %d times (a copy stored already: %v)",
						subject, time.Since(start).Round(time.Millisecond), sends, ack.Duplicate)
				}
				return
			case err := <-fs[i].Err():
				var apiErr *jetstream.APIError
				if !errors.Is(err, nats.ErrDisconnected) && !errors.Is(err, jetstream.ErrNoStreamResponse) &&
					(!errors.As(err, &apiErr) || apiErr.ErrorCode != msgIDInProcess) {
					t.Fatalf("publish %s: %v", subject, err)
				}
				fs = slices.Delete(fs, i, i+1)
				i--
				failed = time.Now()
			default:
			}
		}
		now := time.Now()
		if now.Sub(start) >= WaitFor {
			t.Fatalf("publish %s: no ack from the broker for %v (sent %d times)", subject, WaitFor, sends)
		}
		if (len(fs) == 0 && now.Sub(failed) >= time.Second) || now.After(next) {
			fs = append(fs, resend())
			sends++
			if now.After(next) {
				attempt *= 2
				next = now.Add(attempt)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PublishRaw publishes a message as it is, on any subject.
func (b *Broker) PublishRaw(t testing.TB, subject string, data []byte) {
	t.Helper()
	_, err := b.JS.Publish(Ctx(t), subject, data)
	require.NoError(t, err)
}

// Idle reports whether every partition consumer of group has nothing
// pending and nothing delivered unacknowledged.
func (b *Broker) Idle(t testing.TB, group string) bool {
	t.Helper()
	ci, err := b.ConsumerInfo(group)
	return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0
}

// ConsumerInfo sums the infos of group's partition consumers
// (Delivered.Stream then counts deliveries). It asks the broker twice a
// partition (the consumer, its info) and twice more: on a loaded machine
// each answer may take seconds, so the whole is bounded by WaitFor/2, not
// by one answer's time.
func (b *Broker) ConsumerInfo(group string) (*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), WaitFor/2)
	defer cancel()
	n, err := bus.StreamPartitions(ctx, b.JS, bus.DefaultStream)
	if err != nil {
		return nil, err
	}
	st, err := b.JS.Stream(ctx, bus.DefaultStream)
	if err != nil {
		return nil, err
	}
	sum := &jetstream.ConsumerInfo{Name: group}
	for p := 0; p < n; p++ {
		c, err := st.Consumer(ctx, bus.ConsumerName(group, p))
		if err != nil {
			return nil, err
		}
		ci, err := c.Info(ctx)
		if err != nil {
			return nil, err
		}
		sum.NumPending += ci.NumPending
		sum.NumAckPending += ci.NumAckPending
		sum.NumRedelivered += ci.NumRedelivered
		sum.Delivered.Stream += ci.Delivered.Consumer
		sum.Delivered.Consumer += ci.Delivered.Consumer
	}
	return sum, nil
}

// WaitAcked waits until group's consumers acknowledged every message.
// When they did not, it says what the broker last answered: messages
// pending or delivered and unacknowledged (and redelivered), or the error
// that kept the question from being answered.
func (b *Broker) WaitAcked(t testing.TB, group string) {
	t.Helper()
	last := "no answer yet"
	deadline := time.Now().Add(WaitFor)
	for {
		ci, err := b.ConsumerInfo(group)
		switch {
		case err != nil:
			last = "error: " + err.Error()
		case ci.NumPending == 0 && ci.NumAckPending == 0:
			return
		default:
			last = fmt.Sprintf("%d pending, %d delivered and unacknowledged, %d redelivered", ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for consumers of %s to acknowledge every message (last answer: %s)", group, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StreamMsgs returns the messages of the events stream on subjects
// matching filters, in stream order.
func (b *Broker) StreamMsgs(t testing.TB, filters ...string) []jetstream.Msg {
	t.Helper()
	ctx := Ctx(t)
	s, err := b.JS.Stream(ctx, bus.DefaultStream)
	require.NoError(t, err)
	c, drop, err := bus.Ordered(ctx, s, jetstream.OrderedConsumerConfig{FilterSubjects: filters})
	require.NoError(t, err)
	defer drop()
	info, err := c.Info(ctx)
	require.NoError(t, err)
	var out []jetstream.Msg
	var refused bus.Refusals
	for uint64(len(out)) < info.NumPending {
		batch, err := c.Fetch(int(info.NumPending)-len(out), jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		got := len(out)
		for m := range batch.Messages() {
			out = append(out, m)
		}
		err = batch.Error()
		if again, werr := refused.Again(ctx, len(out)-got, err); again || werr != nil {
			require.NoError(t, werr)
			continue
		}
		if err != nil && !errors.Is(err, nats.ErrTimeout) {
			require.NoError(t, err)
		}
	}
	return out
}

// State reads a run's durable state from the state bucket.
func (b *Broker) State(t testing.TB, runID string, opts split.Options) *runtable.RunState {
	t.Helper()
	ctx := Ctx(t)
	kv, err := b.JS.KeyValue(ctx, runtable.Bucket)
	require.NoError(t, err)
	n, err := bus.StreamPartitions(ctx, b.JS, bus.DefaultStream)
	require.NoError(t, err)
	st, err := runtable.ReadState(ctx, b.JS, kv, n, runID, opts)
	require.NoError(t, err)
	return st
}

// SplitEvents returns, per run, the split events on gttsplit.split.> in
// stream order.
func (b *Broker) SplitEvents(t testing.TB) map[string][]split.Report {
	t.Helper()
	out := map[string][]split.Report{}
	for _, m := range b.StreamMsgs(t, "gttsplit.split.>") {
		d, err := events.DecodeBytes(m.Data())
		require.NoError(t, err)
		require.NotNil(t, d.Split)
		out[d.Origin.RunID] = append(out[d.Origin.RunID], *d.Split)
	}
	return out
}

// Compact is the one-line form of a JSON document (a splits.jsonl line).
func Compact(t testing.TB, doc []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, json.Compact(&buf, doc))
	return buf.Bytes()
}
