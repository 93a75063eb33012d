package bus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
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

// TestAckRefIntegration settles messages through their AckRef after the
// handler returned (as the aggregator does after a checkpoint): a nak'ed
// one comes again, every acked one is settled, and the consumer ends with
// nothing pending.
func TestAckRefIntegration(t *testing.T) {
	skipShort(t)
	js, byRun := startWithEvents(t, "run-r")
	cfg := bus.DefaultConsumerConfig()
	cfg.Durable = "refs"
	cons, err := bus.NewConsumer(testCtx(t), js, cfg, testLogger(t))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want := len(byRun["run-r"])
	var refs []bus.AckRef
	seen := map[uint64]int{}
	acked := 0
	err = cons.Consume(ctx, func(_ context.Context, m bus.Msg) error {
		seen[m.Metadata().StreamSeq]++
		ref := m.AckRef()
		if m.Metadata().StreamSeq == 2 && m.Metadata().NumDelivered == 1 {
			return ref.Nak()
		}
		refs = append(refs, ref)
		if len(refs) == 3 || acked+len(refs) == want {
			for _, r := range refs {
				require.NoError(t, r.Ack())
			}
			acked += len(refs)
			refs = nil
		}
		if acked == want {
			cancel()
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, want, acked)
	require.Equal(t, 2, seen[2], "the nak'ed message came again")
	c, err := js.Consumer(testCtx(t), bus.DefaultStream, cfg.Durable)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ci, err := c.Info(testCtx(t))
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0
	}, 10*time.Second, 20*time.Millisecond)
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

// TestEnsureStreamIntegration creates the stream.
func TestEnsureStreamIntegration(t *testing.T) {
	skipShort(t)
	s := natstest.Start(t)
	js := bareJS(t, s) // no stream yet: deleting one and creating it again at once can race the store's removal
	cfg := bus.DefaultStreamConfig()
	cfg.DuplicateWindow = 5 * time.Minute
	st, err := bus.EnsureStream(testCtx(t), js, cfg, zerolog.Nop())
	require.NoError(t, err)
	info, err := st.Info(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, 5*time.Minute, info.Config.Duplicates)
	require.Equal(t, jetstream.FileStorage, info.Config.Storage)
	require.Equal(t, []string{"gttsplit.>"}, info.Config.Subjects)
}

// syncBuf is a log sink safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// An operator's stream is never lowered by a client started with the
// defaults: its max age, max bytes and duplicate window stay, and each
// difference is one warning naming the setting.
func TestEnsureStreamNeverLowers(t *testing.T) {
	skipShort(t)
	s := natstest.Start(t)
	js := bareJS(t, s) // no stream yet: deleting one and creating it again at once can race the store's removal
	_, err := js.CreateStream(testCtx(t), jetstream.StreamConfig{
		Name: bus.DefaultStream, Subjects: []string{"gttsplit.>"}, Storage: jetstream.FileStorage,
		MaxAge: 7 * 24 * time.Hour, MaxBytes: 1 << 30, Duplicates: 10 * time.Minute,
	})
	require.NoError(t, err)
	var logs syncBuf
	st, err := bus.EnsureStream(testCtx(t), js, bus.DefaultStreamConfig(), zerolog.New(&logs))
	require.NoError(t, err)
	info, err := st.Info(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, 7*24*time.Hour, info.Config.MaxAge)
	require.Equal(t, int64(1<<30), info.Config.MaxBytes)
	require.Equal(t, 10*time.Minute, info.Config.Duplicates)
	for _, key := range []string{"nats.stream_max_age", "nats.stream_max_bytes", "nats.duplicate_window"} {
		require.Contains(t, logs.String(), `"setting":"`+key+`"`)
	}
	require.NotContains(t, logs.String(), "nats.replicas")

	// A missing stream is created with the configured limits (on a fresh
	// server: a stream deleted and created again at once can race the
	// store's removal).
	cfg := bus.DefaultStreamConfig()
	cfg.MaxAge, cfg.MaxBytes, cfg.DuplicateWindow = 48*time.Hour, 1<<28, 5*time.Minute
	st, err = bus.EnsureStream(testCtx(t), bareJS(t, natstest.Start(t)), cfg, zerolog.Nop())
	require.NoError(t, err)
	info, err = st.Info(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, 48*time.Hour, info.Config.MaxAge)
	require.Equal(t, int64(1<<28), info.Config.MaxBytes)
	require.Equal(t, 5*time.Minute, info.Config.Duplicates)
}

// On a cluster, an operator's R3 stream stays R3 for a client asking R1
// (one warning), and an R1 stream is raised for a client asking R3.
func TestEnsureStreamReplicasOnCluster(t *testing.T) {
	skipShort(t)
	c := natstest.StartCluster(t, 3)
	nc, err := nats.Connect(c.URLs())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := testCtx(t)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name: bus.DefaultStream, Subjects: []string{"gttsplit.>"}, Storage: jetstream.FileStorage,
		Replicas: 3, MaxAge: time.Hour, Duplicates: 2 * time.Minute,
	})
	require.NoError(t, err)
	var logs syncBuf
	cfg := bus.DefaultStreamConfig()
	cfg.MaxAge = time.Hour
	st, err := bus.EnsureStream(ctx, js, cfg, zerolog.New(&logs))
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, info.Config.Replicas)
	require.Equal(t, time.Hour, info.Config.MaxAge)
	require.Contains(t, logs.String(), `"setting":"nats.replicas"`)
	require.Equal(t, 1, strings.Count(logs.String(), `"level":"warn"`), logs.String())

	// The consumer of a client asking R1 takes the stream's replicas.
	cc := bus.DefaultConsumerConfig()
	cc.Replicas = 1
	_, err = bus.NewConsumer(ctx, js, cc, zerolog.Nop())
	require.NoError(t, err)
	ci, err := js.Consumer(ctx, bus.DefaultStream, cc.Durable)
	require.NoError(t, err)
	require.Contains(t, []int{0, 3}, ci.CachedInfo().Config.Replicas)
	require.Len(t, ci.CachedInfo().Cluster.Replicas, 2, "a leader and two replicas")

	// Fewer replicas are raised.
	require.NoError(t, js.DeleteStream(ctx, bus.DefaultStream))
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: bus.DefaultStream, Subjects: []string{"gttsplit.>"}, Duplicates: 2 * time.Minute})
	require.NoError(t, err)
	cfg.Replicas, cfg.MaxAge = 3, 0
	st, err = bus.EnsureStream(ctx, js, cfg, zerolog.Nop())
	require.NoError(t, err)
	info, err = st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, info.Config.Replicas)
}

// The partitioned stream puts every event of a run in the partition
// PartitionOf computes, as the server maps it.
func TestPartitionsMatchTheServer(t *testing.T) {
	skipShort(t)
	s := natstest.Start(t)
	js := jsFor(t, s)
	ctx := testCtx(t)
	n, err := bus.EnsurePartitions(ctx, js, bus.PartitionConfig{Stream: bus.DefaultStream, Partitions: 7}, zerolog.Nop())
	require.NoError(t, err)
	require.Equal(t, 7, n)
	var logs syncBuf
	n, err = bus.EnsurePartitions(ctx, js, bus.PartitionConfig{Stream: bus.DefaultStream, Partitions: 16}, zerolog.New(&logs))
	require.NoError(t, err)
	require.Equal(t, 7, n, "an existing partitioned stream keeps its count")
	require.Contains(t, logs.String(), `"setting":"consumer.partitions"`)
	var want []string
	for i := 0; i < 50; i++ {
		subj := events.Subject(events.KindLog, "h", "lane-a", fmt.Sprintf("run-%d", i))
		_, err := js.Publish(ctx, subj, []byte("x"))
		require.NoError(t, err)
		want = append(want, bus.PartitionSubject(subj, 7))
	}
	_, err = js.Publish(ctx, events.Subject(events.KindSplit, "h", "l", "r"), []byte("x"))
	require.NoError(t, err)
	ps, err := js.Stream(ctx, bus.PartitionStream(bus.DefaultStream))
	require.NoError(t, err)
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		got = got[:0]
		info, err := ps.Info(ctx)
		require.NoError(t, err)
		for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
			m, err := ps.GetMsg(ctx, seq)
			require.NoError(t, err)
			got = append(got, m.Subject)
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, want, got, "splits are not sourced")
}
