package bus_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func startWithEvents(t *testing.T, runs ...string) (jetstream.JetStream, map[string][]string) {
	t.Helper()
	s := natstest.Start(t)
	js := jsFor(t, s)
	p, err := bus.NewPublisher(connect(t, s.ClientURL()), pubConfig(t), testLogger(t))
	require.NoError(t, err)
	byRun := map[string][]string{}
	total := 0
	for _, r := range runs {
		evs := runEvents(t, r, 6)
		publishAll(t, p, evs, newAcks())
		byRun[r] = ids(evs)
		total += len(evs)
	}
	require.NoError(t, p.Close(testCtx(t)))
	waitMsgs(t, js, uint64(total))
	return js, byRun
}

// collect consumes until want messages were acked, then cancels.
type collector struct {
	mu     sync.Mutex
	seen   map[string][]uint64 // id -> delivery counts seen
	acked  []string
	cancel context.CancelFunc
	want   int
}

func (c *collector) handle(_ context.Context, m bus.Msg) error {
	d, err := m.Decode()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[d.ID] = append(c.seen[d.ID], m.Metadata().NumDelivered)
	if d.Type == events.TypeLogLines && d.Lines[0].Seq == 4 && m.Metadata().NumDelivered == 1 {
		// The first delivery of one event is refused.
		return m.Nak()
	}
	if err := m.AckSync(context.Background()); err != nil {
		return err
	}
	c.acked = append(c.acked, d.ID)
	if len(c.acked) == c.want {
		c.cancel()
	}
	return nil
}

// TestConsumerRedeliveryIntegration naks one message on its first
// delivery: it comes again with NumDelivered 2, every other message comes
// once, and after the acks nothing is redelivered.
func TestConsumerRedeliveryIntegration(t *testing.T) {
	skipShort(t)
	js, byRun := startWithEvents(t, "run-x")
	cfg := bus.DefaultConsumerConfig()
	cfg.AckWait = 5 * time.Second
	cons, err := bus.NewConsumer(testCtx(t), js, cfg, testLogger(t))
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := &collector{seen: map[string][]uint64{}, cancel: cancel, want: len(byRun["run-x"])}
	require.NoError(t, cons.Consume(ctx, c.handle))
	require.NotErrorIs(t, ctx.Err(), context.DeadlineExceeded, "not every message was acked")

	require.ElementsMatch(t, byRun["run-x"], c.acked)
	naked := "run-x/stdout/4-6"
	require.Equal(t, []uint64{1, 2}, c.seen[naked])
	for id, d := range c.seen {
		if id != naked {
			require.Equal(t, []uint64{1}, d, id)
		}
	}
	info, err := js.Consumer(testCtx(t), bus.DefaultStream, cfg.Durable)
	require.NoError(t, err)
	ci, err := info.Info(testCtx(t))
	require.NoError(t, err)
	require.Zero(t, ci.NumAckPending)
	require.Zero(t, ci.NumPending)
}

// TestConsumerHandlerErrorIntegration returns an error for a message: it is
// redelivered after the nak delay.
func TestConsumerHandlerErrorIntegration(t *testing.T) {
	skipShort(t)
	js, byRun := startWithEvents(t, "run-y")
	cfg := bus.DefaultConsumerConfig()
	cfg.Durable = "errs"
	cfg.NakDelay = 10 * time.Millisecond
	cons, err := bus.NewConsumer(testCtx(t), js, cfg, testLogger(t))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	deliveries := map[string]int{}
	acked := 0
	err = cons.Consume(ctx, func(_ context.Context, m bus.Msg) error {
		d, err := m.Decode()
		require.NoError(t, err)
		deliveries[d.ID]++
		if d.Type == events.TypeRunStarted && m.Metadata().NumDelivered < 3 {
			return errors.New("not yet")
		}
		acked++
		if acked == len(byRun["run-y"]) {
			cancel()
		}
		return m.Ack()
	})
	require.NoError(t, err)
	require.Equal(t, 3, deliveries["run-y/started/0"])
}

// TestConsumerFiltersIntegration consumes one lane's log lines of one host
// with a filter built by events.Filter.
func TestConsumerFiltersIntegration(t *testing.T) {
	skipShort(t)
	js, byRun := startWithEvents(t, "run-1", "run-2")
	cfg := bus.DefaultConsumerConfig()
	cfg.Durable = "logs"
	cfg.FilterSubjects = []string{events.Filter(events.KindLog, "host1", "gpu0", ""), events.Filter(events.KindRun, "", "", "run-2")}
	cons, err := bus.NewConsumer(testCtx(t), js, cfg, testLogger(t))
	require.NoError(t, err)
	var want []string
	for _, r := range []string{"run-1", "run-2"} {
		for _, id := range byRun[r] {
			if containsAny(id, "/stderr/", "/stdout/") || (r == "run-2" && containsAny(id, "/started/", "/finished/")) {
				want = append(want, id)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []string
	require.NoError(t, cons.Consume(ctx, func(_ context.Context, m bus.Msg) error {
		d, err := m.Decode()
		require.NoError(t, err)
		got = append(got, d.ID)
		if len(got) == len(want) {
			cancel()
		}
		return m.Ack()
	}))
	require.ElementsMatch(t, want, got)
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// TestExportIntegration exports by subject filter and by time range.
func TestExportIntegration(t *testing.T) {
	skipShort(t)
	s := natstest.Start(t)
	js := jsFor(t, s)
	p, err := bus.NewPublisher(connect(t, s.ClientURL()), pubConfig(t), testLogger(t))
	require.NoError(t, err)
	first := runEvents(t, "run-early", 4)
	publishAll(t, p, first, newAcks())
	require.NoError(t, p.Flush(testCtx(t)))
	waitMsgs(t, js, uint64(len(first)))
	mid := time.Now()
	time.Sleep(20 * time.Millisecond) // storage timestamps on either side of mid
	second := runEvents(t, "run-late", 4)
	publishAll(t, p, second, newAcks())
	require.NoError(t, p.Close(testCtx(t)))
	waitMsgs(t, js, uint64(len(first)+len(second)))

	all := exportAll(t, js, bus.Range{Batch: 3})
	require.Equal(t, append(ids(first), ids(second)...), all.ids)
	require.Equal(t, ids(second), exportAll(t, js, bus.Range{Start: mid}).ids)
	require.Equal(t, ids(first), exportAll(t, js, bus.Range{End: mid}).ids)
	var samples []string
	for _, id := range ids(second) {
		if containsAny(id, "/fdinfo/") {
			samples = append(samples, id)
		}
	}
	require.Equal(t, samples, exportAll(t, js, bus.Range{Subjects: []string{events.Filter(events.KindFDInfo, "", "", "run-late")}}).ids)
	require.Empty(t, exportAll(t, js, bus.Range{Subjects: []string{events.Filter(events.KindSplit, "", "", "")}}).ids)

	// fn's error stops the export.
	n, err := bus.Export(testCtx(t), js, bus.DefaultStream, bus.Range{}, func(bus.Msg) error { return errors.New("stop") })
	require.EqualError(t, err, "stop")
	require.Zero(t, n)
}

func TestConsumerConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, bus.DefaultConsumerConfig().Validate())
	err := bus.ConsumerConfig{MaxDeliver: 0}.Validate()
	for _, key := range []string{"stream", "durable", "filter_subjects", "ack_wait", "max_deliver", "max_ack_pending"} {
		require.ErrorContains(t, err, key+":")
	}
	require.NoError(t, bus.DefaultStreamConfig().Validate())
	sc := bus.DefaultStreamConfig()
	sc.DuplicateWindow = time.Minute
	require.ErrorContains(t, sc.Validate(), "duplicate_window:")
}

// TestEnsureStreamIntegration creates the stream, then updates it.
func TestEnsureStreamIntegration(t *testing.T) {
	skipShort(t)
	s := natstest.Start(t)
	js := jsFor(t, s)
	cfg := bus.DefaultStreamConfig()
	cfg.DuplicateWindow = 5 * time.Minute
	st, err := bus.EnsureStream(testCtx(t), js, cfg)
	require.NoError(t, err)
	info, err := st.Info(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, 5*time.Minute, info.Config.Duplicates)
	require.Equal(t, jetstream.FileStorage, info.Config.Storage)
	require.Equal(t, []string{"gttsplit.>"}, info.Config.Subjects)
}
