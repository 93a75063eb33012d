package runtable_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// A table crashes mid-run (its connection closed without a checkpoint, so
// some events are folded and not acknowledged); another takes the
// partitions over once the leases expired and folds the rest: the split is
// byte for byte the uninterrupted one, written once.
func TestCrashRestartIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	const group = "crash"
	third := len(fx.Wires) / 3

	a := startTable(t, b.URL, group, tableConfig{idle: time.Hour}, crashLease)
	a.waitOwns(a.parts)
	b.Publish(t, fx.Wires[:third]...)
	b.WaitAcked(t, group) // the first third is durable
	b.Publish(t, fx.Wires[third:2*third]...)
	rt.Eventually(t, "the second third delivered", func() bool {
		ci, err := b.ConsumerInfo(group)
		return err == nil && ci.Delivered.Stream >= uint64(2*third)
	})
	a.crash()
	_, n := a.closes.count()
	require.Zero(t, n)

	c := startTable(t, b.URL, group, tableConfig{idle: time.Hour})
	b.Publish(t, fx.Wires[2*third:]...)
	takeover(t, "the split after the restart", func() bool { n, _ := c.closes.count(); return n >= 1 })
	b.WaitAcked(t, group)
	c.stop()

	got := c.closes.of(fx.Origin.RunID)
	require.Len(t, got, 1, "one split")
	js, err := split.JSON(got[0])
	require.NoError(t, err)
	require.Equal(t, string(fx.Want), string(js))
	require.Equal(t, fx.Report.Detail.Samples, got[0].Detail.Samples, "nothing folded twice")
	st := b.State(t, fx.Origin.RunID, rt.FoldOptions(t))
	require.True(t, st.Closed)
	require.Equal(t, 1, st.Splits)
	require.Equal(t, string(fx.Want), st.Reported)
	t.Logf("redelivered after the crash: %v", counter(t, c.m, "gttsplit_events_redelivered_total"))
}

// A run whose run-finished event never comes stays open until the idle
// timeout passes on the table's clock, then gets an incomplete split. The
// late run-finished event re-opens it and the complete split, the
// replay's, replaces it, saying so.
func TestIdleTimeoutIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	const group, idle = "idle", 10 * time.Minute
	clk := newFakeClock()
	r := startTable(t, b.URL, group, tableConfig{idle: idle, now: clk.now})
	r.waitOwns(r.parts)

	fin := fx.FinishedIndex(t)
	b.Publish(t, fx.Without(fin)...)
	b.WaitAcked(t, group)
	clk.advance(idle - time.Second)
	time.Sleep(300 * time.Millisecond)
	n, _ := r.closes.count()
	require.Zero(t, n, "closed before the idle timeout")

	clk.advance(2 * time.Second)
	rt.Eventually(t, "the incomplete split", func() bool { n, _ := r.closes.count(); return n == 1 })
	inc := r.closes.of(fx.Origin.RunID)[0]
	require.False(t, inc.Run.Complete)
	require.Contains(t, inc.Flags, "incomplete")
	require.Equal(t, clk.now().Format(time.RFC3339Nano), inc.Run.Finished)
	require.Equal(t, float64(1), counter(t, r.m, "gttsplit_runs_completed_total", "incomplete"))
	require.Equal(t, float64(0), counter(t, r.m, "gttsplit_runs_open"))

	b.Publish(t, fx.Wires[fin])
	rt.Eventually(t, "the complete split", func() bool { n, _ := r.closes.count(); return n == 2 })
	b.WaitAcked(t, group)
	got, err := split.JSON(r.closes.of(fx.Origin.RunID)[1])
	require.NoError(t, err)
	want := replacing(t, fx, inc, 0)
	require.Equal(t, string(want), string(got))
	require.Equal(t, float64(0), counter(t, r.m, "gttsplit_runs_open"), "the gauge does not drift")
	st := b.State(t, fx.Origin.RunID, rt.FoldOptions(t))
	require.Equal(t, 2, st.Splits)
	require.Equal(t, string(want), st.Reported)
}

// Two tables of one group share the partitions: 30 runs interleaved, each
// closed exactly once, by the owner of its partition, with its exact split
// (as written, as the split event, in the bucket).
func TestSharedPartitionsIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	const n = 30
	opts := rt.FoldOptions(t)
	fxs := []rt.Fixture{rt.Load(t, fixture4B, opts), rt.Load(t, fixture27B, opts)}
	runs := rt.Gen(t, n, fxs...)
	b := rt.StartBroker(t)
	const group = "shared"
	// Nobody dies here: steadyLease, so a busy machine that delays
	// renewals does not move a partition.
	s1 := startTable(t, b.URL, group, tableConfig{idle: time.Hour})
	s2 := startTable(t, b.URL, group, tableConfig{idle: time.Hour})
	rt.Eventually(t, "8/8", func() bool { return s1.owned() == 8 && s2.owned() == 8 })
	b.Publish(t, rt.Interleave(runs)...)
	closed := func() int {
		_, a := s1.closes.count()
		_, c := s2.closes.count()
		return a + c
	}
	rt.Eventually(t, "every run closed", func() bool { return closed() == n })
	b.WaitAcked(t, group)
	s1.stop()
	s2.stop()
	n1, _ := s1.closes.count()
	n2, _ := s2.closes.count()
	t.Logf("splits written: %d and %d for %d runs", n1, n2, n)
	require.Positive(t, n1)
	require.Positive(t, n2)
	require.Equal(t, n, n1+n2, "one split per run")
	events := b.SplitEvents(t)
	for _, g := range runs {
		want := wantFor(t, g)
		var got []split.Report
		got = append(got, s1.closes.of(g.Origin.RunID)...)
		got = append(got, s2.closes.of(g.Origin.RunID)...)
		require.Len(t, got, 1, g.Origin.RunID)
		js, err := split.JSON(got[0])
		require.NoError(t, err)
		require.Equal(t, string(want), string(js), g.Origin.RunID)
		st := b.State(t, g.Origin.RunID, opts)
		require.True(t, st.Closed)
		require.Equal(t, string(want), st.Reported)
		require.Len(t, events[g.Origin.RunID], 1, "one split event")
	}
}

// wantFor is the split of a generated run: its fixture's, under its own
// id, host and lane.
func wantFor(t testing.TB, g rt.Run) []byte {
	t.Helper()
	var c split.Report
	b, err := json.Marshal(g.Fx.Report)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &c))
	c.Run.ID, c.Run.Host, c.Run.Lane = g.Origin.RunID, g.Origin.Host, g.Origin.Lane
	js, err := split.JSON(c)
	require.NoError(t, err)
	return js
}

// A split the sinks did not settle before the table stopped is re-sent by
// the partition's next owner (to the sinks, and to the split subject under
// the same id), and the state stops asking once every sink settled it.
func TestResendsUnsettledSplitsIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	const group = "resend"
	stuck := new(sinktest.Memory)
	block := make(chan struct{})
	stuck.Block(block)
	// The sinks' close gives up at once (the sink is blocked) and the
	// table stops with the split not settled.
	a := startTable(t, b.URL, group, tableConfig{idle: time.Hour, sinks: memSinks(stuck, nil), shutdown: 100 * time.Millisecond})
	a.waitOwns(a.parts)
	b.Publish(t, fx.Wires...)
	rt.Eventually(t, "the split is written", func() bool { n, _ := a.closes.count(); return n >= 1 })
	a.stop()
	close(block)
	id := fx.Origin.RunID
	st := b.State(t, id, rt.FoldOptions(t))
	require.True(t, st.Closed)
	require.True(t, st.SinksPending, "no sink settled the split")
	p := bus.PartitionOf(id, a.parts)
	require.NoError(t, getKey(t, b, runtable.PendKey(p, id)), "pending: its marker")
	require.ErrorIs(t, getKey(t, b, runtable.OpenKey(p, id)), jetstream.ErrKeyNotFound, "closed: no open key")

	mem := new(sinktest.Memory)
	c := startTable(t, b.URL, group, tableConfig{idle: time.Hour, sinks: memSinks(mem, nil)})
	rt.Eventually(t, "the split re-sent", func() bool { _, ok := mem.Runs()[id]; return ok })
	rt.Eventually(t, "the flag cleared", func() bool { return !b.State(t, id, rt.FoldOptions(t)).SinksPending })
	require.ErrorIs(t, getKey(t, b, runtable.PendKey(p, id)), jetstream.ErrKeyNotFound, "settled: the marker goes")
	c.stop()
	got, err := split.JSON(mem.Runs()[id])
	require.NoError(t, err)
	require.Equal(t, string(fx.Want), string(got), "the re-sent split is the written one")
	require.Len(t, b.SplitEvents(t)[id], 1, "the re-sent split event is stored once")
}

// lateLine is a log-lines event of fx's run with one line the run never
// had.
func lateLine(t testing.TB, fx rt.Fixture) events.Wire {
	t.Helper()
	for _, d := range fx.Decoded {
		if d.Lines != nil {
			l := d.Lines[0]
			l.Seq += 1 << 40
			ev, err := events.NewLogLines(fx.Origin, []split.Line{l})
			require.NoError(t, err)
			w, err := events.ToWire(ev)
			require.NoError(t, err)
			return w
		}
	}
	t.Fatalf("%s has no log lines", fx.Path)
	return events.Wire{}
}

// A run closed incomplete at the idle timeout keeps its full state through
// the grace, so its late run-finished event re-opens it and the complete
// split replaces the incomplete one; once the grace after that close
// passed, it is compacted (/runs/<id> still answers the split). Then a
// repeated event is a duplicate, and a new one is dead-lettered (reason
// "final": the run closed complete), leaving the split and the record as
// they were.
func TestClosedRunCompactIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	const group, idle, grace = "compact", 10 * time.Minute, time.Hour
	clk := newFakeClock()
	r := startTable(t, b.URL, group, tableConfig{idle: idle, store: runtable.StoreConfig{CompactAfter: grace}, now: clk.now})
	r.waitOwns(r.parts)
	ctx := rt.Ctx(t)
	id := fx.Origin.RunID
	opts := rt.FoldOptions(t)

	fin := fx.FinishedIndex(t)
	b.Publish(t, fx.Without(fin)...)
	b.WaitAcked(t, group)
	clk.advance(idle + time.Second)
	rt.Eventually(t, "the incomplete split", func() bool { n, _ := r.closes.count(); return n == 1 })
	clk.advance(grace / 2)
	b.Publish(t, fx.Wires[fin])
	rt.Eventually(t, "the complete split", func() bool { n, _ := r.closes.count(); return n == 2 })
	b.WaitAcked(t, group)
	got, err := split.JSON(r.closes.of(id)[1])
	require.NoError(t, err)
	want := replacing(t, fx, r.closes.of(id)[0], 0)
	require.Equal(t, string(want), string(got), "re-opened within the grace: folded as if in time, saying it replaces the incomplete split")
	require.False(t, b.State(t, id, opts).Compact())
	_, fullBytes := kvBytes(t, b)

	// The grace runs from the last close.
	clk.advance(grace - time.Second)
	time.Sleep(300 * time.Millisecond)
	require.False(t, b.State(t, id, opts).Compact(), "compacted before its grace passed")
	clk.advance(2 * time.Second)
	rt.Eventually(t, "the compact record", func() bool { return b.State(t, id, opts).Compact() })
	_, compactBytes := kvBytes(t, b)
	t.Logf("state bucket: %d bytes with the closed run's full state, %d with its compact record", fullBytes, compactBytes)
	// Counted once the table has the broker's answer to the write, which
	// the bucket may show first (0 at load ~30 under -race).
	rt.Eventually(t, "the compaction counted", func() bool { return counter(t, r.m, "gttsplit_runs_compacted_total") >= 1 })
	require.Equal(t, float64(1), counter(t, r.m, "gttsplit_runs_compacted_total"))
	rep, ok, err := r.tbl.Snapshot(ctx, id)
	require.NoError(t, err)
	require.True(t, ok)
	js, err := split.JSON(rep)
	require.NoError(t, err)
	require.Equal(t, string(want), string(js), "/runs/<id> of a compact record")
	rt.Eventually(t, "the index says compacted", func() bool {
		list, err := r.tbl.List(ctx)
		return err == nil && len(list) == 1 && list[0].State == "closed" && list[0].Compact
	})

	dups := counter(t, r.m, "gttsplit_events_duplicate_total")
	b.PublishIDs(t, fx.Wires[1:2], []string{"again-1"})
	rt.Eventually(t, "the duplicate", func() bool { return counter(t, r.m, "gttsplit_events_duplicate_total") > dups })

	w := lateLine(t, fx)
	b.Publish(t, w)
	rt.Eventually(t, "the late event dead-lettered", func() bool {
		return counter(t, r.m, "gttsplit_events_dead_lettered_total", "final") == 1
	})
	b.WaitAcked(t, group)
	dl := b.StreamMsgs(t, "gttsplit.dlq.>")
	require.Len(t, dl, 1)
	require.Contains(t, dl[0].Headers().Get("Gttsplit-Reason"), "final: run "+id+" closed complete")
	require.Equal(t, string(w.Data), string(dl[0].Data()))
	require.Equal(t, w.Subject, dl[0].Headers().Get("Gttsplit-Original-Subject"), "the subject it was published on")
	n, _ := r.closes.count()
	require.Equal(t, 2, n, "no split after the late event")
	st := b.State(t, id, opts)
	require.True(t, st.Compact())
	require.Equal(t, 2, st.Splits)
	require.Equal(t, float64(0), counter(t, r.m, "gttsplit_runs_open"), "the gauge does not drift")
}

// A retention pass and a partition's compaction do not interleave on a
// run: a compaction that read the run before the pass deleted it does not
// write it back. The compaction is held between its read and its write
// until the pass has deleted the run or waits for it.
func TestExpireDuringCompactionIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	opts := rt.FoldOptions(t)
	fx := rt.Load(t, fixture4B, opts)
	b := rt.StartBroker(t)
	const group, grace, retention = "expire-compact", time.Hour, 2 * time.Hour
	clk := newFakeClock()
	r := startTable(t, b.URL, group, tableConfig{idle: time.Hour, store: runtable.StoreConfig{CompactAfter: grace}, now: clk.now})
	r.waitOwns(r.parts)
	ctx := rt.Ctx(t)
	o := fx.Origin
	o.RunID += "-expire-compact" // the hook below is the package's: only this run
	id := o.RunID
	var wires []events.Wire
	for _, d := range fx.Decoded {
		w, err := rt.Rewrite(d, o)
		require.NoError(t, err)
		wires = append(wires, w)
	}
	b.Publish(t, wires...)
	rt.Eventually(t, "the split", func() bool { return len(r.closes.of(id)) == 1 })
	b.WaitAcked(t, group)
	rt.Eventually(t, "the closed run in the index", func() bool {
		s, ok := r.tbl.Index().Get(id)
		return ok && s.State == "closed"
	})

	read, release := make(chan struct{}), make(chan struct{})
	var readOnce, releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the table stops
	t.Cleanup(runtable.OnCompactRead(func(got string) {
		if got != id {
			return
		}
		readOnce.Do(func() { close(read) })
		<-release
	}))
	clk.advance(retention + time.Second)
	rt.Eventually(t, "the compaction read the run", func() bool {
		select {
		case <-read:
			return true
		default:
			return false
		}
	})

	expired := make(chan int, 1)
	go func() { expired <- r.tbl.Expire(ctx, retention) }()
	n := -1
	rt.Eventually(t, "the retention pass done or waiting for the compaction", func() bool {
		select {
		case n = <-expired:
			return true
		default:
			return expireWaits()
		}
	})
	unblock()
	if n < 0 {
		n = <-expired
	}
	require.Equal(t, 1, n)
	rt.Eventually(t, "the compaction's write", func() bool { return counter(t, r.m, "gttsplit_runs_compacted_total") == 1 })
	require.ErrorIs(t, getKey(t, b, runtable.StateKey(id)), jetstream.ErrKeyNotFound, "the expired run written back")
	require.ErrorIs(t, getKey(t, b, runtable.SummaryKey(id)), jetstream.ErrKeyNotFound, "the expired run's summary written back")
	rt.Eventually(t, "the run out of the index", func() bool { _, ok := r.tbl.Index().Get(id); return !ok })
}

// expireWaits reports whether a goroutine waits for a lock in a
// partition's deletion of an expired run (the partition's ckptMu, held
// by a compaction).
func expireWaits() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[sync.Mutex.Lock") && strings.Contains(g, "runtable.(*part).expire(") {
			return true
		}
	}
	return false
}

// store.retention deletes the records of the runs closed longer ago, with
// their summary, and leaves nothing of them in the bucket's stream once
// the markers' time passed; the other runs stay.
func TestExpireClosedRunsIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	opts := rt.FoldOptions(t)
	fx4, fx27 := rt.Load(t, fixture4B, opts), rt.Load(t, fixture27B, opts)
	b := rt.StartBroker(t)
	const group, grace, retention = "expire", time.Hour, 30 * 24 * time.Hour
	clk := newFakeClock()
	r := startTable(t, b.URL, group, tableConfig{idle: time.Hour, store: runtable.StoreConfig{CompactAfter: grace}, now: clk.now})
	r.waitOwns(r.parts)
	ctx := rt.Ctx(t)
	const n = 6
	runs := rt.Gen(t, n, fx4, fx27)
	for _, g := range runs[:4] {
		b.Publish(t, g.Wires...)
	}
	rt.Eventually(t, "4 splits", func() bool { n, _ := r.closes.count(); return n == 4 })
	b.WaitAcked(t, group)
	_, full := kvBytes(t, b)
	clk.advance(grace + time.Second)
	rt.Eventually(t, "4 compact records", func() bool { return counter(t, r.m, "gttsplit_runs_compacted_total") == 4 })
	_, compact := kvBytes(t, b)
	t.Logf("state bucket with 4 closed runs: %d bytes full, %d compact", full, compact)

	clk.advance(24 * time.Hour)
	for _, g := range runs[4:] {
		b.Publish(t, g.Wires...)
	}
	rt.Eventually(t, "6 splits", func() bool { n, _ := r.closes.count(); return n == 6 })
	b.WaitAcked(t, group)
	rt.Eventually(t, "the index", func() bool { return r.tbl.Index().Len() == n })

	require.Zero(t, r.tbl.Expire(ctx, retention), "nothing is older than the retention")
	clk.advance(retention - 12*time.Hour)
	rt.Eventually(t, "the other 2 compacted", func() bool { return counter(t, r.m, "gttsplit_runs_compacted_total") == 6 })
	require.Equal(t, 4, r.tbl.Expire(ctx, retention), "the 4 runs closed 30.5 days ago")
	require.Equal(t, 2, r.tbl.Index().Len())
	for i, g := range runs {
		err := getKey(t, b, runtable.StateKey(g.Origin.RunID))
		serr := getKey(t, b, runtable.SummaryKey(g.Origin.RunID))
		_, ok, _ := r.tbl.Snapshot(ctx, g.Origin.RunID)
		if i < 4 {
			require.ErrorIs(t, err, jetstream.ErrKeyNotFound, g.Origin.RunID)
			require.ErrorIs(t, serr, jetstream.ErrKeyNotFound, g.Origin.RunID)
			require.False(t, ok, "/runs/<id> of an expired run: 404")
		} else {
			require.NoError(t, err, g.Origin.RunID)
			require.NoError(t, serr, g.Origin.RunID)
			require.True(t, ok)
		}
	}
	list, err := r.tbl.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
}

// A closed run re-opened by a late event is written under its partition's
// open key again, so when its owner dies before closing it again, the
// partition's next owner resumes it and writes the corrected split, once.
func TestReopenedRunResumedIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	opts := rt.FoldOptions(t)
	fx := rt.Load(t, fixture4B, opts)
	b := rt.StartBroker(t)
	const group, idle = "reopen", 10 * time.Minute
	clk := newFakeClock()
	cfg := tableConfig{idle: idle, now: clk.now}
	a := startTable(t, b.URL, group, cfg, crashLease)
	a.waitOwns(a.parts)
	id := fx.Origin.RunID
	open := runtable.OpenKey(bus.PartitionOf(id, a.parts), id)

	fin := fx.FinishedIndex(t)
	late := -1
	for i := len(fx.Decoded) - 1; i >= 0; i-- {
		if fx.Decoded[i].Lines != nil {
			late = i
			break
		}
	}
	early := fx.Without(fin, late)
	b.Publish(t, early...)
	b.WaitAcked(t, group)
	clk.advance(idle + time.Second)
	rt.Eventually(t, "the first split", func() bool { n, _ := a.closes.count(); return n == 1 })
	rt.Eventually(t, "the open key purged", func() bool { return errors.Is(getKey(t, b, open), jetstream.ErrKeyNotFound) })

	b.Publish(t, fx.Wires[late])
	b.WaitAcked(t, group)
	require.False(t, b.State(t, id, opts).Closed)
	require.NoError(t, getKey(t, b, open), "the re-opened run's open key")

	a.crash()
	c := startTable(t, b.URL, group, cfg)
	c.waitOwns(c.parts)
	require.Equal(t, float64(1), counter(t, c.m, "gttsplit_runs_open"), "resumed")
	clk.advance(idle + time.Second)
	rt.Eventually(t, "the corrected split", func() bool { n, _ := c.closes.count(); return n == 1 })
	time.Sleep(300 * time.Millisecond)
	require.Len(t, c.closes.of(id), 1, "written once")
	want := rt.ReplayJSON(t, append(append([]events.Wire{}, early...), fx.Wires[late]), opts)
	var wantRep split.Report
	require.NoError(t, json.Unmarshal(want, &wantRep))
	got := c.closes.of(id)[0]
	require.Equal(t, wantRep.Detail.LinesRead, got.Detail.LinesRead, "the late lines are in it")
	require.Greater(t, got.Detail.LinesRead, a.closes.of(id)[0].Detail.LinesRead)
	st := b.State(t, id, opts)
	require.True(t, st.Closed)
	require.Equal(t, 2, st.Splits)
	require.ErrorIs(t, getKey(t, b, open), jetstream.ErrKeyNotFound, "closed again: the open key goes")
}

// An event whose run id is longer than the collector allows, or whose run
// id is not the run its subject names (so its subject put it in another
// partition), is dead-lettered, never folded: the first as invalid, the
// second for its origin.
func TestBadRunIDsDeadLetteredIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	r := startTable(t, b.URL, "badids", tableConfig{idle: time.Hour})
	r.waitOwns(r.parts)
	long := fx.Origin
	long.RunID = strings.Repeat("x", runtable.MaxRunIDBytes+1)
	w, err := rt.Rewrite(fx.Decoded[0], long)
	require.NoError(t, err)
	b.Publish(t, w)
	// The subject of another run than the one inside.
	other := fx.Origin
	other.RunID = "other-run"
	for i := 0; bus.PartitionOf(other.RunID, r.parts) == bus.PartitionOf(fx.Origin.RunID, r.parts); i++ {
		other.RunID = fmt.Sprintf("other-run-%d", i)
	}
	forged := fx.Wires[1]
	b.PublishRaw(t, events.Subject(events.KindLog, other.Host, other.Lane, other.RunID), forged.Data)
	rt.Eventually(t, "both dead-lettered", func() bool {
		return counter(t, r.m, "gttsplit_events_dead_lettered_total", "invalid") == 1 &&
			counter(t, r.m, "gttsplit_events_dead_lettered_total", "origin") == 1
	})
	reasons := ""
	for _, m := range b.StreamMsgs(t, "gttsplit.dlq.>") {
		reasons += m.Headers().Get("Gttsplit-Reason") + "\n"
	}
	require.Contains(t, reasons, "run id too long")
	require.Contains(t, reasons, `origin: the event's run "`+fx.Origin.RunID+`" is not the subject's "`+other.RunID+`"`)
	require.Zero(t, counter(t, r.m, "gttsplit_events_folded_total"))
}

// A cut-off owner (its connection frozen, not closed: a network partition)
// loses its partitions when its leases run out; another table takes them
// over and closes the run. When the first comes back, what it still held
// is written nowhere: the run is written once, with the new owner's split.
func TestCutOffOwnerIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	opts := rt.FoldOptions(t)
	fx := rt.Load(t, fixture4B, opts)
	srv := natstest.Start(t)
	b := rt.BrokerAt(t, srv)
	proxy := natstest.StartProxy(t, srv.Addr().String())
	const group = "cutoff"
	a := startTable(t, proxy.URL(), group, tableConfig{idle: time.Hour, consumer: runtable.ConsumerConfig{CheckpointInterval: 200 * time.Millisecond}}, crashLease)
	a.waitOwns(a.parts)
	half := len(fx.Wires) / 2
	b.Publish(t, fx.Wires[:half]...)
	b.WaitAcked(t, group)
	// More events reach a; it folds them and is cut off at once.
	b.Publish(t, fx.Wires[half:len(fx.Wires)-1]...)
	rt.Eventually(t, "a folds", func() bool { return counter(t, a.m, "gttsplit_events_folded_total") > float64(half) })
	proxy.Freeze()
	// Only a's leases (crashLease) are to be lost here: c holds
	// steadyLease, and takes a's partitions over once a's ran out.
	c := startTable(t, b.URL, group, tableConfig{idle: time.Hour})
	c.waitOwns(c.parts)
	view, _ := c.member.View()
	taken := make([]uint64, len(view)) // the lease revisions c took a's partitions with
	for _, v := range view {
		taken[v.Partition] = v.LeaseRevision
	}
	b.Publish(t, fx.Wires[len(fx.Wires)-1])
	takeover(t, "the split by the new owner", func() bool { n, _ := c.closes.count(); return n == 1 })
	proxy.Thaw()
	// a learns of each loss as a renewal of its lease (in doubt since
	// its time to live ran out unanswered) is refused; meanwhile it is a
	// live member again, and c gives partitions back to it: a never needs
	// to hold none at once. Every lease it holds is a new one, taken after
	// c took the partition.
	rt.Eventually(t, "a lost its partitions", func() bool {
		view, _ := a.member.View()
		for _, v := range view {
			if v.Mine && v.LeaseRevision <= taken[v.Partition] {
				return false
			}
		}
		return true
	})
	time.Sleep(time.Second)
	c.stop()
	n, _ := a.closes.count()
	require.Zero(t, n, "the cut-off owner wrote no split")
	got, err := split.JSON(c.closes.of(fx.Origin.RunID)[0])
	require.NoError(t, err)
	require.Equal(t, string(fx.Want), string(got))
	st := b.State(t, fx.Origin.RunID, opts)
	require.True(t, st.Closed, "the stored state is the new owner's closed one")
	require.Equal(t, string(fx.Want), st.Reported)
	require.Len(t, b.SplitEvents(t)[fx.Origin.RunID], 1)
}

// An operator's R3 state bucket stays R3 for an aggregator asking R1 (with
// a warning naming nats.replicas); a missing one is created with the
// configured replicas, raised later, and allows per-key TTLs.
//
// Each request to the cluster has a context of its own: the steps wait
// for the cluster up to rt.WaitFor each (a deleted store gone from every
// peer, every peer taken for online), and one context for the whole test
// (2×rt.WaitFor) could run out while the cluster still moved ('state
// bucket GTTSPLIT_RUNS: context deadline exceeded' at load 26-34 with the
// suite beside). An EnsureBucket the cluster did not answer within an
// attempt (rt.WaitFor/4) is asked again (it changes only what differs).
func TestStateBucketNeverLoweredIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	cl := natstest.StartCluster(t, 3)
	_, js := rt.Connect(t, cl.URLs())
	// ensure is EnsureBucket asked again while its answer does not come
	// within an attempt, or is one of codes (the cluster not settled yet).
	ensure := func(what string, replicas int, log zerolog.Logger, codes ...jetstream.ErrorCode) {
		t.Helper()
		var err error
		rt.Eventually(t, what, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), rt.WaitFor/4)
			defer cancel()
			_, err = runtable.EnsureBucket(ctx, js, replicas, log)
			var apiErr *jetstream.APIError
			return !errors.Is(err, context.DeadlineExceeded) && (!errors.As(err, &apiErr) || !slices.Contains(codes, apiErr.ErrorCode))
		})
		require.NoError(t, err, what)
	}
	ensure("created R3", 3, zerolog.Nop())
	var logs lockedBuf
	ensure("kept R3 for R1", 1, zerolog.New(&logs))
	st, err := js.Stream(rt.Ctx(t), "KV_"+runtable.Bucket)
	require.NoError(t, err)
	require.Equal(t, 3, st.CachedInfo().Config.Replicas)
	require.True(t, st.CachedInfo().Config.AllowMsgTTL)
	require.Contains(t, logs.String(), `"setting":"nats.replicas"`)

	// A bucket of an earlier version (no TTLs) gets them.
	require.NoError(t, js.DeleteKeyValue(rt.Ctx(t), runtable.Bucket))
	// The delete is answered once the stream's leader removed it; on a
	// busy machine a replica may still hold the old store's directory,
	// and creating the bucket again under its name fails (the broker's
	// error code 10049, error creating store) until it is gone.
	rt.Eventually(t, "created again (the old store gone from every peer)", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), rt.WaitFor/4)
		defer cancel()
		_, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: runtable.Bucket, History: 1})
		var apiErr *jetstream.APIError
		return !errors.Is(err, context.DeadlineExceeded) && (!errors.As(err, &apiErr) || apiErr.ErrorCode != 10049)
	})
	require.NoError(t, err, "created again")
	// Raising it places two new replicas: a cluster just formed on a busy
	// machine may still take a peer for offline (the broker's error code
	// 10005, no suitable peers) until its meta group has heard from it.
	ensure("raised (every peer taken for online)", 3, zerolog.Nop(), 10005)
	st, err = js.Stream(rt.Ctx(t), "KV_"+runtable.Bucket)
	require.NoError(t, err)
	require.Equal(t, 3, st.CachedInfo().Config.Replicas)
	require.True(t, st.CachedInfo().Config.AllowMsgTTL)
	require.NotZero(t, st.CachedInfo().Config.SubjectDeleteMarkerTTL)
}

// A split a sink's full queue deferred is read back (Reload) while its
// run is closed and its split pending; not once the run re-opened, nor
// for a run of a partition this table does not own.
func TestReloadSplitIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	stuck := new(sinktest.Memory)
	block := make(chan struct{})
	stuck.Block(block)
	defer close(block)
	a := startTable(t, b.URL, "reload", tableConfig{idle: time.Hour, sinks: memSinks(stuck, nil), shutdown: 100 * time.Millisecond})
	a.waitOwns(a.parts)
	b.Publish(t, fx.Wires...)
	rt.Eventually(t, "the split is written", func() bool { n, _ := a.closes.count(); return n >= 1 })
	id := fx.Origin.RunID
	ctx := rt.Ctx(t)

	rep, ok, err := a.tbl.Reload(ctx, "mem", id)
	require.NoError(t, err)
	require.True(t, ok, "closed, pending")
	got, err := split.JSON(rep)
	require.NoError(t, err)
	require.Equal(t, string(fx.Want), string(got))

	_, ok, err = a.tbl.Reload(ctx, "mem", "no-such-run")
	require.NoError(t, err)
	require.False(t, ok)

	// A run in memory (open: its finish not folded): nothing to read
	// back, its close sends its split.
	open := rt.Gen(t, 1, fx)[0]
	b.Publish(t, open.Wires[:len(open.Wires)-1]...)
	rt.Eventually(t, "open", func() bool { return counter(t, a.m, "gttsplit_runs_open") == 1 })
	_, ok, err = a.tbl.Reload(ctx, "mem", open.Origin.RunID)
	require.NoError(t, err)
	require.False(t, ok, "open")

	// Once the partition is handed over, its next owner sends what is
	// pending: this table reads nothing back.
	a.stop()
	_, ok, err = a.tbl.Reload(ctx, "mem", id)
	require.NoError(t, err)
	require.False(t, ok, "the partition is no longer this table's")
}

// Past even its deferred ids' cap a sink drops splits; once it caught up,
// the table reads the pending ones back (their markers) and sends them
// again, without a restart.
func TestResendsWhatASinkDroppedIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	mem := new(sinktest.Memory)
	block := make(chan struct{})
	mem.Block(block)
	var counts sinks.Counters
	a := startTable(t, b.URL, "overflow", tableConfig{idle: time.Hour, sinks: memSinks(mem, func(fc *sinks.FanoutConfig) {
		fc.MaxPending, fc.MaxDeferred = 1, 1
		obs := fc.Observer
		fc.Observer = sinks.ObserverFunc(func(e sinks.Event) { counts.Observe(e); obs.Observe(e) })
	})})
	a.waitOwns(a.parts)
	const n = 8
	runs := rt.Gen(t, n, fx)
	for _, r := range runs {
		b.Publish(t, r.Wires...)
	}
	rt.Eventually(t, "every run closed", func() bool { _, c := a.closes.count(); return c == n })
	require.NotZero(t, counts.Snapshot()["mem"].Dropped, "the sink dropped splits")
	close(block)
	rt.Eventually(t, "every split reached the sink", func() bool { return len(mem.Runs()) == n })
	rt.Eventually(t, "no split pending", func() bool {
		for _, r := range runs {
			if b.State(t, r.Origin.RunID, rt.FoldOptions(t)).SinksPending {
				return false
			}
		}
		return true
	})
	require.NoError(t, a.node.Stop(context.Background()))
	for _, r := range runs {
		want, err := split.JSON(a.closes.of(r.Origin.RunID)[0])
		require.NoError(t, err)
		got, err := split.JSON(mem.Runs()[r.Origin.RunID])
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "run %s", r.Origin.RunID)
	}
}

// A table cut off from the broker (its connection frozen, its leases
// still valid) while events wait for its partitions says so: readiness
// names the partitions the events do not reach, and the stalled gauge
// counts them.
func TestStalledPartitionsReportedIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	srv := natstest.Start(t)
	b := rt.BrokerAt(t, srv)
	proxy := natstest.StartProxy(t, srv.Addr().String())
	a := startTable(t, proxy.URL(), "stall", tableConfig{idle: time.Hour}, time.Minute)
	a.waitOwns(a.parts)
	b.Publish(t, fx.Wires[:3]...)
	b.WaitAcked(t, "stall")
	// Ready before the cut (readiness asks the broker: on a loaded
	// machine one answer may come too late, failed once under CI's load).
	rt.Eventually(t, "ready before the cut", func() bool { ok, _ := a.tbl.Ready(); return ok })
	proxy.Freeze()
	b.Publish(t, fx.Wires[3:]...)
	rt.Eventually(t, "not ready", func() bool {
		ok, why := a.tbl.Ready()
		return !ok && strings.Contains(why, "events do not reach partition")
	})
	require.Positive(t, counter(t, a.m, "gttsplit_partitions_stalled"))
	proxy.Thaw()
	rt.Eventually(t, "ready again", func() bool { ok, _ := a.tbl.Ready(); return ok })
	rt.Eventually(t, "the split", func() bool { n, _ := a.closes.count(); return n == 1 })
	require.Zero(t, counter(t, a.m, "gttsplit_partitions_stalled"))
}

// The state bucket full (here its own byte limit, which the server
// answers with "maximum bytes exceeded"): checkpoints back off and are
// tried again, said once; readiness says the store is full; the messages
// wait unacknowledged without being delivered again (their progress is
// acknowledged) and are folded once; once there is room the run closes,
// once.
func TestStoreFullBacksOffIntegration(t *testing.T) {
	skipShort(t)
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	var logs lockedBuf
	ctx := rt.Ctx(t)
	kv, err := runtable.EnsureBucket(ctx, b.JS, 1, zerolog.Nop())
	require.NoError(t, err)
	_ = kv
	st, err := b.JS.Stream(ctx, "KV_"+runtable.Bucket)
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	r := startTableLog(t, b.URL, "full", tableConfig{idle: time.Hour, consumer: runtable.ConsumerConfig{CheckpointInterval: 200 * time.Millisecond, AckWait: 3 * time.Second}},
		zerolog.New(&logs).Level(zerolog.InfoLevel))
	r.waitOwns(r.parts)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	cfg.MaxBytes = int64(info.State.Bytes) + 1024 // full for a run's state
	_, err = b.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	// Once the table read the new max_bytes, the run states keep off the
	// leases' reserve (a write it made before might fill the bucket to
	// the brim, and the leases could not be renewed).
	rt.Eventually(t, "the table to see the bucket's max_bytes", func() bool {
		return counter(t, r.m, "gttsplit_store_used_ratio", "bucket") > 0
	})

	fin := fx.FinishedIndex(t)
	b.Publish(t, fx.Without(fin)...)
	rt.Eventually(t, "not ready: the store is full", func() bool {
		ok, why := r.tbl.Ready()
		return !ok && strings.Contains(why, "store is full")
	})
	// Past two ack waits: nothing delivered again, nothing folded twice.
	time.Sleep(7 * time.Second)
	require.Zero(t, counter(t, r.m, "gttsplit_events_redelivered_total"))
	require.Equal(t, float64(len(fx.Wires)-1), counter(t, r.m, "gttsplit_events_folded_total"))
	require.Positive(t, counter(t, r.m, "gttsplit_events_progress_acks_total"))
	require.Positive(t, counter(t, r.m, "gttsplit_state_persist_errors_total"))
	require.Equal(t, 1, strings.Count(logs.String(), "checkpoint failed"), "said once: %s", logs.String())

	cfg.MaxBytes = -1
	_, err = b.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	rt.Eventually(t, "ready again", func() bool { ok, _ := r.tbl.Ready(); return ok })
	b.Publish(t, fx.Wires[fin])
	rt.Eventually(t, "the split", func() bool { n, _ := r.closes.count(); return n == 1 })
	require.Contains(t, logs.String(), "checkpoints written again")
	got, err := split.JSON(r.closes.of(fx.Origin.RunID)[0])
	require.NoError(t, err)
	require.Equal(t, string(fx.Want), string(got))
	require.Zero(t, counter(t, r.m, "gttsplit_events_redelivered_total"))
}
