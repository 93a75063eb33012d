package aggregator

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
)

// The fleet tests run a real 3-node JetStream cluster of nats-server
// processes (R3 streams, consumers and buckets), real `aggregator serve`
// processes and several publishers, and kill or pause what a fleet loses.
// They skip under -race (minutes on 2 cores; GTTSPLIT_FLEET_RACE=1 runs
// them), and run clusterRuns runs (GTTSPLIT_FLEET=full: fullRuns, the
// figures of docs/performance.md). GTTSPLIT_FLEET_LOG_LEVEL sets the
// aggregators' log level; GTTSPLIT_FLEET_KEEP=<dir> keeps the leader loss
// test's logs (aggregators' and nodes') there.

const (
	clusterRuns = 120
	fullRuns    = 1000
)

func fleetRuns(t *testing.T) int {
	skipShort(t)
	if raceEnabled && os.Getenv("GTTSPLIT_FLEET_RACE") == "" {
		t.Skip("a 3-node cluster and 3 aggregator processes take minutes under -race on 2 cores; GTTSPLIT_FLEET_RACE=1 runs it")
	}
	if os.Getenv("GTTSPLIT_FLEET") == "full" {
		return fullRuns
	}
	return clusterRuns
}

// fleetRig is the cluster, its aggregators and what the test saw of them.
type fleetRig struct {
	t      *testing.T
	c      *natstest.ProcCluster
	js     jetstream.JetStream
	bin    string
	logDir string
	aggs   []*fleetAgg
	runs   []genRun
	// sequential: each publisher publishes its runs one after the other
	// (splits come all along), not interleaved (they come at the end).
	sequential bool
	// subject, when set, is the subject an event is published on, from
	// the one it carries (the broker-cost test's stream a partition).
	subject func(string) string

	mu       sync.Mutex
	lastPub  time.Time
	pubBytes int64
	seen     map[string]time.Time // run -> when its first split line was seen
	// killed is when the test killed a node (set by the test), resumed
	// when a publish sent after that was first acknowledged: the events
	// stream takes events again.
	killed, resumed time.Time
}

type fleetAgg struct {
	name string
	c    *child
	json string
	http string
}

func startFleet(t *testing.T, n int) *fleetRig {
	f := &fleetRig{t: t, bin: buildAggregator(t), logDir: t.TempDir(), seen: map[string]time.Time{}}
	// Every node's monitoring port (the broker cost tests read connz).
	extra := "http_port: -1"
	if os.Getenv("GTTSPLIT_FLEET_PROFILE") != "" {
		extra += "\nprof_port: -1"
	}
	f.c = natstest.StartProcCluster(t, 3, extra)
	_, f.js = connectJS(t, f.c.URLs())
	sc := bus.DefaultStreamConfig()
	sc.Replicas = 3
	if v, _ := strconv.Atoi(os.Getenv("GTTSPLIT_FLEET_PARTITIONS")); v > 0 {
		sc.Partitions = v
	}
	eventually(t, "the R3 events stream", func() bool {
		_, err := bus.EnsureStream(testCtx(t), f.js, sc, testLogger(t))
		return err == nil
	})
	fxs := []fixture{loadFixture(t, fixture4B), loadFixture(t, fixture27B)}
	f.runs = genRuns(t, n, fxs...)
	return f
}

// startAggs starts n aggregator processes at once.
func (f *fleetRig) startAggs(n int) {
	t := f.t
	base := len(f.aggs)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("agg%d", base+i)
		dir := t.TempDir()
		ch := startServeChild(t, f.bin, f.c.URLs(), f.logDir, name,
			[]string{"--json-dir", dir, "--format", "json", "--log-level", logLevelFleet(), "--store", filepath.Join(f.logDir, name+"-store")},
			append([]string{"GTTSPLIT_NATS_REPLICAS=3"}, strings.Fields(os.Getenv("GTTSPLIT_FLEET_ENV"))...)...)
		f.aggs = append(f.aggs, &fleetAgg{name: name, c: ch, json: dir})
	}
	for _, a := range f.aggs[base:] {
		a.http = childHTTP(t, filepath.Join(f.logDir, a.name+".stderr"))
	}
}

// waitOwned waits until every live aggregator is ready and together they
// own every partition.
func (f *fleetRig) waitOwned(live ...*fleetAgg) {
	eventually(f.t, "every aggregator ready, every partition owned", func() bool {
		owned := 0
		for _, a := range live {
			st, _ := tryGet(a.http, "/readyz")
			code, page := tryGet(a.http, "/metrics")
			if st != http.StatusOK || code != http.StatusOK {
				return false
			}
			n, _ := strconv.Atoi(metricValue(page, "gttsplit_partitions_owned"))
			owned += n
		}
		parts, err := bus.StreamPartitions(testCtx(f.t), f.js, bus.DefaultStream)
		return err == nil && owned == parts
	})
}

// publish publishes the runs' events with p publishers, each its own
// connection, interleaved; a failed publish (a node going away) is tried
// again with the same message id. at, if set, is called once half the
// events are published.
func (f *fleetRig) publish(p int, half func()) {
	t := f.t
	total := 0
	for _, r := range f.runs {
		total += len(r.Wires)
	}
	var wg sync.WaitGroup
	var once sync.Once
	published := 0
	for i := 0; i < p; i++ {
		var mine []genRun
		for k := i; k < len(f.runs); k += p {
			mine = append(mine, f.runs[k])
		}
		ws := interleave(mine)
		if f.sequential {
			ws = ws[:0:0]
			for _, r := range mine {
				ws = append(ws, r.Wires...)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := nats.Connect(f.c.URLs(), nats.Timeout(natstest.ConnectTimeout), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
			if err != nil {
				t.Error(err)
				return
			}
			defer nc.Close()
			pjs, _ := jetstream.New(nc)
			for _, w := range ws {
				var sent time.Time
				for try := 0; ; try++ {
					sent = time.Now()
					subj := w.Subject
					if f.subject != nil {
						subj = f.subject(subj)
					}
					m := nats.NewMsg(subj)
					m.Data = w.Data
					m.Header.Set(jetstream.MsgIDHeader, w.ID)
					pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					_, err := pjs.PublishMsg(pctx, m)
					cancel()
					if err == nil {
						break
					}
					if try > 200 {
						t.Errorf("publish %s: %v", w.ID, err)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				f.mu.Lock()
				published++
				f.pubBytes += int64(len(w.Data))
				f.lastPub = time.Now()
				if !f.killed.IsZero() && f.resumed.IsZero() && sent.After(f.killed) {
					f.resumed = f.lastPub
				}
				doHalf := published == total/2
				f.mu.Unlock()
				if doHalf && half != nil {
					once.Do(half)
				}
			}
		}()
	}
	wg.Wait()
	require.False(t, t.Failed())
}

// watchSplits notes when each run's first split line appears in any
// aggregator's sink, every 100 ms, until stop is closed.
func (f *fleetRig) watchSplits(stop <-chan struct{}) {
	for {
		for id := range f.lines() {
			f.mu.Lock()
			if _, ok := f.seen[id]; !ok {
				f.seen[id] = time.Now()
			}
			f.mu.Unlock()
		}
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// lines returns every aggregator's splits.jsonl lines by run.
func (f *fleetRig) lines() map[string][]sinkLine {
	out := map[string][]sinkLine{}
	for _, a := range f.aggs {
		if _, err := os.Stat(filepath.Join(a.json, "splits.jsonl")); err != nil {
			continue
		}
		for _, l := range sinkLines(f.t, a.json) {
			l.dir = a.json
			out[l.id] = append(out[l.id], l)
		}
	}
	return out
}

// waitAll waits until every run has a split, for up to d.
func (f *fleetRig) waitAll(d time.Duration) time.Time {
	deadline := time.Now().Add(d)
	for {
		if got := f.lines(); len(got) == len(f.runs) {
			return time.Now()
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%d of %d runs have a split", len(f.lines()), len(f.runs))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkOnce checks that every run was written exactly once in all the
// sinks, complete and equal to its replay, and that the stream holds one
// split event a run; it returns the runs written more than once.
func (f *fleetRig) checkOnce() {
	t := f.t
	got := f.lines()
	var twice []string
	for _, r := range f.runs {
		ls := got[r.Origin.RunID]
		require.NotEmpty(t, ls, r.Origin.RunID)
		if len(ls) > 1 {
			twice = append(twice, r.Origin.RunID)
		}
		require.Contains(t, string(ls[0].raw), `"complete":true`, "run %s: no split marked complete early, none incomplete", r.Origin.RunID)
		require.Equal(t, string(compact(t, replayJSON(t, r.Wires))), string(ls[0].raw), r.Origin.RunID)
	}
	sort.Strings(twice)
	require.Empty(t, twice, "runs written more than once")
	ctx := testCtx(t)
	eventually(t, "one split event a run", func() bool {
		si, err := f.js.Stream(ctx, bus.DefaultStream)
		if err != nil {
			return false
		}
		info, err := si.Info(ctx, jetstream.WithSubjectFilter("gttsplit.split.>"))
		return err == nil && len(info.State.Subjects) == len(f.runs)
	})
	si, err := f.js.Stream(ctx, bus.DefaultStream)
	require.NoError(t, err)
	info, err := si.Info(ctx, jetstream.WithSubjectFilter("gttsplit.split.>"))
	require.NoError(t, err)
	for subj, n := range info.State.Subjects {
		require.EqualValues(t, 1, n, "split events on %s", subj)
	}
}

// metric sums a metric over the live aggregators' /metrics.
func (f *fleetRig) metric(name string, live ...*fleetAgg) float64 {
	sum := 0.0
	for _, a := range live {
		_, page := tryGet(a.http, "/metrics")
		v, _ := strconv.ParseFloat(metricValue(page, name), 64)
		sum += v
	}
	return sum
}

func (f *fleetRig) stopAggs(live ...*fleetAgg) {
	for _, a := range live {
		require.NoError(f.t, a.c.cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, a := range live {
		require.NoError(f.t, a.c.wait(f.t), a.name)
	}
}

func aggCPU(aggs ...*fleetAgg) time.Duration {
	var sum time.Duration
	for _, a := range aggs {
		sum += natstest.ProcessCPU(a.c.cmd.Process.Pid)
	}
	return sum
}

// A backlog published while no aggregator runs, then 3 aggregators
// started together: each run is written once in all the sinks (no two
// owners of a partition, ever), redeliveries stay within 1 % of the
// events, the events are stored once (the events stream's bytes per
// replica against the bytes published), and the broker's CPU is measured
// against the aggregators' while they fold.
func TestFleetBacklogIntegration(t *testing.T) {
	n := fleetRuns(t)
	f := startFleet(t, n)
	f.publish(6, nil)
	nEvents := 0
	for _, r := range f.runs {
		nEvents += len(r.Wires)
	}
	cpuNATS0 := f.c.CPU()
	t0 := time.Now()
	stopProf := f.profile("backlog")
	f.startAggs(3)
	done := f.waitAll(10 * time.Minute)
	// The aggregators' whole lives (their start-up included) against the
	// broker's time from just before they started.
	cpuNATS, cpuAgg := f.c.CPU()-cpuNATS0, aggCPU(f.aggs...)
	stopProf()
	redelivered := f.metric("gttsplit_events_redelivered_total", f.aggs...)
	folded := f.metric("gttsplit_events_folded_total", f.aggs...)
	writes := f.metric("gttsplit_state_writes_total", f.aggs...)
	progress := f.metric("gttsplit_events_progress_acks_total", f.aggs...)
	late := f.metric("gttsplit_events_pulled_late_total", f.aggs...)
	causes := f.redeliveryCauses()
	f.stopAggs(f.aggs...)
	f.keepLogs("backlog")
	f.checkOnce()

	ctx := testCtx(t)
	si, err := f.js.Stream(ctx, bus.DefaultStream)
	require.NoError(t, err)
	info, err := si.Info(ctx)
	require.NoError(t, err)
	var eventBytes uint64
	streams := f.js.ListStreams(ctx)
	var names []string
	for s := range streams.Info() {
		names = append(names, s.Config.Name)
		if s.Config.Name == bus.DefaultStream || s.Config.Name == bus.LegacyStream(bus.DefaultStream) {
			eventBytes += s.State.Bytes
		}
	}
	slices.Sort(names)
	storage := float64(eventBytes) / float64(f.pubBytes)
	t.Logf("FIGURE backlog: %d runs, %d events (%.1f MB published), 3 aggregators started together: all written once in %.1f s; "+
		"redelivered %.0f of %d events (%.2f %%); events stored once: streams %v, events stream %.1f MB a replica = %.2f× the published bytes "+
		"(%d messages); CPU while folding: NATS %.1f s, aggregators %.1f s (NATS/aggregators %.2f); folded %.0f; %.1f state writes a run; %.0f progress acks",
		n, nEvents, float64(f.pubBytes)/1e6, done.Sub(t0).Seconds(), redelivered, nEvents, 100*redelivered/float64(nEvents),
		names, float64(eventBytes)/1e6, storage, info.State.Msgs, cpuNATS.Seconds(), cpuAgg.Seconds(),
		cpuNATS.Seconds()/cpuAgg.Seconds(), folded, writes/float64(n), progress)
	t.Logf("FIGURE backlog redeliveries by cause: %s; %.0f events came on a pull given up (handled); load %s", causes, late, loadavg())
	require.LessOrEqual(t, redelivered, float64(nEvents)/100, "at most 1 % redelivered")
	require.LessOrEqual(t, storage, 1.3, "every event stored once")
	require.NotContains(t, names, bus.LegacyStream(bus.DefaultStream))
}

// The events stream's leader node is SIGKILLed half-way through a
// publication by 6 publishers, each publishing its runs one after the
// other: every run is written once, and the splits come again within
// reactBound of the survivors' elections (outage.check; the gap between
// the last split before the kill and the first after it, and the time from
// the last publish to the last split, are the figures).
func TestFleetNodeLossIntegration(t *testing.T) {
	n := fleetRuns(t)
	f := startFleet(t, n)
	f.sequential = true // splits all along: the gap is the outage's
	f.startAggs(3)
	f.waitOwned(f.aggs...)
	stop := make(chan struct{})
	go f.watchSplits(stop)
	gone := ""
	load := loadavg()
	f.publish(6, func() {
		ctx := testCtx(t)
		si, err := f.js.Stream(ctx, bus.DefaultStream)
		require.NoError(t, err)
		leader := ""
		if ci := si.CachedInfo().Cluster; ci != nil {
			leader = ci.Leader
		}
		for _, nd := range f.c.Nodes {
			if nd.Name == leader {
				nd.Kill()
				gone = nd.Name
				f.mu.Lock()
				f.killed = time.Now()
				f.mu.Unlock()
			}
		}
	})
	require.NotEmpty(t, gone, "the events stream's leader was found and killed")
	last := f.waitAll(5 * time.Minute)
	close(stop)
	o := f.outage(last)
	load += " → " + loadavg()
	el := electedAfter(t, f, gone, o.killed)
	f.stopAggs(f.aggs...)
	f.checkOnce()
	t.Logf("FIGURE node loss: %d runs, node %s (leading the events stream) SIGKILLed: %s; load %s", n, gone, o.say(el), load)
	o.check(t, el)
}

// An aggregator paused (SIGSTOP) for 20 s while runs are published, then
// resumed: its partitions went to the others once its leases expired, and
// nothing it held is written twice.
func TestFleetPausedAggregatorIntegration(t *testing.T) {
	n := fleetRuns(t)
	f := startFleet(t, n)
	f.startAggs(3)
	f.waitOwned(f.aggs...)
	paused := f.aggs[1]
	resumed := make(chan struct{})
	f.publish(6, func() {
		require.NoError(t, paused.c.cmd.Process.Signal(syscall.SIGSTOP))
		go func() {
			defer close(resumed)
			time.Sleep(20 * time.Second)
			_ = paused.c.cmd.Process.Signal(syscall.SIGCONT)
		}()
	})
	<-resumed
	f.waitAll(5 * time.Minute)
	time.Sleep(2 * time.Second) // anything the resumed one would still write
	lost := f.metric("gttsplit_partitions_owned", paused)
	f.stopAggs(f.aggs...)
	f.checkOnce()
	b, _ := os.ReadFile(filepath.Join(f.logDir, paused.name+".stderr"))
	t.Logf("FIGURE pause: %d runs, %s paused 20 s: every run written once; it owned %.0f partitions after it resumed; its log says lost %d times",
		n, paused.name, lost, strings.Count(string(b), "partition lease lost"))
}

// redeliveryCauses says, for each live aggregator, its redeliveries by
// the cause it traced them to (gttsplit_events_redelivered_causes_total).
func (f *fleetRig) redeliveryCauses() string {
	var out []string
	for _, a := range f.aggs {
		_, page := tryGet(a.http, "/metrics")
		var cs []string
		for _, l := range strings.Split(page, "\n") {
			if rest, ok := strings.CutPrefix(l, `gttsplit_events_redelivered_causes_total{cause="`); ok {
				cause, v, _ := strings.Cut(rest, `"} `)
				cs = append(cs, cause+" "+v)
			}
		}
		out = append(out, a.name+": "+strings.Join(cs, ", "))
	}
	return strings.Join(out, "; ")
}

// writeCauses says the run states the live aggregators wrote a run (of
// runs), by cause (gttsplit_state_writes_causes_total).
func (f *fleetRig) writeCauses(runs int, live ...*fleetAgg) string {
	sum := map[string]float64{}
	for _, a := range live {
		_, page := tryGet(a.http, "/metrics")
		for _, l := range strings.Split(page, "\n") {
			if rest, ok := strings.CutPrefix(l, `gttsplit_state_writes_causes_total{cause="`); ok {
				cause, v, _ := strings.Cut(rest, `"} `)
				x, _ := strconv.ParseFloat(v, 64)
				sum[cause] += x
			}
		}
	}
	var out []string
	for c, v := range sum {
		out = append(out, fmt.Sprintf("%s %.2f", c, v/float64(runs)))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// keepLogs, with GTTSPLIT_FLEET_KEEP=<dir>, copies the aggregators' logs
// and the nodes' to <dir>/<test> (the aggregators' at debug level with
// GTTSPLIT_FLEET_LOG_LEVEL=debug trace each redelivery and hand-back).
func (f *fleetRig) keepLogs(test string) {
	d := os.Getenv("GTTSPLIT_FLEET_KEEP")
	if d == "" {
		return
	}
	d = filepath.Join(d, test)
	_ = os.MkdirAll(d, 0o755)
	logs, _ := filepath.Glob(filepath.Join(f.logDir, "*.std*"))
	for _, nd := range f.c.Nodes {
		logs = append(logs, filepath.Join(nd.Dir, "server.log"))
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			f.t.Logf("keep %s: %v", l, err)
			continue
		}
		name := filepath.Base(l)
		if name == "server.log" {
			name = filepath.Base(filepath.Dir(l)) + ".log"
		}
		if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
			f.t.Logf("keep %s: %v", l, err)
		}
	}
}

// profile, with GTTSPLIT_FLEET_PROFILE=<dir>, takes CPU profiles of every
// node (nats-server's own profiling port) one second after another until
// the returned function is called (it waits for the last), into
// <dir>/<label>-<node>-<i>.pprof: a phase's profile is the merge of its
// files (go tool pprof takes several), covering the phase to within a
// second whatever it lasts. Profiling adds its own cost to the servers'
// CPU: a figure meant for comparison is measured without it.
func (f *fleetRig) profile(label string) func() {
	dir := os.Getenv("GTTSPLIT_FLEET_PROFILE")
	if dir == "" {
		return func() {}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, nd := range f.c.Nodes {
		b, _ := os.ReadFile(filepath.Join(nd.Dir, "server.log"))
		m := regexp.MustCompile(`profiling.*?port[^0-9]*([0-9]+)|(127\.0\.0\.1:[0-9]+)/debug`).FindStringSubmatch(string(b))
		port := ""
		if m != nil {
			port = m[1]
			if port == "" {
				port = strings.TrimPrefix(m[2], "127.0.0.1:")
			}
		}
		if port == "" {
			f.t.Logf("no profiling port in %s's log", nd.Name)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Get("http://127.0.0.1:" + port + "/debug/pprof/profile?seconds=1")
				if err != nil {
					f.t.Log(err)
					return
				}
				out, _ := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%s-%03d.pprof", label, nd.Name, i)))
				_, _ = io.Copy(out, resp.Body)
				out.Close()
				resp.Body.Close()
			}
		}()
	}
	return func() { close(stop); wg.Wait() }
}

// logLevelFleet is the aggregators' log level: info, or
// GTTSPLIT_FLEET_LOG_LEVEL.
func logLevelFleet() string {
	if l := os.Getenv("GTTSPLIT_FLEET_LOG_LEVEL"); l != "" {
		return l
	}
	return "info"
}
