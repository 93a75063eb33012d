package aggregator

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/runtable"
)

// stopTimeout is the shutdown_timeout of the stop tests' aggregators.
const stopTimeout = 15 * time.Second

// TestFleetStopHandsOverIntegration: two `aggregator serve` processes
// share the partitions of a backlog of runs published before they start;
// once the first has written a split (most of its share still to fold), it
// is sent SIGTERM. It exits 0 within its shutdown_timeout (plus as much
// again for the process itself on a loaded machine), logs no ERROR, and
// leaves no lease of its own in the state bucket (given back at once, not
// left to expire: the leases live a minute here); the other takes every
// partition and writes the rest: every run's split once across both sinks,
// equal to its replay, and the runs counted once by both
// (gttsplit_runs_completed_total summed over the two). Like the other
// fleet tests it skips under -race (its aggregators are child processes
// built without it; the race detector would only slow the harness that
// publishes and checks 600 runs: minutes on 2 cores): CI runs it in its
// fleet step.
func TestFleetStopHandsOverIntegration(t *testing.T) {
	skipShort(t)
	if raceEnabled && os.Getenv("GTTSPLIT_FLEET_RACE") == "" {
		t.Skip("child processes built without -race; the harness takes minutes under -race on 2 cores (GTTSPLIT_FLEET_RACE=1 runs it)")
	}
	bin := buildAggregator(t)
	b := startBroker(t)
	n := 600
	if v, _ := strconv.Atoi(os.Getenv("GTTSPLIT_FLEET_STOP_RUNS")); v > 0 {
		n = v // the figures of docs/capacity.md
	}
	runs := genRuns(t, n, loadFixture(t, fixture4B), loadFixture(t, fixture27B))
	// One run after the other: splits come all along the backlog.
	for _, r := range runs {
		b.publish(t, r.Wires...)
	}

	logDir := t.TempDir()
	env := []string{"GTTSPLIT_CONSUMER_LEASE_TTL=60s", "GTTSPLIT_SHUTDOWN_TIMEOUT=" + stopTimeout.String()}
	if v := os.Getenv("GTTSPLIT_FLEET_STOP_ACK_WAIT"); v != "" {
		env = append(env, "GTTSPLIT_CONSUMER_ACK_WAIT="+v) // (the figures of docs/capacity.md)
	}
	type agg struct {
		name, json, http string
		c                *child
	}
	start := func(name string) *agg {
		a := &agg{name: name, json: t.TempDir()}
		a.c = startServeChild(t, bin, b.url, logDir, name,
			[]string{"--json-dir", a.json, "--format", "json", "--log-level", "info", "--store", filepath.Join(logDir, name+"-store")}, env...)
		return a
	}
	first, second := start("first"), start("second")
	first.http = childHTTP(t, filepath.Join(logDir, "first.stderr"))
	second.http = childHTTP(t, filepath.Join(logDir, "second.stderr"))
	_, js := connectJS(t, b.url)
	parts, err := bus.StreamPartitions(testCtx(t), js, bus.DefaultStream)
	require.NoError(t, err)
	owned := func(a *agg) int {
		_, page := tryGet(a.http, "/metrics")
		v, _ := strconv.Atoi(metricValue(page, "gttsplit_partitions_owned"))
		return v
	}
	eventually(t, "the partitions shared by the two", func() bool {
		o1, o2 := owned(first), owned(second)
		return o1 > 0 && o2 > 0 && o1+o2 == parts
	})
	eventually(t, "the first aggregator's first split", func() bool {
		_, err := os.Stat(filepath.Join(first.json, "splits.jsonl"))
		return err == nil && len(sinkLines(t, first.json)) > 0
	})
	id := memberID(t, filepath.Join(logDir, "first.stderr"))

	splitsIn := func(dirs ...string) map[string]bool {
		seen := map[string]bool{}
		for _, dir := range dirs {
			if _, err := os.Stat(filepath.Join(dir, "splits.jsonl")); err == nil {
				for _, l := range sinkLines(t, dir) {
					seen[l.id] = true
				}
			}
		}
		return seen
	}
	backlog := n - len(splitsIn(first.json, second.json))
	require.NoError(t, first.c.cmd.Process.Signal(syscall.SIGTERM))
	t0 := time.Now()
	require.NoError(t, first.c.wait(t), "SIGTERM: exit 0")
	took := time.Since(t0)
	writtenBefore := len(sinkLines(t, first.json))
	t.Logf("SIGTERM to exit: %s (shutdown_timeout %s), %d of %d runs without a split at the signal, %d splits written by the stopped one, load %s",
		took.Round(time.Millisecond), stopTimeout, backlog, n, writtenBefore, loadavg())
	require.Less(t, took, 2*stopTimeout, "the stop ends within shutdown_timeout (and the process's own exit)")
	// Its leases are gone at once (or already the other's).
	for k, v := range leaseHolders(t, js) {
		require.False(t, strings.HasPrefix(v, id+"#"), "lease %s still held by the stopped aggregator", k)
	}
	stderr, err := os.ReadFile(filepath.Join(logDir, "first.stderr"))
	require.NoError(t, err)
	for _, l := range strings.Split(string(stderr), "\n") {
		if strings.Contains(l, "stop: ") || strings.Contains(l, "aggregator stopped") {
			t.Log(l) // the stop's steps and how long each took
		}
	}
	errLine := regexp.MustCompile(`"level":"(error|fatal|panic)"|^\S+ (ERR|FTL|PNC) `)
	for _, l := range strings.Split(string(stderr), "\n") {
		require.False(t, errLine.MatchString(l), "no ERROR for work left to the next owner: %s", l)
	}

	eventually(t, "every partition the second's", func() bool { return owned(second) == parts })
	// What the stop handed back the second folds at once: an event the
	// stop dropped would come again only an ack wait after it was
	// delivered (GTTSPLIT_FLEET_STOP_ACK_WAIT sets it: a long one makes
	// such an event fail this wait), and its run's split with it. The
	// wait fails only when no split came for waitFor (a deep backlog's
	// fold takes longer than that on a loaded machine).
	for last, lastAt := -1, time.Now(); ; time.Sleep(100 * time.Millisecond) {
		k := len(splitsIn(first.json, second.json))
		if k == n {
			break
		}
		if k > last {
			last, lastAt = k, time.Now()
		}
		if time.Since(lastAt) > waitFor {
			t.Fatalf("%d of %d runs' splits written, none more for %s: events the stop did not hand back wait for their ack wait", k, n, waitFor)
		}
	}
	_, page := tryGet(second.http, "/metrics")
	var causes []string
	for _, l := range strings.Split(page, "\n") {
		if c, ok := strings.CutPrefix(l, "gttsplit_events_redelivered_causes_total"); ok {
			causes = append(causes, c)
		}
	}
	t.Logf("every run's split %s after the signal; the second counted %s events redelivered %v, load %s",
		time.Since(t0).Round(time.Millisecond), metricValue(page, "gttsplit_events_redelivered_total"), causes, loadavg())
	got := map[string][]sinkLine{}
	for _, dir := range []string{first.json, second.json} {
		if _, err := os.Stat(filepath.Join(dir, "splits.jsonl")); err == nil {
			for _, l := range sinkLines(t, dir) {
				got[l.id] = append(got[l.id], l)
			}
		}
	}
	for _, r := range runs {
		ls := got[r.Origin.RunID]
		require.Len(t, ls, 1, "run %s: written once", r.Origin.RunID)
		require.Equal(t, string(compact(t, replayJSON(t, r.Wires))), string(ls[0].raw), r.Origin.RunID)
	}
	// Counted once: the stopped one's "split written" lines (each one a
	// count of its gttsplit_runs_completed_total) and the other's counter.
	counted := strings.Count(string(stderr), "split written")
	_, page = tryGet(second.http, "/metrics")
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, "gttsplit_runs_completed_total{") {
			v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			require.NoError(t, err)
			counted += int(v)
		}
	}
	require.Equal(t, n, counted, "gttsplit_runs_completed_total over both: each run once")
	require.NoError(t, second.c.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, second.c.wait(t))
}

// memberID reads an aggregator's fleet member id from its log.
func memberID(t *testing.T, stderr string) string {
	t.Helper()
	// JSON or console log lines.
	re := regexp.MustCompile(`"member":"([^"]+)"|\bmember=(\S+)`)
	b, err := os.ReadFile(stderr)
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "aggregator consuming") {
			if m := re.FindStringSubmatch(l); m != nil {
				return m[1] + m[2]
			}
		}
	}
	t.Fatalf("no member id in %s", stderr)
	return ""
}

// leaseHolders reads every partition lease of the state bucket: key ->
// value (the holder's member id and its lease's token).
func leaseHolders(t *testing.T, js jetstream.JetStream) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	kv, err := js.KeyValue(ctx, runtable.Bucket)
	require.NoError(t, err)
	keys, err := kv.ListKeysFiltered(ctx, "lease.>")
	require.NoError(t, err)
	out := map[string]string{}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err == nil {
			out[k] = string(e.Value())
		}
	}
	return out
}

// TestServeDeferredSplitsBeforeReadyIntegration: splits a stopped
// aggregator's sink never wrote (the JSON sink failing) stay pending in
// the state bucket; the next aggregator, whose sink queue holds 2 of them
// (sinks.max_pending), re-sends them all at its start, most deferred (read
// back from the bucket in their turn, some while their partitions are
// still being loaded). /readyz says "catching up" until every one is
// written: while the sink still fails it never answers 200 and, once the
// partitions are loaded, says it catches up and nothing else; whenever it
// answers 200, the sink holds every split, each once.
func TestServeDeferredSplitsBeforeReadyIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	cfg := testConfig(t, b.url)
	cfg.Sinks.MaxPending = 2
	cfg.Sinks.Retry.Max = 20 * time.Millisecond
	cfg.ShutdownTimeout = 5 * time.Second
	n := 40
	if raceEnabled {
		n = 16 // still 14 deferred behind a queue of 2
	}
	runs := genRuns(t, n, fx)
	dir := cfg.Sinks.JSON.Dir
	unblock := blockJSONSink(t, dir, runs)
	first := startServe(t, cfg, ServeOptions{})
	for _, r := range runs {
		b.publish(t, r.Wires...)
	}
	eventually(t, "every run closed", func() bool { _, c := first.closes.count(); return c == n })
	_ = first.stop(t) // its sink wrote nothing: the splits stay pending
	for _, r := range runs {
		require.True(t, b.state(t, r.Origin.RunID).SinksPending, r.Origin.RunID)
	}

	cfg.HTTP.Listen = "127.0.0.1:0"
	second := startServe(t, cfg, ServeOptions{})
	written := func() int {
		if _, err := os.Stat(filepath.Join(dir, "splits.jsonl")); err != nil {
			return 0
		}
		seen := map[string]bool{}
		for _, l := range sinkLines(t, dir) {
			seen[l.id] = true
		}
		return len(seen)
	}
	// The sink still fails: every split read back waits in its queue or
	// is deferred. /readyz never says ready meanwhile; once nothing else
	// keeps it unready (the partitions taken and loaded), it says it
	// catches up, and only that.
	var page string
	eventually(t, "/readyz catching up, and nothing else", func() bool {
		var code int
		code, page = tryGet(second.http, "/readyz")
		require.NotEqual(t, http.StatusOK, code, "/readyz said ready while the sink wrote no split (%d of %d written)", written(), n)
		return code == http.StatusServiceUnavailable && strings.HasPrefix(page, "catching up: ") &&
			strings.Contains(page, "splits read back from the state bucket wait for the sinks") && !strings.Contains(page, ";")
	})
	require.Zero(t, written(), "a split written while the sink fails")
	t.Logf("/readyz while the sink fails: %s", strings.TrimSpace(page))
	unblock()
	catchingUp := false
	eventually(t, "ready", func() bool {
		code, page := tryGet(second.http, "/readyz")
		if strings.Contains(page, "catching up") {
			catchingUp = true
		}
		if code != 200 {
			return false
		}
		require.Equal(t, n, written(), "/readyz said ready with splits still to write (%s)", page)
		return true
	})
	lines := sinkLines(t, dir)
	require.Len(t, lines, n, "each split written once")
	t.Logf("/readyz said catching up before: %v", catchingUp)
	require.NoError(t, second.stop(t))
}

// blockJSONSink makes the JSON sink in dir fail every write of the runs'
// splits (a transient error) until the returned func is called: every
// run's document goes under a directory named after its host, and a file
// stands in its place.
func blockJSONSink(t *testing.T, dir string, runs []genRun) (unblock func()) {
	t.Helper()
	hosts := map[string]bool{}
	for _, r := range runs {
		hosts[r.Origin.Host] = true
	}
	for h := range hosts {
		require.NoError(t, os.WriteFile(filepath.Join(dir, h), nil, 0o644))
	}
	return func() {
		for h := range hosts {
			require.NoError(t, os.Remove(filepath.Join(dir, h)))
		}
	}
}
