package aggregator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// TestServeShuffledDuplicatesIntegration publishes the 4B run's events in
// a random order, a third of them twice under different Nats-Msg-Ids (so
// JetStream keeps both and the aggregator really gets duplicates): the
// split the JSON sink writes is byte for byte the one `aggregator replay`
// computes from the file.
func TestServeShuffledDuplicatesIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)

	var ws []events.Wire
	var ids []string
	for i, k := range shuffled(t, len(fx.Wires)) {
		w := fx.Wires[k]
		ws, ids = append(ws, w), append(ids, "")
		if i%3 == 0 {
			ws, ids = append(ws, w), append(ids, w.ID+"#again")
		}
	}
	dups := len(ws) - len(fx.Wires)
	require.Positive(t, dups)
	b.publishIDs(t, ws, ids)
	// JetStream kept every copy: the aggregator is handed real duplicates.
	require.Len(t, b.streamMsgs(t, "gttsplit.>"), len(ws))

	cfg := testConfig(t, b.url)
	s := startServe(t, cfg, ServeOptions{})
	b.waitAcked(t, cfg.Consumer.Fleet.Group)
	require.NoError(t, s.stop(t))

	ci, err := b.consumerInfo(cfg.Consumer.Fleet.Group)
	require.NoError(t, err)
	require.GreaterOrEqual(t, ci.Delivered.Consumer, uint64(len(ws)), "every copy was delivered")

	docs := sinkDocs(t, cfg.Sinks.JSON.Dir)
	require.Len(t, docs, 1)
	require.Equal(t, string(fx.Want), string(docs[fx.Origin.RunID]))
	got := s.closes.of(fx.Origin.RunID)
	require.NotEmpty(t, got)
	last, err := split.JSON(got[len(got)-1])
	require.NoError(t, err)
	require.Equal(t, string(fx.Want), string(last))
	// The durable state says the same.
	st := b.state(t, fx.Origin.RunID)
	require.True(t, st.Closed)
	require.Equal(t, string(fx.Want), st.Reported)
}

// TestServeLiveEqualsReplayIntegration publishes both recorded runs in
// their order through a real `serve` with a JSON sink: each run's
// document, its splits.jsonl line and what serve printed are byte for byte
// what `aggregator replay --format json` prints, and each run got exactly
// one split.
func TestServeLiveEqualsReplayIntegration(t *testing.T) {
	skipShort(t)
	fxs := []fixture{loadFixture(t, fixture4B), loadFixture(t, fixture27B)}
	b := startBroker(t)
	cfg := testConfig(t, b.url)
	var out sinktest.Buffer // Serve prints to it while the test reads it
	s := startServe(t, cfg, ServeOptions{Stdout: &out})
	for _, fx := range fxs {
		b.publish(t, fx.Wires...)
	}
	eventually(t, "both splits", func() bool { n, _ := s.closes.count(); return n >= len(fxs) })
	b.waitAcked(t, cfg.Consumer.Fleet.Group)
	require.NoError(t, s.stop(t))

	docs := sinkDocs(t, cfg.Sinks.JSON.Dir)
	require.Len(t, docs, len(fxs))
	lines := sinkLines(t, cfg.Sinks.JSON.Dir)
	require.Len(t, lines, len(fxs), "one split per run")
	printed := out.Bytes()
	for _, fx := range fxs {
		require.Equal(t, string(fx.Want), string(docs[fx.Origin.RunID]), fx.Path)
		require.Len(t, s.closes.of(fx.Origin.RunID), 1, "%s: one split", fx.Path)
		var line []byte
		for _, l := range lines {
			if l.id == fx.Origin.RunID {
				line = l.raw
			}
		}
		require.Equal(t, string(compact(t, fx.Want)), string(line), fx.Path)
		require.Equal(t, 1, bytes.Count(printed, append(compact(t, fx.Want), '\n')), "%s: serve printed the split once, as a JSON line", fx.Path)
	}
	require.Len(t, printed, len(compact(t, fxs[0].Want))+len(compact(t, fxs[1].Want))+2)
}

// TestServeManyRunsIntegration folds 52 runs from three hosts and four
// lanes (the two recorded runs under new ids) published interleaved: each
// run's split has its own id, host and lane and otherwise exactly the
// numbers of the recorded run it was made from, and exactly 52 splits are
// written.
func TestServeManyRunsIntegration(t *testing.T) {
	skipShort(t)
	const n = 52
	fxs := []fixture{loadFixture(t, fixture4B), loadFixture(t, fixture27B)}
	t0 := time.Now()
	runs := genRuns(t, n, fxs...)
	t.Logf("generated in %s", time.Since(t0))
	b := startBroker(t)
	cfg := testConfig(t, b.url)
	s := startServe(t, cfg, ServeOptions{})
	t0 = time.Now()
	b.publish(t, interleave(runs)...)
	t.Logf("published in %s", time.Since(t0))
	eventually(t, fmt.Sprintf("%d splits", n), func() bool { c, _ := s.closes.count(); return c >= n })
	t.Logf("folded in %s", time.Since(t0))
	b.waitAcked(t, cfg.Consumer.Fleet.Group)
	require.NoError(t, s.stop(t))

	splits, distinct := s.closes.count()
	require.Equal(t, n, splits, "exactly one split per run")
	require.Equal(t, n, distinct)
	docs := sinkDocs(t, cfg.Sinks.JSON.Dir)
	require.Len(t, docs, n)
	require.Len(t, sinkLines(t, cfg.Sinks.JSON.Dir), n)
	hosts, lanes := map[string]bool{}, map[string]bool{}
	for _, g := range runs {
		doc, ok := docs[g.Origin.RunID]
		require.True(t, ok, "no split of %s", g.Origin.RunID)
		var r split.Report
		require.NoError(t, json.Unmarshal(doc, &r))
		require.Equal(t, g.Origin.RunID, r.Run.ID)
		require.Equal(t, g.Origin.Host, r.Run.Host)
		require.Equal(t, g.Origin.Lane, r.Run.Lane)
		hosts[r.Run.Host], lanes[r.Run.Lane] = true, true
		// Everything else is the recorded run's split, byte for byte.
		r.Run.ID, r.Run.Host, r.Run.Lane = g.Fx.Origin.RunID, g.Fx.Origin.Host, g.Fx.Origin.Lane
		got, err := split.JSON(r)
		require.NoError(t, err)
		require.Equal(t, string(g.Fx.Want), string(got), g.Origin.RunID)
	}
	require.Len(t, hosts, 3)
	require.Len(t, lanes, 4)
}

// TestServePoisonIntegration publishes, among a recorded run's events, a
// message that is not JSON and a valid CloudEvent of an unknown type
// version on a consumed subject: both go to
// gttsplit.dlq.<host>.<lane>.<run> with their reason, /metrics counts them,
// and the run still folds to the replay's split.
func TestServePoisonIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	cfg := testConfig(t, b.url)
	cfg.HTTP.Listen = "127.0.0.1:0"
	s := startServe(t, cfg, ServeOptions{})

	// A log-lines event of the run, re-typed as a v9 the aggregator does
	// not know: still a valid CloudEvent.
	var v9 map[string]any
	var logWire events.Wire
	for i, d := range fx.Decoded {
		if d.Lines != nil {
			logWire = fx.Wires[i]
			break
		}
	}
	require.NoError(t, json.Unmarshal(logWire.Data, &v9))
	v9["type"] = "io.gttsplit.log.lines.v9"
	v9["id"] = "poison-v9"
	unknown, err := json.Marshal(v9)
	require.NoError(t, err)
	_, err = events.Unmarshal(unknown)
	require.NoError(t, err, "the v9 event is a valid CloudEvent")
	notJSON := []byte(`{"specversion":"1.0","id":`)

	half := len(fx.Wires) / 2
	b.publish(t, fx.Wires[:half]...)
	b.publishRaw(t, logWire.Subject, notJSON)
	b.publishRaw(t, logWire.Subject, unknown)
	b.publish(t, fx.Wires[half:]...)

	eventually(t, "the run's split", func() bool { n, _ := s.closes.count(); return n >= 1 })
	b.waitAcked(t, cfg.Consumer.Fleet.Group)

	dlq := events.Subject(events.KindDLQ, fx.Origin.Host, fx.Origin.Lane, fx.Origin.RunID)
	require.Equal(t, "gttsplit.dlq.strix01.gpu0."+fx.Origin.RunID, dlq)
	eventually(t, "two dead letters", func() bool { return len(b.streamMsgs(t, "gttsplit.dlq.>")) >= 2 })
	msgs := b.streamMsgs(t, "gttsplit.dlq.>")
	require.Len(t, msgs, 2)
	for _, m := range msgs {
		require.Equal(t, dlq, bus.PublishedSubject(m.Subject()), "stored under its partition: %s", m.Subject())
		require.Equal(t, logWire.Subject, m.Headers().Get("Gttsplit-Original-Subject"))
		require.NotEmpty(t, m.Headers().Get("Gttsplit-Stream-Seq"))
	}
	if !bytes.Equal(notJSON, msgs[0].Data()) {
		msgs[0], msgs[1] = msgs[1], msgs[0] // handled in parallel: either order
	}
	require.Equal(t, notJSON, msgs[0].Data())
	require.Contains(t, msgs[0].Headers().Get("Gttsplit-Reason"), events.ErrInvalid.Error())
	require.Equal(t, unknown, msgs[1].Data())
	reason := msgs[1].Headers().Get("Gttsplit-Reason")
	require.Contains(t, reason, events.ErrUnknownType.Error())
	require.Contains(t, reason, "io.gttsplit.log.lines.v9")

	metrics := httpGet(t, s.http, "/metrics", http.StatusOK)
	require.Contains(t, metrics, `gttsplit_events_dead_lettered_total{reason="invalid"} 1`)
	require.Contains(t, metrics, `gttsplit_events_dead_lettered_total{reason="unknown_type"} 1`)
	require.Contains(t, metrics, fmt.Sprintf("gttsplit_events_folded_total %d", len(fx.Wires)))
	require.Contains(t, metrics, `gttsplit_runs_completed_total{status="complete"} 1`)

	require.NoError(t, s.stop(t))
	require.Equal(t, string(fx.Want), string(sinkDocs(t, cfg.Sinks.JSON.Dir)[fx.Origin.RunID]))
}

// httpGet fetches path from the test's HTTP endpoint (no keep-alive, so no
// connection outlives the test) and checks the status.
func httpGet(t testing.TB, addr, path string, status int) string {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: waitFor}
	resp, err := c.Get("http://" + addr + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, status, resp.StatusCode, "GET %s: %s", path, b)
	return string(b)
}

// metricValue returns the value of a metric line (name with labels) in a
// Prometheus text page, or "" when absent.
func metricValue(page, name string) string {
	for _, l := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}

// TestServeHTTPIntegration serves HTTP on a free port: /healthz and
// /readyz answer, /metrics has the counters, /runs lists an open run and
// /runs/{id} gives its current split (the replay of the events published
// so far); after the run-finished event /runs says closed and /runs/{id}
// is the final split.
func TestServeHTTPIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	cfg := testConfig(t, b.url)
	cfg.HTTP.Listen = "127.0.0.1:0"
	s := startServe(t, cfg, ServeOptions{})
	host, _, err := net.SplitHostPort(s.http)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)

	require.Equal(t, "ok\n", httpGet(t, s.http, "/healthz", http.StatusOK))
	require.Equal(t, "ready\n", httpGet(t, s.http, "/readyz", http.StatusOK))
	require.Equal(t, "[]\n", httpGet(t, s.http, "/runs", http.StatusOK))
	httpGet(t, s.http, "/runs/no-such-run", http.StatusNotFound)

	fin := fx.FinishedIndex(t)
	open := fx.Without(fin)
	b.publish(t, open...)
	// The partitioned stream sources the events a moment after they are
	// stored: wait for the fold, then for the acknowledgements.
	eventually(t, "every event folded", func() bool {
		return metricValue(httpGet(t, s.http, "/metrics", http.StatusOK), "gttsplit_events_folded_total") == fmt.Sprint(len(open))
	})
	b.waitAcked(t, cfg.Consumer.Fleet.Group)

	m := httpGet(t, s.http, "/metrics", http.StatusOK)
	require.Equal(t, fmt.Sprint(len(open)), metricValue(m, "gttsplit_events_folded_total"))
	require.Equal(t, "1", metricValue(m, "gttsplit_runs_open"))
	require.Equal(t, "0", metricValue(m, "gttsplit_events_redelivered_total"))
	for _, name := range []string{"gttsplit_partitions_owned", "gttsplit_fleet_members", "gttsplit_partitions_unowned", "gttsplit_state_persist_errors_total", "gttsplit_fold_seconds_count", "go_goroutines"} {
		require.NotEmpty(t, metricValue(m, name), name)
	}
	// The acknowledgements came after a checkpoint that wrote the run.
	for _, name := range []string{"gttsplit_checkpoints_total", "gttsplit_state_writes_total"} {
		n, err := strconv.Atoi(metricValue(m, name))
		require.NoError(t, err, name)
		require.Positive(t, n, name)
	}

	var list []runtable.RunSummary
	require.NoError(t, json.Unmarshal([]byte(httpGet(t, s.http, "/runs", http.StatusOK)), &list))
	require.Len(t, list, 1)
	require.Equal(t, runtable.RunSummary{ID: fx.Origin.RunID, Host: fx.Origin.Host, Lane: fx.Origin.Lane, State: "open", LastEvent: list[0].LastEvent}, list[0])
	require.False(t, list[0].LastEvent.IsZero())

	wantOpen := replayJSON(t, open)
	requireSameReport(t, wantOpen, httpGet(t, s.http, "/runs/"+fx.Origin.RunID, http.StatusOK))
	var r split.Report
	require.NoError(t, json.Unmarshal(wantOpen, &r))
	require.False(t, r.Run.Complete, "the open run's split is not complete")

	b.publish(t, fx.Wires[fin])
	eventually(t, "the split", func() bool { n, _ := s.closes.count(); return n == 1 })
	b.waitAcked(t, cfg.Consumer.Fleet.Group)
	require.NoError(t, json.Unmarshal([]byte(httpGet(t, s.http, "/runs", http.StatusOK)), &list))
	require.Len(t, list, 1)
	require.Equal(t, "closed", list[0].State)
	requireSameReport(t, fx.Want, httpGet(t, s.http, "/runs/"+fx.Origin.RunID, http.StatusOK))
	// The sink's outcome is observed just after the split closed.
	eventually(t, "the sink write counted", func() bool {
		return metricValue(httpGet(t, s.http, "/metrics", http.StatusOK), `gttsplit_sink_writes_total{sink="json"}`) == "1"
	})
	m = httpGet(t, s.http, "/metrics", http.StatusOK)
	require.Equal(t, "0", metricValue(m, "gttsplit_runs_open"))
	require.Equal(t, "1", metricValue(m, `gttsplit_runs_completed_total{status="complete"}`))
	// The sinks write on their own goroutines: the write is counted once done.
	eventually(t, "the JSON sink's write counted", func() bool {
		return metricValue(httpGet(t, s.http, "/metrics", http.StatusOK), `gttsplit_sink_writes_total{sink="json"}`) == "1"
	})

	require.NoError(t, s.stop(t))
}

// requireSameReport compares an HTTP answer with a split.JSON document as
// decoded reports (the endpoint indents on its own).
func requireSameReport(t testing.TB, want []byte, got string) {
	t.Helper()
	var w, g split.Report
	require.NoError(t, json.Unmarshal(want, &w))
	require.NoError(t, json.Unmarshal([]byte(got), &g))
	require.Equal(t, w, g)
	gb, err := split.JSON(g)
	require.NoError(t, err)
	require.Equal(t, string(want), string(gb))
}

// TestServeHTTPListenBusyIntegration: an HTTP address already in use is an
// error from Serve, which leaves nothing running (goleak checks the sink
// goroutines).
func TestServeHTTPListenBusyIntegration(t *testing.T) {
	skipShort(t)
	b := startBroker(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	cfg := testConfig(t, b.url)
	cfg.HTTP.Listen = ln.Addr().String()
	err = Serve(testCtx(t), cfg, ServeOptions{}, testLogger(t))
	require.ErrorContains(t, err, "http.listen")
}
