package runtable_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// On a replicated state bucket a checkpoint's writes, a pass of closes
// and a pass of settled splits each go to the broker as one atomic batch
// (one round trip and one replication round for all of them), not one
// write at a time, and each run's split is written once, equal to its
// replay. The test watches every message published on the bucket's
// subjects (a plain subscriber sees them with their headers) and counts
// the commits: the messages sent apart (no batch) and the batches.
func TestStateWritesInBatchesIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	cl := natstest.StartCluster(t, 3)
	b := &rt.Broker{URL: cl.URLs()}
	b.NC, b.JS = rt.Connect(t, b.URL)

	type write struct{ key, batch, op string }
	var mu sync.Mutex
	var seen []write
	writes, apart, pendPurges := 0, 0, 0
	batches := map[string]int{}
	watch, _ := rt.Connect(t, b.URL)
	_, err := watch.Subscribe("$KV."+runtable.Bucket+".>", func(m *nats.Msg) {
		key := strings.TrimPrefix(m.Subject, "$KV."+runtable.Bucket+".")
		if strings.HasPrefix(key, "lease.") {
			return // the leases' renewals: the fleet's
		}
		mu.Lock()
		defer mu.Unlock()
		writes++
		seen = append(seen, write{key: key, batch: m.Header.Get("Nats-Batch-Id"), op: m.Header.Get("KV-Operation")})
		if strings.HasPrefix(key, "pend.") && m.Header.Get("KV-Operation") == "PURGE" {
			pendPurges++
		}
		if id := m.Header.Get("Nats-Batch-Id"); id != "" {
			batches[id]++
		} else {
			apart++
		}
	})
	require.NoError(t, err)
	require.NoError(t, watch.Flush())

	const n = 24
	a, runs := foldReplicated(t, b, "batch", fx, n)
	// The sink settled every split: the pending markers' purges follow.
	rt.Eventually(t, "every pending marker purged", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return pendPurges >= n
	})
	a.stop()

	mu.Lock()
	defer mu.Unlock()
	commits := apart + len(batches)
	t.Logf("%d runs: %d writes of the state bucket in %d commits (%d batches, %d writes apart)", n, writes, commits, len(batches), apart)
	require.LessOrEqual(t, commits*2, writes, "writes of a checkpoint, a pass of closes, go as batches")
	// Each close is one batch with the others of its pass: the run's
	// closed state, its pending marker and its summary.
	for _, r := range runs {
		closed := "run." + r.Origin.RunID
		var batch string
		for _, w := range seen {
			if w.key == closed && w.op == "" {
				batch = w.batch
			}
		}
		require.NotEmpty(t, batch, "run %s: its closed state written in a batch", r.Origin.RunID)
		with := map[string]bool{}
		for _, w := range seen {
			if w.batch == batch && w.op == "" && strings.HasSuffix(w.key, "."+closed) {
				with[strings.SplitN(w.key, ".", 2)[0]] = true
			}
		}
		require.Equal(t, map[string]bool{"pend": true, "sum": true}, with, "run %s: its pending marker and summary in its close's batch", r.Origin.RunID)
	}
}

// A run made complete is closed as it is, at the partition loop's next
// pass: its closed state holds every event it folded, and its events are
// acknowledged once that is written. No checkpoint is started for it, so
// the partition's other runs are not written again for it, and the run's
// open state is never written (with a checkpoint interval of a minute the
// only write of the run is its close). The old code started a checkpoint
// when a run became complete: an open state written, then the close.
func TestCompleteRunClosedWithoutCheckpointIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	var mu sync.Mutex
	var opens []string
	watch, _ := rt.Connect(t, b.URL)
	_, err := watch.Subscribe("$KV."+runtable.Bucket+".open.>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		opens = append(opens, m.Subject)
	})
	require.NoError(t, err)
	require.NoError(t, watch.Flush())

	a := startTable(t, b.URL, "closeasis", tableConfig{idle: time.Hour,
		consumer: runtable.ConsumerConfig{AckWait: 4 * time.Minute, CheckpointInterval: time.Minute}})
	a.waitOwns(a.parts)
	b.Publish(t, fx.Wires...)
	// Acknowledged well before the checkpoint interval: by the close.
	rt.Eventually(t, "the run closed", func() bool { n, _ := a.closes.count(); return n == 1 })
	b.WaitAcked(t, "closeasis")
	got, err := split.JSON(a.closes.of(fx.Origin.RunID)[0])
	require.NoError(t, err)
	require.Equal(t, string(fx.Want), string(got))
	st := b.State(t, fx.Origin.RunID, rt.FoldOptions(t))
	require.True(t, st.Closed)
	require.Equal(t, string(fx.Want), st.Reported)
	require.NoError(t, watch.Flush())
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, opens, "no open state written for a run complete before its checkpoint")
}

// A lease lost in the middle of a close's writes, after its closed state
// went through (the key deleted then, as one that expired while a loaded
// machine delayed its renewal): a complete run closed before any
// checkpoint has no open key, so the partition's next owner (this table,
// taking the partition again) finds it closed and takes its events again
// for duplicates. Its split is reported once, by the table that wrote the
// closed state. The old code counted the close as not written ("closed
// again later") and nobody ever reported the run. Serial: the hook is the
// package's.
func TestLeaseLostAfterClosedStateReportedOnceIntegration(t *testing.T) {
	skipShort(t)
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	const group = "lostclose"
	a := startTable(t, b.URL, group, tableConfig{idle: time.Hour,
		consumer: runtable.ConsumerConfig{AckWait: 4 * time.Minute, CheckpointInterval: time.Minute}})
	a.waitOwns(a.parts)
	kv, err := b.JS.KeyValue(rt.Ctx(t), runtable.Bucket)
	require.NoError(t, err)
	lease := fmt.Sprintf("lease.%s.%d", group, bus.PartitionOf(fx.Origin.RunID, a.parts))
	var once sync.Once
	deleted := make(chan struct{})
	t.Cleanup(runtable.OnCommitted(func(key string) {
		if key == runtable.StateKey(fx.Origin.RunID) {
			once.Do(func() {
				if err := kv.Delete(rt.Ctx(t), lease); err != nil {
					t.Errorf("the lease not deleted: %v", err)
				}
				close(deleted)
			})
		}
	}))
	b.Publish(t, fx.Wires...)
	select {
	case <-deleted:
	case <-time.After(rt.WaitFor):
		t.Fatal("the run's closed state was not written")
	}
	rt.Eventually(t, "the run reported", func() bool { n, _ := a.closes.count(); return n >= 1 })
	b.WaitAcked(t, group)
	a.stop()
	splits, runs := a.closes.count()
	require.Equal(t, 1, runs)
	require.Equal(t, 1, splits, "reported once")
	got, err := split.JSON(a.closes.of(fx.Origin.RunID)[0])
	require.NoError(t, err)
	require.Equal(t, string(fx.Want), string(got))
	st := b.State(t, fx.Origin.RunID, rt.FoldOptions(t))
	require.True(t, st.Closed)
}

// A batch the servers refuse as a whole (here: more writes than they take
// in one, max_batch_size 2) is sent again one write at a time: every run
// is closed once with its replay's split, its pending marker purged.
func TestRefusedBatchesWrittenOneAtATimeIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	cl := natstest.StartClusterWith(t, 3, func(o *server.Options) { o.JetStreamLimits.MaxBatchSize = 2 })
	b := &rt.Broker{URL: cl.URLs()}
	b.NC, b.JS = rt.Connect(t, b.URL)
	var mu sync.Mutex
	apart, pendPurges := 0, 0
	watch, _ := rt.Connect(t, b.URL)
	_, err := watch.Subscribe("$KV."+runtable.Bucket+".>", func(m *nats.Msg) {
		key := strings.TrimPrefix(m.Subject, "$KV."+runtable.Bucket+".")
		mu.Lock()
		defer mu.Unlock()
		if m.Header.Get("Nats-Batch-Id") == "" && !strings.HasPrefix(key, "lease.") {
			apart++
		}
		if strings.HasPrefix(key, "pend.") && m.Header.Get("KV-Operation") == "PURGE" {
			pendPurges++
		}
	})
	require.NoError(t, err)
	require.NoError(t, watch.Flush())

	const n = 8
	_, runs := foldReplicated(t, b, "refused", fx, n)
	for _, r := range runs {
		st := b.State(t, r.Origin.RunID, rt.FoldOptions(t))
		require.True(t, st.Closed, "run %s: its closed state stored", r.Origin.RunID)
	}
	rt.Eventually(t, "every pending marker purged", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return pendPurges >= n
	})
	b.WaitAcked(t, "refused")
	mu.Lock()
	defer mu.Unlock()
	require.Positive(t, apart, "the refused batches' writes sent one at a time")
}

// foldReplicated starts a table of group whose state bucket is replicated
// (3 replicas on b's cluster) and whose splits go to a sink, publishes n
// runs made of fx interleaved, and checks that each was closed once with
// its replay's split. It returns the table and the runs.
func foldReplicated(t *testing.T, b *rt.Broker, group string, fx rt.Fixture, n int) (*table, []rt.Run) {
	t.Helper()
	a := startTable(t, b.URL, group, tableConfig{sinks: memSinks(new(sinktest.Memory), nil), edit: func(c *config.Aggregator) {
		c.NATS.Replicas = 3
	}})
	a.waitOwns(a.parts)
	runs := rt.Gen(t, n, fx)
	b.Publish(t, rt.Interleave(runs)...)
	// Fails only when nothing was folded or written for rt.WaitFor: 24
	// runs on an R3 cluster under -race at load ~30 took past a minute.
	waitSplits(t, a, n)
	for _, r := range runs {
		got := a.closes.of(r.Origin.RunID)
		require.Len(t, got, 1, "run %s: one split", r.Origin.RunID)
		js, err := split.JSON(got[0])
		require.NoError(t, err)
		require.Equal(t, string(rt.ReplayJSON(t, r.Wires, rt.FoldOptions(t))), string(js), "run %s", r.Origin.RunID)
	}
	return a, runs
}

// Whether the table writes in atomic batches follows the state bucket's
// configuration as the watch reads it: a bucket that stops taking them
// (a commit refused) and takes them again later gets them again, as does
// a table whose read of the configuration at its start went unanswered
// on a busy broker (one write at a time for its whole life before).
func TestAtomicBatchesFollowTheBucketIntegration(t *testing.T) {
	skipShort(t)
	// Put back after the table stopped (cleanups run last first).
	t.Cleanup(runtable.SetWatchEvery(100*time.Millisecond, 300*time.Millisecond))
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	cl := natstest.StartCluster(t, 3)
	b := &rt.Broker{URL: cl.URLs()}
	b.NC, b.JS = rt.Connect(t, b.URL)

	var mu sync.Mutex
	batches := map[string]bool{}
	watch, _ := rt.Connect(t, b.URL)
	_, err := watch.Subscribe("$KV."+runtable.Bucket+".>", func(m *nats.Msg) {
		if id := m.Header.Get("Nats-Batch-Id"); id != "" && !strings.Contains(m.Subject, ".lease.") {
			mu.Lock()
			batches[id] = true
			mu.Unlock()
		}
	})
	require.NoError(t, err)
	require.NoError(t, watch.Flush())
	batchesSeen := func() int { mu.Lock(); defer mu.Unlock(); return len(batches) }

	mem := new(sinktest.Memory)
	a := startTable(t, b.URL, "follow", tableConfig{sinks: memSinks(mem, nil), edit: func(c *config.Aggregator) {
		c.NATS.Replicas = 3
	}})
	a.waitOwns(a.parts)
	require.True(t, a.tbl.AtomicBatches(), "the bucket takes atomic batches at the start")

	allow := func(on bool) {
		ctx := rt.Ctx(t)
		st, err := b.JS.Stream(ctx, "KV_"+runtable.Bucket)
		require.NoError(t, err)
		sc := st.CachedInfo().Config
		sc.AllowAtomicPublish = on
		_, err = b.JS.UpdateStream(ctx, sc)
		require.NoError(t, err)
	}
	runs := rt.Gen(t, 16, fx)
	allow(false)
	b.Publish(t, rt.Interleave(runs[:8])...)
	// The splits are counted at the sink: a close whose commit went
	// through unanswered (the run left unsure) is not closed again, and
	// once its partition was lost and taken again (a loaded machine) the
	// table sends its pending split to the sinks from the bucket, past
	// OnClose. The waits fail only when nothing was folded and no split
	// reached the sink for rt.WaitFor: 8 runs on an R3 cluster under
	// -race on a loaded machine took past a minute in all.
	delivered := func(n int) {
		t.Helper()
		seen, deadline := -1.0, time.Now()
		for len(mem.Runs()) < n {
			folded := counter(t, a.m, "gttsplit_events_folded_total")
			if p := folded + float64(len(mem.Runs())); p > seen {
				seen, deadline = p, time.Now().Add(rt.WaitFor)
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %d splits at the sink: %d there, %.0f folds, none more for %v", n, len(mem.Runs()), folded, rt.WaitFor)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	delivered(8)
	rt.Eventually(t, "the table writes one at a time", func() bool { return !a.tbl.AtomicBatches() })
	before := batchesSeen()

	allow(true)
	rt.Eventually(t, "the table takes atomic batches again once the bucket allows them", a.tbl.AtomicBatches)
	b.Publish(t, rt.Interleave(runs[8:])...)
	delivered(16)
	require.Greater(t, batchesSeen(), before, "the runs closed after the bucket allowed batches again went in atomic batches")
	for _, r := range runs {
		require.LessOrEqual(t, len(a.closes.of(r.Origin.RunID)), 1, "run %s: closed once", r.Origin.RunID)
	}
}
