package aggregator

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// closedState folds every event of fx and closes the run as closeRuns does.
func closedState(t testing.TB, fx fixture) *RunState {
	t.Helper()
	st := NewRunState(fx.origin, foldOptions(t))
	for _, d := range fx.decoded {
		ApplyTo(st, d)
	}
	js, err := split.JSON(Report(st))
	require.NoError(t, err)
	st.Closed, st.ClosedAt, st.Reported, st.Splits = true, time.Date(2026, 11, 7, 15, 0, 0, 0, time.UTC), string(js), 1
	return st
}

// A closed run's compact record keeps what /runs/<id>, the sinks' re-send
// and a late duplicate need, not the fold: it loads back with the same
// split, byte for byte, recognises every event of the run as a repeat, and
// is several times smaller than the full state. An old full state (no
// "v") still loads; a newer format is refused.
func TestCompactRecord(t *testing.T) {
	for _, path := range []string{fixture4B, fixture27B} {
		fx := loadFixture(t, path)
		st := closedState(t, fx)
		full, err := MarshalState(st)
		require.NoError(t, err)
		c := st.compacted()
		require.True(t, c.Compact())
		require.False(t, st.Compact(), "compacted copies")
		rec, err := MarshalState(c)
		require.NoError(t, err)
		t.Logf("%s: closed full state %d bytes, compact record %d bytes", path, len(full), len(rec))
		require.Less(t, len(rec)*2, len(full), "the compact record is under half the full state")

		got, err := UnmarshalState(rec, foldOptions(t))
		require.NoError(t, err)
		require.True(t, got.Compact())
		require.Equal(t, string(fx.want), got.Reported, "the written split, byte for byte")
		rep, err := split.JSON(Report(got))
		require.NoError(t, err)
		require.Equal(t, string(fx.want), string(rep), "its report is the written split")
		require.Equal(t, st.Origin, got.Origin)
		require.Equal(t, st.Splits, got.Splits)
		require.True(t, got.Closed)
		require.True(t, got.ClosedAt.Equal(st.ClosedAt))
		for _, d := range fx.decoded {
			require.True(t, got.holds(d), "a repeat of %s", d.Type)
			require.False(t, ApplyTo(got, d))
		}
		// A line, a sample or a finish the fold never had is new.
		var lines, sample events.Decoded
		for _, d := range fx.decoded {
			if d.Lines != nil && lines.Lines == nil {
				lines = d
				l := d.Lines[0]
				l.Seq += 1 << 40
				lines.Lines = append([]split.Line{}, d.Lines...)
				lines.Lines[len(lines.Lines)-1] = l
			}
			if d.Sample != nil && sample.Sample == nil {
				s := *d.Sample
				s.Seq += 1 << 40
				sample.Sample = &s
			}
		}
		require.False(t, got.holds(lines), "one new line among repeated ones")
		require.False(t, got.holds(sample))
		again, err := MarshalState(got)
		require.NoError(t, err)
		require.JSONEq(t, string(rec), string(again), "a loaded record is written back as it was")

		// The stored format: v2, the split as a JSON object, no fold.
		var raw map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(rec, &raw))
		require.Equal(t, "2", string(raw["v"]))
		require.NotContains(t, raw, "fold")
		require.NotContains(t, raw, "reported")
		require.Contains(t, raw, "split")
		require.Contains(t, raw, "seen")

		// A full state written before the format had "v" loads as one.
		old, err := json.Marshal(struct {
			Origin   events.Origin `json:"origin"`
			Fold     *split.Fold   `json:"fold"`
			Reported string        `json:"reported"`
			Closed   bool          `json:"closed"`
			Splits   int           `json:"splits"`
		}{st.Origin, st.Fold, st.Reported, true, 1})
		require.NoError(t, err)
		ost, err := UnmarshalState(old, foldOptions(t))
		require.NoError(t, err)
		require.False(t, ost.Compact())
		rep, err = split.JSON(Report(ost))
		require.NoError(t, err)
		require.Equal(t, string(fx.want), string(rep))
		require.True(t, ost.compacted().holds(fx.decoded[len(fx.decoded)-1]))
	}
	_, err := UnmarshalState([]byte(`{"v":3,"origin":{"run_id":"x"}}`), foldOptions(t))
	require.ErrorContains(t, err, "newer")
}

// kvBytes returns the messages and bytes of the state bucket's stream.
func kvBytes(t testing.TB, b *testBroker) (uint64, uint64) {
	t.Helper()
	s, err := b.js.Stream(testCtx(t), "KV_"+StateBucket)
	require.NoError(t, err)
	info, err := s.Info(testCtx(t))
	require.NoError(t, err)
	return info.State.Msgs, info.State.Bytes
}

// TestClosedRunCompactIntegration: a run closed incomplete at the idle
// timeout keeps its full state through the grace, so its late run-finished
// event re-opens it and the complete split replaces the incomplete one;
// once the grace after that close passed, a flush compacts it (the open
// marker goes, /runs/<id> still answers the split). Then a repeated event
// is a duplicate, and a new one is dead-lettered with reason "late",
// leaving the split and the record as they were.
func TestClosedRunCompactIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	const durable, idle, grace = "compact", 10 * time.Minute, time.Hour
	clk := newFakeClock()
	r := startService(t, b.url, durable, ServiceConfig{IdleTimeout: idle, CompactAfter: grace, Partitions: 4, Now: clk.now})
	ctx := testCtx(t)
	id := fx.origin.RunID
	marker := openKey(r.svc.partOf(id), id)

	fin := fx.finishedIndex(t)
	open := fx.without(fin)
	b.publish(t, open...)
	b.waitAcked(t, durable)
	clk.advance(idle + time.Second)
	eventually(t, "the incomplete split", func() bool { n, _ := r.closes.count(); return n == 1 })
	_, err := r.svc.kv.Get(ctx, marker)
	require.NoError(t, err, "a closed run keeps its open marker through the grace")

	clk.advance(grace / 2)
	b.publish(t, fx.wires[fin])
	eventually(t, "the complete split", func() bool { n, _ := r.closes.count(); return n == 2 })
	b.waitAcked(t, durable)
	got, err := split.JSON(r.closes.of(id)[1])
	require.NoError(t, err)
	require.Equal(t, string(fx.want), string(got), "re-opened within the grace: folded as if in time")
	st := b.state(t, id)
	require.False(t, st.Compact())
	_, fullBytes := kvBytes(t, b)

	// The grace runs from the last close.
	clk.advance(grace - time.Second)
	time.Sleep(3 * flushEvery)
	require.False(t, b.state(t, id).Compact(), "compacted before its grace passed")
	clk.advance(2 * time.Second)
	eventually(t, "the compact record", func() bool { return b.state(t, id).Compact() })
	// The marker goes just after the record is written.
	eventually(t, "the marker gone with the compaction", func() bool {
		_, err := r.svc.kv.Get(ctx, marker)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	_, compactBytes := kvBytes(t, b)
	t.Logf("state bucket: %d bytes with the closed run's full state, %d with its compact record", fullBytes, compactBytes)
	require.Less(t, compactBytes, fullBytes)
	require.Equal(t, float64(1), counter(t, r.m, "gttsplit_runs_compacted_total"))
	rep, ok, err := r.svc.Snapshot(ctx, id)
	require.NoError(t, err)
	require.True(t, ok)
	js, err := split.JSON(rep)
	require.NoError(t, err)
	require.Equal(t, string(fx.want), string(js), "/runs/<id> of a compact record")
	list, err := r.svc.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "closed", list[0].State)

	// A repeat (re-published under another message id) is a duplicate.
	dups := counter(t, r.m, "gttsplit_events_duplicate_total")
	b.publishIDs(t, fx.wires[1:2], []string{"again-1"})
	eventually(t, "the duplicate", func() bool { return counter(t, r.m, "gttsplit_events_duplicate_total") > dups })

	// A new line: dead-lettered as late, not folded.
	w := lateLine(t, fx)
	b.publish(t, w)
	eventually(t, "the late event dead-lettered", func() bool {
		return counter(t, r.m, "gttsplit_events_dead_lettered_total", "late") == 1
	})
	b.waitAcked(t, durable)
	dl := b.streamMsgs(t, "gttsplit.dlq.>")
	require.Len(t, dl, 1)
	require.Contains(t, dl[0].Headers().Get("Gttsplit-Reason"), "late: run "+id)
	require.Equal(t, string(w.Data), string(dl[0].Data()))
	n, _ := r.closes.count()
	require.Equal(t, 2, n, "no split after the late event")
	st = b.state(t, id)
	require.True(t, st.Compact())
	require.Equal(t, 2, st.Splits)
	require.Equal(t, float64(0), counter(t, r.m, "gttsplit_runs_open"), "the gauge does not drift")
}

// TestExpireClosedRunsIntegration: store.retention deletes the compact
// records of the runs closed longer ago, with their summary and open
// marker keys, and leaves nothing of them in the bucket's stream (no
// delete marker either, after the next sweep); the other runs stay. It
// logs the bucket's bytes per closed run, full and compact.
func TestExpireClosedRunsIntegration(t *testing.T) {
	skipShort(t)
	fx4, fx27 := loadFixture(t, fixture4B), loadFixture(t, fixture27B)
	b := startBroker(t)
	const durable, grace, retention = "expire", time.Hour, 30 * 24 * time.Hour
	clk := newFakeClock()
	r := startService(t, b.url, durable, ServiceConfig{IdleTimeout: time.Hour, CompactAfter: grace, Partitions: 4, Now: clk.now})
	ctx := testCtx(t)
	const n = 6
	runs := genRuns(t, n, fx4, fx27)
	// Runs 0-3 close now, 4-5 a day later.
	for _, g := range runs[:4] {
		b.publish(t, g.wires...)
	}
	eventually(t, "4 splits", func() bool { n, _ := r.closes.count(); return n == 4 })
	b.waitAcked(t, durable)
	msgs0, full := kvBytes(t, b)
	t.Logf("state bucket with 4 closed runs (full state): %d messages, %d bytes, %d bytes a run", msgs0, full, full/4)
	clk.advance(grace + time.Second)
	eventually(t, "4 compact records", func() bool { return counter(t, r.m, "gttsplit_runs_compacted_total") == 4 })
	msgs1, compact := kvBytes(t, b)
	t.Logf("state bucket with 4 closed runs (compact): %d messages, %d bytes, %d bytes a run", msgs1, compact, compact/4)
	require.Equal(t, uint64(4*2), msgs1, "a state and a summary key a run: no marker, no delete marker")

	clk.advance(24 * time.Hour)
	for _, g := range runs[4:] {
		b.publish(t, g.wires...)
	}
	eventually(t, "6 splits", func() bool { n, _ := r.closes.count(); return n == 6 })
	b.waitAcked(t, durable)
	eventually(t, "the index", func() bool { return r.svc.index.len() == n })

	require.Zero(t, r.svc.Expire(ctx, retention), "nothing is older than the retention")
	clk.advance(retention - 12*time.Hour)
	eventually(t, "the other 2 compacted", func() bool { return counter(t, r.m, "gttsplit_runs_compacted_total") == 6 })
	require.Equal(t, 4, r.svc.Expire(ctx, retention), "the 4 runs closed 30.5 days ago")
	require.Equal(t, 2, r.svc.index.len())
	for i, g := range runs {
		_, err := r.svc.kv.Get(ctx, stateKey(g.o.RunID))
		_, serr := r.svc.kv.Get(ctx, summaryKey(g.o.RunID))
		_, ok, _ := r.svc.Snapshot(ctx, g.o.RunID)
		if i < 4 {
			require.ErrorIs(t, err, jetstream.ErrKeyNotFound, g.o.RunID)
			require.ErrorIs(t, serr, jetstream.ErrKeyNotFound, g.o.RunID)
			require.False(t, ok, "/runs/<id> of an expired run: 404")
		} else {
			require.NoError(t, err, g.o.RunID)
			require.NoError(t, serr, g.o.RunID)
			require.True(t, ok)
		}
	}
	list, err := r.svc.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	// The next sweep purges the summaries' delete markers: what is left
	// is the 2 runs' state and summary keys.
	require.Zero(t, r.svc.Expire(ctx, retention))
	msgs, _ := kvBytes(t, b)
	require.Equal(t, uint64(2*2), msgs, "2 runs: a state and a summary key each")
	clk.advance(retention)
	require.Equal(t, 2, r.svc.Expire(ctx, retention))
	require.Zero(t, r.svc.Expire(ctx, retention))
	msgs, bytes := kvBytes(t, b)
	require.Zero(t, msgs, "nothing left of the expired runs: %d bytes", bytes)
}

// TestReopenedRunResumedIntegration: a closed run re-opened by a late event
// gets its partition's open marker again, so when its owner dies before
// closing it again, the partition's next owner resumes it (Acquire) and
// writes the corrected split, once. Compaction is off, so the close removed
// the marker (no sink to wait for).
func TestReopenedRunResumedIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	const durable, idle, parts = "reopen", 10 * time.Minute, 4
	clk := newFakeClock()
	cfg := ServiceConfig{IdleTimeout: idle, Partitions: parts, Now: clk.now}
	a := startService(t, b.url, durable, cfg)
	ctx := testCtx(t)
	id := fx.origin.RunID
	marker := openKey(a.svc.partOf(id), id)

	// Everything but the finish and one batch of lines: closed incomplete.
	fin := fx.finishedIndex(t)
	late := -1
	for i := len(fx.decoded) - 1; i >= 0; i-- {
		if fx.decoded[i].Lines != nil {
			late = i
			break
		}
	}
	early := fx.without(fin, late)
	b.publish(t, early...)
	b.waitAcked(t, durable)
	clk.advance(idle + time.Second)
	eventually(t, "the first split", func() bool { n, _ := a.closes.count(); return n == 1 })
	_, err := a.svc.kv.Get(ctx, marker)
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "closed, settled, never compacted: no marker")

	// The late lines re-open it; they are written (acknowledged) and the
	// run stays open (no finish): its marker is back.
	b.publish(t, fx.wires[late])
	b.waitAcked(t, durable)
	require.False(t, b.state(t, id).Closed)
	_, err = a.svc.kv.Get(ctx, marker)
	require.NoError(t, err, "the re-opened run's marker")

	// Its owner dies; the next owner of the partitions resumes it.
	a.crash()
	c := startService(t, b.url, durable, cfg)
	for p := 0; p < parts; p++ {
		require.NoError(t, c.svc.Acquire(ctx, p))
	}
	require.Equal(t, float64(1), counter(t, c.m, "gttsplit_runs_open"), "resumed")
	clk.advance(idle + time.Second)
	eventually(t, "the corrected split", func() bool { n, _ := c.closes.count(); return n == 1 })
	time.Sleep(3 * flushEvery)
	require.Len(t, c.closes.of(id), 1, "written once")
	require.Len(t, a.closes.of(id), 1)
	want := replayJSON(t, append(append([]events.Wire{}, early...), fx.wires[late]))
	var wantRep split.Report
	require.NoError(t, json.Unmarshal(want, &wantRep))
	got := c.closes.of(id)[0]
	require.Equal(t, wantRep.Detail.LinesRead, got.Detail.LinesRead, "the late lines are in it")
	require.Greater(t, got.Detail.LinesRead, a.closes.of(id)[0].Detail.LinesRead)
	require.False(t, got.Run.Complete)
	st := b.state(t, id)
	require.True(t, st.Closed)
	require.Equal(t, 2, st.Splits)
	_, err = c.svc.kv.Get(ctx, marker)
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "closed again: the marker goes")
	require.Equal(t, float64(0), counter(t, c.m, "gttsplit_runs_open"))
}

// lateLine is a log-lines event of fx's run with one line the run never
// had.
func lateLine(t testing.TB, fx fixture) events.Wire {
	t.Helper()
	for _, d := range fx.decoded {
		if d.Lines != nil {
			l := d.Lines[0]
			l.Seq += 1 << 40
			ev, err := events.NewLogLines(fx.origin, []split.Line{l})
			require.NoError(t, err)
			w, err := events.ToWire(ev)
			require.NoError(t, err)
			return w
		}
	}
	t.Fatalf("%s has no log lines", fx.path)
	return events.Wire{}
}

// TestServeCompactsClosedRunIntegration: `serve` with store.compact_after
// 1ms compacts a run as soon as it closed and its split was settled by the
// JSON sink (then its open marker goes); /runs and /runs/{id} still answer
// from the compact record, and a new event for the run is dead-lettered
// (reason late) with no second split.
func TestServeCompactsClosedRunIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	cfg := testConfig(t, b.url)
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Store.CompactAfter = time.Millisecond
	s := startServe(t, cfg, ServeOptions{})
	id := fx.origin.RunID

	b.publish(t, fx.wires...)
	eventually(t, "the split", func() bool { n, _ := s.closes.count(); return n == 1 })
	eventually(t, "the compaction", func() bool {
		return metricValue(httpGet(t, s.http, "/metrics", http.StatusOK), "gttsplit_runs_compacted_total") == "1"
	})
	require.True(t, b.state(t, id).Compact())
	kv, err := b.js.KeyValue(testCtx(t), StateBucket)
	require.NoError(t, err)
	eventually(t, "the open marker purged", func() bool {
		_, err := kv.Get(testCtx(t), openKey(bus.PartitionOf(id, cfg.Consumer.Partitions), id))
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	require.False(t, b.state(t, id).SinksPending, "settled by the JSON sink")
	requireSameReport(t, fx.want, httpGet(t, s.http, "/runs/"+id, http.StatusOK))
	var list []RunSummary
	require.NoError(t, json.Unmarshal([]byte(httpGet(t, s.http, "/runs", http.StatusOK)), &list))
	require.Len(t, list, 1)
	require.Equal(t, "closed", list[0].State)

	b.publish(t, lateLine(t, fx))
	eventually(t, "the late event dead-lettered", func() bool {
		return metricValue(httpGet(t, s.http, "/metrics", http.StatusOK), `gttsplit_events_dead_lettered_total{reason="late"}`) == "1"
	})
	require.Equal(t, "0", metricValue(httpGet(t, s.http, "/metrics", http.StatusOK), "gttsplit_runs_open"))
	require.NoError(t, s.stop(t))
	n, _ := s.closes.count()
	require.Equal(t, 1, n, "one split")
	require.Len(t, sinkLines(t, cfg.Sinks.JSON.Dir), 1, "the sink got one split")
}
