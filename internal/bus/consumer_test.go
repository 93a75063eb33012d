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

// TestAckRefIntegration settles messages through their AckRef after the
// handler returned (as the run table does after a checkpoint): a nak'ed
// one comes again, one kept in progress past its ack wait is not
// redelivered, every acked one is settled, and the consumer ends with
// nothing pending.
func TestAckRefIntegration(t *testing.T) {
	skipShort(t)
	js, byRun := startWithEvents(t, "run-r")
	ctx := testCtx(t)
	const ackWait = time.Second
	c, err := js.CreateOrUpdateConsumer(ctx, bus.DefaultStream, jetstream.ConsumerConfig{Durable: "refs",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait})
	require.NoError(t, err)
	want := len(byRun["run-r"])
	var mu sync.Mutex
	var refs []bus.AckRef
	seen := map[uint64]int{}
	done := make(chan struct{})
	var once sync.Once
	var held bus.AckRef
	cc, err := c.Consume(func(jm jetstream.Msg) {
		m, err := bus.WrapMsg(jm, js.Conn())
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		seq := m.Metadata().StreamSeq
		seen[seq]++
		ref := m.AckRef()
		switch {
		case seq == 2 && m.Metadata().NumDelivered == 1:
			require.NoError(t, ref.Nak())
			return
		case seq == 3:
			held = ref // settled later, after two ack waits, kept in progress
			return
		}
		refs = append(refs, ref)
		if len(refs) == want-1 {
			for _, r := range refs {
				require.NoError(t, r.Ack())
			}
			once.Do(func() { close(done) })
		}
	})
	require.NoError(t, err)
	defer cc.Stop()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("not every message came")
	}
	for range 4 {
		time.Sleep(ackWait / 2)
		mu.Lock()
		require.NoError(t, held.InProgress())
		mu.Unlock()
	}
	mu.Lock()
	require.NoError(t, held.Ack())
	require.Equal(t, 2, seen[2], "the nak'ed message came again")
	require.Equal(t, 1, seen[3], "the one in progress did not")
	mu.Unlock()
	require.Eventually(t, func() bool {
		ci, err := c.Info(testCtx(t))
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0
	}, 10*time.Second, 20*time.Millisecond)
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
	require.Equal(t, samples, exportAll(t, js, bus.Range{Subjects: bus.StoredFilters(events.KindFDInfo, "", "", "run-late")}).ids)
	require.Empty(t, exportAll(t, js, bus.Range{Subjects: bus.StoredFilters(events.KindSplit, "", "", "")}).ids)

	// fn's error stops the export.
	n, err := bus.Export(testCtx(t), js, bus.DefaultStream, bus.Range{}, func(bus.Msg) error { return errors.New("stop") })
	require.EqualError(t, err, "stop")
	require.Zero(t, n)
}

// TestExportPullsAgainAfterSilenceIntegration: a pull whose messages and
// heartbeats stop for longer than nats.go waits (twice the 5 s heartbeat
// of a long pull) ends with "no heartbeat received"; on a loaded machine a
// broker or a reader starved that long is not gone (beside CI at load ~37
// it failed a test's read of the stream). Export pulls again from where it
// was and hands every message once.
func TestExportPullsAgainAfterSilenceIntegration(t *testing.T) {
	skipShort(t)
	s := natstest.Start(t)
	js := jsFor(t, s)
	evs := storedRun(t, s, js, "run-silent", 4)

	proxy := natstest.StartProxy(t, s.Addr().String())
	via := natstest.JetStream(t, proxy.URL())
	var got []string
	var held <-chan struct{}
	_, err := bus.Export(testCtx(t), via, bus.DefaultStream, bus.Range{Batch: 2}, func(m bus.Msg) error {
		d, err := m.Decode()
		if err != nil {
			return err
		}
		got = append(got, d.ID)
		if held == nil {
			// The next pull's messages and heartbeats are held for
			// 12 s: nats.go gives up on it after 10 s.
			held = proxy.HoldServerWhenClientSends([]byte("CONSUMER.MSG.NEXT"))
			go func() {
				<-held
				time.Sleep(12 * time.Second)
				proxy.ReleaseServer()
			}()
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, ids(evs), got)
	select {
	case <-held:
	default:
		t.Fatal("no pull was held")
	}
}

// TestExportLeavesNoConsumerIntegration: each export deletes the consumer
// it read with. The broker counts ordered consumers against the stream's
// consumer limit (here 20) and nats.go asks it to keep each 5 minutes
// after its last pull: without the delete, the 21st export in a row (a
// status poll, a test waiting for an event) was refused.
func TestExportLeavesNoConsumerIntegration(t *testing.T) {
	skipShort(t)
	opts := natstest.Options(t.TempDir(), -1)
	opts.JetStreamLimits.DefaultMaxConsumers = 20
	s, err := natstest.NewServerWithOptions(opts)
	require.NoError(t, err)
	t.Cleanup(func() { natstest.Shutdown(s) })
	js := jsFor(t, s)
	evs := storedRun(t, s, js, "run-poll", 4)
	for i := 0; i < 60; i++ {
		require.Len(t, exportAll(t, js, bus.Range{}).ids, len(evs), "export %d", i+1)
	}
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

	// Whoever holds the stream's administration cannot delete, purge or
	// roll up its events, nor allow it again.
	_, err = js.Publish(testCtx(t), "gttsplit.log.h.l.r", []byte("event"))
	require.NoError(t, err)
	require.Error(t, st.Purge(testCtx(t)))
	require.Error(t, st.DeleteMsg(testCtx(t), 1))
	upd := info.Config
	upd.DenyPurge, upd.DenyDelete = false, false
	_, err = js.UpdateStream(testCtx(t), upd)
	require.Error(t, err)
	upd = info.Config
	upd.AllowRollup = true
	_, err = js.UpdateStream(testCtx(t), upd)
	require.Error(t, err)
	info, err = st.Info(testCtx(t))
	require.NoError(t, err)
	require.EqualValues(t, 1, info.State.Msgs)
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
	js := natstest.JetStream(t, c.URLs())
	ctx := testCtx(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
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

	// Fewer replicas are raised. (Another stream name and subjects: a
	// cluster removes a deleted stream's store asynchronously, and creating
	// the same name at once can fail with "error creating store".)
	const r1 = "GTTSPLIT_R1"
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: r1, Subjects: []string{"r1.>"}, Duplicates: 2 * time.Minute})
	require.NoError(t, err)
	cfg.Name, cfg.Subjects, cfg.Replicas, cfg.MaxAge = r1, []string{"r1.>"}, 3, 0
	st, err = bus.EnsureStream(ctx, js, cfg, zerolog.Nop())
	require.NoError(t, err)
	info, err = st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, info.Config.Replicas)
}

// The events stream stores every event of a run under the partition
// PartitionOf computes, as the server's transform maps it (the run's
// subject token hashed: ids too long or odd for a token are hashed too);
// PublishedSubject gives the published subject back; StoredFilters find
// the run's events.
func TestPartitionsMatchTheServer(t *testing.T) {
	skipShort(t)
	s := natstest.Start(t)
	js := bareJS(t, s)
	ctx := testCtx(t)
	cfg := bus.DefaultStreamConfig()
	cfg.Partitions = 7
	_, err := bus.EnsureStream(ctx, js, cfg, zerolog.Nop())
	require.NoError(t, err)
	var logs syncBuf
	lay, err := bus.EnsurePartitioned(ctx, js, bus.DefaultStream, 16, 1, zerolog.New(&logs))
	require.NoError(t, err)
	require.Equal(t, bus.Layout{Partitions: 7}, lay, "an existing stream keeps its count")
	require.Contains(t, logs.String(), `"setting":"consumer.partitions"`)
	ids := []string{"run-a", "x.y z", strings.Repeat("long", 30)}
	for i := 0; i < 50; i++ {
		ids = append(ids, fmt.Sprintf("run-%d", i))
	}
	var published []string
	for _, id := range ids {
		subj := events.Subject(events.KindLog, "h", "lane-a", id)
		_, err := js.Publish(ctx, subj, []byte(id))
		require.NoError(t, err)
		published = append(published, subj)
	}
	st, err := js.Stream(ctx, bus.DefaultStream)
	require.NoError(t, err)
	for i, id := range ids {
		m, err := st.GetMsg(ctx, uint64(i+1))
		require.NoError(t, err)
		toks := strings.Split(m.Subject, ".")
		require.Len(t, toks, 6, m.Subject)
		require.Equal(t, fmt.Sprint(bus.PartitionOf(id, 7)), toks[2], "run %q", id)
		require.Equal(t, published[i], bus.PublishedSubject(m.Subject))
		p := bus.PartitionOf(id, 7)
		c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: bus.PartitionFilters(p, "lane-a")})
		require.NoError(t, err)
		info, err := c.Info(ctx)
		require.NoError(t, err)
		require.NotZero(t, info.NumPending, "partition %d's filter", p)
		c, err = st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: bus.StoredFilters(events.KindLog, "", "", id)})
		require.NoError(t, err)
		info, err = c.Info(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, info.NumPending, "run %q's filter", id)
	}
}

// earlierStream is the events stream as an earlier version made it (no
// transform), holding 10 events stored under five-token subjects.
func earlierStream(t *testing.T) (jetstream.JetStream, context.Context) {
	t.Helper()
	js := bareJS(t, natstest.Start(t))
	ctx := testCtx(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: bus.DefaultStream, Subjects: []string{"gttsplit.>"}})
	require.NoError(t, err)
	for i := 0; i < 10; i++ {
		_, err := js.Publish(ctx, events.Subject(events.KindRun, "h", "l", fmt.Sprintf("old-%d", i)), []byte("old"))
		require.NoError(t, err)
	}
	return js, ctx
}

// A stream made by an earlier version (no transform, events stored under
// five-token subjects, none consumed) is partitioned at ingest from now
// on. With no partitioned stream of earlier versions the earlier events
// are counted (Unfolded), and no such stream is created: the aggregator's
// credential may not.
func TestEnsurePartitionedUnfoldedIntegration(t *testing.T) {
	skipShort(t)
	js, ctx := earlierStream(t)
	lay, err := bus.EnsurePartitioned(ctx, js, bus.DefaultStream, 4, 1, zerolog.Nop())
	require.NoError(t, err)
	require.Equal(t, bus.Layout{Partitions: 4, Unfolded: 10}, lay)
	_, err = js.Publish(ctx, events.Subject(events.KindRun, "h", "l", "new-0"), []byte("new"))
	require.NoError(t, err)
	st, err := js.Stream(ctx, bus.DefaultStream)
	require.NoError(t, err)
	m, err := st.GetMsg(ctx, 11)
	require.NoError(t, err)
	require.Len(t, strings.Split(m.Subject, "."), 6, "partitioned from now on")
	_, err = js.Stream(ctx, bus.LegacyStream(bus.DefaultStream))
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "no partitioned copy created")
	lay, err = bus.EnsurePartitioned(ctx, js, bus.DefaultStream, 16, 1, zerolog.Nop())
	require.NoError(t, err)
	require.Equal(t, bus.Layout{Partitions: 4}, lay, "again: nothing changes")
}

// A stream an earlier version partitioned through a second, sourced stream
// (<stream>_PARTS) is partitioned at ingest with that stream's partition
// count; the partitions' consumers drain the second stream, which
// RetireLegacy deletes only once they did.
func TestEnsurePartitionedDrainsLegacyIntegration(t *testing.T) {
	skipShort(t)
	js, ctx := earlierStream(t)
	// The earlier version's partitioned copy: 4 partitions.
	var tr []jetstream.SubjectTransformConfig
	for _, k := range []string{"run", "log", "fdinfo"} {
		tr = append(tr, jetstream.SubjectTransformConfig{
			Source:      "gttsplit." + k + ".*.*.*",
			Destination: "gttsplitp.{{partition(4,3)}}." + k + ".{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}",
		})
	}
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: bus.LegacyStream(bus.DefaultStream),
		Sources: []*jetstream.StreamSource{{Name: bus.DefaultStream, SubjectTransforms: tr}}})
	require.NoError(t, err)
	lay, err := bus.EnsurePartitioned(ctx, js, bus.DefaultStream, 16, 1, zerolog.Nop())
	require.NoError(t, err)
	require.Equal(t, bus.Layout{Partitions: 4, Legacy: true}, lay, "the earlier stream's partition count")
	lay, err = bus.EnsurePartitioned(ctx, js, bus.DefaultStream, 16, 1, zerolog.Nop())
	require.NoError(t, err)
	require.Equal(t, bus.Layout{Partitions: 4, Legacy: true}, lay, "again: nothing changes")

	ls, err := js.Stream(ctx, bus.LegacyStream(bus.DefaultStream))
	require.NoError(t, err)
	waitUntil(t, "the old events sourced", func() bool {
		info, err := ls.Info(ctx)
		return err == nil && info.State.Msgs == 10
	})
	gone, err := bus.RetireLegacy(ctx, js, bus.DefaultStream, "g", 4)
	require.NoError(t, err)
	require.False(t, gone, "not consumed yet")
	for p := 0; p < 4; p++ {
		c, err := ls.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: bus.ConsumerName("g", p),
			FilterSubject: bus.LegacyFilter(p, ""), AckPolicy: jetstream.AckExplicitPolicy})
		require.NoError(t, err)
		for {
			batch, err := c.FetchNoWait(100)
			require.NoError(t, err)
			n := 0
			for m := range batch.Messages() {
				require.NoError(t, m.DoubleAck(ctx))
				n++
			}
			if n == 0 {
				break
			}
		}
	}
	gone, err = bus.RetireLegacy(ctx, js, bus.DefaultStream, "g", 4)
	require.NoError(t, err)
	require.True(t, gone)
	_, err = js.Stream(ctx, bus.LegacyStream(bus.DefaultStream))
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
}

// waitUntil polls cond until it holds, for at most 30 s.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// On a cluster, Export reads the whole stream from every node, again and
// again: an ordered consumer just created on the stream's leader may not
// be reachable from another node for a moment (its pull request finds no
// responders), and Export asks again rather than failing.
func TestExportOnEveryClusterNode(t *testing.T) {
	skipShort(t)
	c := natstest.StartCluster(t, 3)
	ctx := testCtx(t)
	var jss []jetstream.JetStream
	for _, s := range c.Servers {
		jss = append(jss, natstest.JetStream(t, s.ClientURL()))
	}
	cfg := bus.DefaultStreamConfig()
	cfg.Replicas = 3
	_, err := bus.EnsureStream(ctx, jss[0], cfg, zerolog.Nop())
	require.NoError(t, err)
	for i := range 20 {
		_, err := jss[0].Publish(ctx, fmt.Sprintf("gttsplit.log.0.h.l.run-%d", i), []byte("{}"))
		require.NoError(t, err)
	}
	for round := range 30 {
		for i, js := range jss {
			// Each export under its own bound: 90 of them under -race on a
			// loaded machine outlast one.
			n, err := bus.Export(testCtx(t), js, bus.DefaultStream, bus.Range{}, func(bus.Msg) error { return nil })
			require.NoError(t, err, "round %d, node %d", round, i)
			require.Equal(t, 20, n)
		}
	}
}
