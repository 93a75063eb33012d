package bus_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// TestPublishIntegration publishes a run: every event arrives once, on its
// subject, with its deterministic id as Nats-Msg-Id, and every ack fires
// once.
func TestPublishIntegration(t *testing.T) {
	skipShort(t)
	s := natstest.Start(t)
	js := jsFor(t, s)
	p, err := bus.NewPublisher(connect(t, s.ClientURL()), pubConfig(t), testLogger(t))
	require.NoError(t, err)
	evs := runEvents(t, "run-a", 40)
	a := newAcks()
	publishAll(t, p, evs, a)
	require.NoError(t, p.Flush(testCtx(t)))
	for _, ev := range evs {
		require.Equal(t, 1, a.count(ev.ID()), ev.ID())
	}
	require.NoError(t, p.Close(testCtx(t)))
	require.NoError(t, p.Close(testCtx(t)), "Close is idempotent")
	st := p.Stats()
	require.Equal(t, uint64(len(evs)), st.Published)
	require.Zero(t, st.Spooled)
	require.Zero(t, p.Dropped())

	got := exportAll(t, js, bus.Range{})
	requireExactlyOnceInOrder(t, got, evs)
	for i, ev := range evs {
		subj, err := events.SubjectOf(ev)
		require.NoError(t, err)
		require.Equal(t, subj, bus.PublishedSubject(got.subjects[i]), "stored under its partition: %s", got.subjects[i])
	}

	require.ErrorIs(t, p.Publish(testCtx(t), evs[0], nil), bus.ErrClosed)
	require.ErrorIs(t, p.Flush(testCtx(t)), bus.ErrClosed)
}

// TestPublishTwiceIntegration publishes the same events twice (as a
// restarted collector would): the stream keeps one copy, and both rounds
// are acknowledged.
func TestPublishTwiceIntegration(t *testing.T) {
	skipShort(t)
	s := natstest.Start(t)
	js := jsFor(t, s)
	p, err := bus.NewPublisher(connect(t, s.ClientURL()), pubConfig(t), testLogger(t))
	require.NoError(t, err)
	defer p.Close(testCtx(t))
	evs := runEvents(t, "run-b", 20)
	a := newAcks()
	publishAll(t, p, evs, a)
	// Rebuilt from the same input: same ids, same bytes.
	again := runEvents(t, "run-b", 20)
	publishAll(t, p, again, a)
	require.NoError(t, p.Flush(testCtx(t)))
	require.Equal(t, 2*len(evs), a.total())

	stream, err := js.Stream(testCtx(t), bus.DefaultStream)
	require.NoError(t, err)
	info, err := stream.Info(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, uint64(len(evs)), info.State.Msgs)
	requireExactlyOnceInOrder(t, exportAll(t, js, bus.Range{}), evs)
}

// TestBrokerRestartIntegration shuts the broker down while the publisher
// keeps publishing, then starts it again on the same port and store: the
// stream ends up with every event exactly once, in publish order.
func TestBrokerRestartIntegration(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	s := natstest.StartAt(t, dir, 0)
	jsFor(t, s)
	cfg := pubConfig(t)
	p, err := bus.NewPublisher(connect(t, s.ClientURL()), cfg, testLogger(t))
	require.NoError(t, err)
	defer p.Close(testCtx(t))

	evs := runEvents(t, "run-c", 150)
	a := newAcks()
	third := len(evs) / 3
	publishAll(t, p, evs[:third], a)
	// Stop the broker with events still in flight.
	port := natstest.Port(s)
	natstest.Shutdown(s)
	publishAll(t, p, evs[third:2*third], a)
	require.NoError(t, p.Flush(testCtx(t)))
	require.NotZero(t, p.Stats().Spooled, "events published while the broker was down go to the spool")
	entries, err := os.ReadDir(cfg.Dir())
	require.NoError(t, err)
	segs := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".seg") {
			segs++
		}
	}
	require.Greater(t, segs, 1, "the spool rotated segments")

	s2 := natstest.StartAt(t, dir, port)
	publishAll(t, p, evs[2*third:], a)
	require.NoError(t, p.Flush(testCtx(t)))

	js := jsFor(t, s2)
	requireDrainedOnce(t, p, js, evs, a)
	st := p.Stats()
	require.Zero(t, st.Dropped)
	require.Equal(t, uint64(len(evs)), st.Published+st.Spooled)
	require.Equal(t, st.Spooled, st.Drained)
	left, err := filepath.Glob(filepath.Join(cfg.Dir(), "*.seg"))
	require.NoError(t, err)
	require.Empty(t, left, "drained segments are deleted")
}

// deadURL returns the URL of a port where no server listens any more, and
// that port.
func deadURL(t *testing.T) (string, int) {
	s, err := natstest.NewServer(t.TempDir(), 0)
	require.NoError(t, err)
	url, port := s.ClientURL(), natstest.Port(s)
	natstest.Shutdown(s)
	return url, port
}

// TestSpoolFullIntegration publishes with no broker into a spool that holds
// five events: the rest are dropped and counted, their acks never fire, and
// when a broker appears the five are delivered, in order.
func TestSpoolFullIntegration(t *testing.T) {
	skipShort(t)
	url, port := deadURL(t)
	evs := runEvents(t, "run-d", 20)[1:21]
	cfg := pubConfig(t)
	cfg.Spool.MaxBytes = 0
	for _, ev := range evs[:5] {
		cfg.Spool.MaxBytes += bus.SpoolRecordSize(t, ev)
	}
	nc := connect(t, url)
	require.False(t, nc.IsConnected())
	p, err := bus.NewPublisher(nc, cfg, testLogger(t))
	require.NoError(t, err)
	defer p.Close(testCtx(t))
	a := newAcks()
	publishAll(t, p, evs, a)
	require.NoError(t, p.Flush(testCtx(t)))
	st := p.Stats()
	require.Equal(t, uint64(5), st.Spooled)
	require.Equal(t, uint64(15), st.Dropped)
	require.Equal(t, uint64(15), p.Dropped())
	require.Equal(t, cfg.Spool.MaxBytes, st.SpoolBytes)
	for i, ev := range evs {
		require.Equal(t, map[bool]int{true: 1, false: 0}[i < 5], a.count(ev.ID()), ev.ID())
	}

	s := natstest.StartAt(t, t.TempDir(), port)
	js := jsFor(t, s)
	waitMsgs(t, js, 5)
	// The spool is empty again and accepts; publishing goes direct.
	require.Eventually(t, func() bool { return p.Stats().SpoolBytes == 0 }, 10*time.Second, 10*time.Millisecond)
	more := runEvents(t, "run-d2", 2)
	publishAll(t, p, more, a)
	require.NoError(t, p.Flush(testCtx(t)))
	waitMsgs(t, js, uint64(5+len(more)))
	require.NoError(t, p.Close(testCtx(t)))
	require.Equal(t, uint64(15), p.Dropped())
	requireExactlyOnceInOrder(t, exportAll(t, js, bus.Range{}), append(evs[:5:5], more...))
}

// TestSpoolSurvivesRestartIntegration spools with no broker, closes, and
// lets a second publisher on the same spool deliver the events.
func TestSpoolSurvivesRestartIntegration(t *testing.T) {
	skipShort(t)
	url, port := deadURL(t)
	cfg := pubConfig(t)
	evs := runEvents(t, "run-e", 30)
	a := newAcks()
	p1, err := bus.NewPublisher(connect(t, url), cfg, testLogger(t))
	require.NoError(t, err)
	publishAll(t, p1, evs, a)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, p1.Close(ctx), "Close does not wait for an absent broker")
	require.Equal(t, len(evs), a.total(), "spooled events count as durable")

	// A second process may not share the spool.
	p1b, err := bus.NewPublisher(connect(t, url), cfg, testLogger(t))
	require.NoError(t, err)
	_, err = bus.NewPublisher(connect(t, url), cfg, testLogger(t))
	require.ErrorContains(t, err, "in use")
	require.NoError(t, p1b.Close(ctx))

	s := natstest.StartAt(t, t.TempDir(), port)
	js := jsFor(t, s)
	p2, err := bus.NewPublisher(connect(t, s.ClientURL()), cfg, testLogger(t))
	require.NoError(t, err)
	waitMsgs(t, js, uint64(len(evs)))
	require.NoError(t, p2.Close(testCtx(t)))
	require.Equal(t, uint64(len(evs)), p2.Stats().Drained)
	requireExactlyOnceInOrder(t, exportAll(t, js, bus.Range{}), evs)
}

// TestOversizeEventDroppedIntegration sends an event larger than the
// server's max_payload: it is dropped and counted, and does not hold up
// the events after it.
func TestOversizeEventDroppedIntegration(t *testing.T) {
	skipShort(t)
	opts := natstest.Options(t.TempDir(), 0)
	opts.MaxPayload = 4096
	s, err := natstest.NewServerWithOptions(opts)
	require.NoError(t, err)
	t.Cleanup(func() { natstest.Shutdown(s) })
	js := jsFor(t, s)
	p, err := bus.NewPublisher(connect(t, s.ClientURL()), pubConfig(t), testLogger(t))
	require.NoError(t, err)
	defer p.Close(testCtx(t))

	o := events.Origin{RunID: "run-f", Host: "host1", Lane: "gpu0"}
	big, err := events.NewLogLines(o, []split.Line{{Stream: "stderr", Seq: 1, Text: strings.Repeat("y", 8000)}})
	require.NoError(t, err)
	small, err := events.NewLogLines(o, []split.Line{{Stream: "stderr", Seq: 2, Text: "ok"}})
	require.NoError(t, err)
	a := newAcks()
	require.NoError(t, p.Publish(testCtx(t), big, a.cb(big.ID())))
	require.NoError(t, p.Publish(testCtx(t), small, a.cb(small.ID())))
	require.NoError(t, p.Flush(testCtx(t)))
	require.Equal(t, uint64(1), p.Dropped())
	require.Zero(t, a.count(big.ID()))
	require.Equal(t, 1, a.count(small.ID()))
	waitMsgs(t, js, 1)
}

func TestPublisherRejects(t *testing.T) {
	t.Parallel()
	nc, err := nats.Connect("nats://127.0.0.1:1", nats.RetryOnFailedConnect(true), nats.MaxReconnects(0))
	require.NoError(t, err)
	defer nc.Close()
	_, err = bus.NewPublisher(nc, pubConfig(t), testLogger(t))
	require.ErrorContains(t, err, "reconnect buffer")

	// The keys it reads are checked by their sections, named as keys.
	_, err = bus.NewPublisher(nc, bus.PublisherConfig{}, testLogger(t))
	for _, key := range []string{"nats.max_in_flight", "nats.ack_timeout", "spool.max_bytes"} {
		require.ErrorContains(t, err, key+":")
	}
}

func TestPublishInvalidEvent(t *testing.T) {
	skipShort(t)
	s := natstest.Start(t)
	jsFor(t, s)
	p, err := bus.NewPublisher(connect(t, s.ClientURL()), pubConfig(t), testLogger(t))
	require.NoError(t, err)
	defer p.Close(testCtx(t))
	ev := runEvents(t, "run-g", 1)[1]
	ev.SetType("io.gttsplit.log.lines.v7")
	require.ErrorIs(t, p.Publish(testCtx(t), ev, nil), events.ErrUnknownType)
}

// TestCloseSpoolsInFlightIntegration closes with an expired context while
// events are in flight or queued: none is lost, they wait in the spool, and
// the next publisher on the spool delivers them (once).
func TestCloseSpoolsInFlightIntegration(t *testing.T) {
	skipShort(t)
	s := natstest.Start(t)
	js := jsFor(t, s)
	cfg := pubConfig(t)
	p, err := bus.NewPublisher(connect(t, s.ClientURL()), cfg, testLogger(t))
	require.NoError(t, err)
	evs := runEvents(t, "run-h", 150)
	a := newAcks()
	publishAll(t, p, evs, a)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, p.Close(ctx))
	st := p.Stats()
	require.Zero(t, st.Dropped)
	require.Equal(t, uint64(len(evs)), st.Published+st.Spooled, "every event is acknowledged or spooled")
	require.Equal(t, len(evs), a.total())

	p2, err := bus.NewPublisher(connect(t, s.ClientURL()), cfg, testLogger(t))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return p2.Stats().SpoolBytes == 0 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, p2.Close(testCtx(t)))
	waitMsgs(t, js, uint64(len(evs)))
	requireExactlyOnceInOrder(t, exportAll(t, js, bus.Range{}), evs)
}

// TestPublishNoStreamIntegration publishes to a broker that has no events
// stream yet (a collector creates none: the aggregator does when it
// starts): the events are spooled, the publisher says once why, and once
// the stream exists they are delivered, once each, in order.
func TestPublishNoStreamIntegration(t *testing.T) {
	skipShort(t)
	s := natstest.Start(t)
	js := bareJS(t, s)
	var logs syncBuf
	p, err := bus.NewPublisher(connect(t, s.ClientURL()), pubConfig(t), zerolog.New(&logs))
	require.NoError(t, err)
	evs := runEvents(t, "run-nostream", 30)
	a := newAcks()
	publishAll(t, p, evs, a)
	require.Eventually(t, func() bool { return p.Stats().Spooled > 0 }, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "no stream takes the events") }, 30*time.Second, 10*time.Millisecond)
	_, err = bus.EnsureStream(testCtx(t), js, bus.DefaultStreamConfig(), zerolog.Nop())
	require.NoError(t, err)
	requireDrainedOnce(t, p, js, evs, a)
	require.Equal(t, 1, strings.Count(logs.String(), "no stream takes the events"), "said once")
}
