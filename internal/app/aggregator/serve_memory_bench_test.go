package aggregator

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// BenchmarkServeMemory measures the memory of a real `aggregator serve`
// process holding 10,000 open runs (GTTSPLIT_BENCH_RUNS to change it): it
// builds the aggregator, starts `aggregator serve` as a child on an
// embedded NATS server of the benchmark's (random port, temp dir), and
// publishes every run's events, each run the whole 4B run but its
// run-finished event (so it stays open) under its own run id, until the
// child's /metrics says they are all folded and open. It reports the
// child's peak resident set size (peak-RSS-MiB, VmHWM of
// /proc/<pid>/status, the binding figure: ≤ 256 MiB), its resident set
// then (RSS-MiB), what one open run costs (KiB/run: the growth of the
// resident set from the idle process over the runs), the child's Go heap
// in use then (heap-MiB) and the events folded per second.
//
//	go test ./internal/app/aggregator -run '^$' -bench ServeMemory -benchtime 1x
func BenchmarkServeMemory(b *testing.B) {
	n := benchRuns(b)
	bin := buildAggregator(b)
	fx := loadFixture(b, fixture4B)
	fin := fx.FinishedIndex(b)
	perRun := len(fx.Decoded) - 1
	for i := 0; i < b.N; i++ {
		br, addr, c := startBenchServe(b, bin, n, "GTTSPLIT_IDLE_TIMEOUT=24h")
		pid := c.cmd.Process.Pid
		idle := procStatus(b, pid, "VmRSS")

		start := time.Now()
		const chunk = 20 // runs a publish waits for
		var wires []events.Wire
		for r := 0; r < n; r++ {
			o := events.Origin{RunID: fmt.Sprintf("open-%05d-%d", r, i), Host: fx.Origin.Host, Lane: fx.Origin.Lane}
			for j, d := range fx.Decoded {
				if j == fin {
					continue
				}
				w, err := rt.Rewrite(d, o)
				require.NoError(b, err)
				wires = append(wires, w)
			}
			if (r+1)%chunk == 0 || r == n-1 {
				br.publish(b, wires...)
				wires = wires[:0]
			}
		}
		want := float64(n * perRun)
		var page string
		waitProgress(b, "every event folded and every run open", func() (float64, bool) {
			_, page = tryGet(addr, "/metrics")
			folded, _ := strconv.ParseFloat(metricValue(page, "gttsplit_events_folded_total"), 64)
			open, _ := strconv.ParseFloat(metricValue(page, "gttsplit_runs_open"), 64)
			return folded, folded >= want && open == float64(n)
		})
		took := time.Since(start)
		peak, rss := procStatus(b, pid, "VmHWM"), procStatus(b, pid, "VmRSS")
		heap, _ := strconv.ParseFloat(metricValue(page, "go_memstats_heap_inuse_bytes"), 64)
		b.ReportMetric(peak/(1<<20), "peak-RSS-MiB")
		b.ReportMetric(rss/(1<<20), "RSS-MiB")
		b.ReportMetric((rss-idle)/1024/float64(n), "KiB/run")
		b.ReportMetric(heap/(1<<20), "heap-MiB")
		b.ReportMetric(want/took.Seconds(), "events/s")
		b.ReportMetric(float64(n), "runs")
	}
}

// startBenchServe starts an embedded NATS server with room for n runs
// and a real `aggregator serve` child (bin) on it with JSON logs at info
// and env, and waits until the child is ready: it returns the broker, the
// child's HTTP address and the child.
func startBenchServe(b *testing.B, bin string, n int, env ...string) (*testBroker, string, *child) {
	b.Helper()
	// The runs' events (315 KB a run) are stored twice: in the stream and
	// in the partitioned stream that sources it.
	opts := natstest.Options(b.TempDir(), -1)
	opts.JetStreamMaxStore = max(opts.JetStreamMaxStore, int64(n)*1<<20)
	srv, err := natstest.NewServerWithOptions(opts)
	require.NoError(b, err)
	b.Cleanup(func() { natstest.Shutdown(srv) })
	br := startBrokerAt(b, srv)
	logDir := b.TempDir()
	c := startServeChild(b, bin, br.url, logDir, "serve", []string{"--log-level", "info"},
		append([]string{"GTTSPLIT_LOG_FORMAT=json"}, env...)...)
	addr := childHTTP(b, filepath.Join(logDir, "serve.stderr"))
	eventually(b, "the child ready", func() bool {
		code, _ := tryGet(addr, "/readyz")
		return code == http.StatusOK
	})
	return br, addr, c
}

// benchRuns is the number of open runs of the memory benchmarks: 10,000,
// or GTTSPLIT_BENCH_RUNS.
func benchRuns(b *testing.B) int {
	s := os.Getenv("GTTSPLIT_BENCH_RUNS")
	if s == "" {
		return 10000
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("GTTSPLIT_BENCH_RUNS=%q: want a positive number", s)
	}
	return n
}

// childHTTP waits for the child's log line that says where its HTTP
// endpoint listens and returns the address.
func childHTTP(t testing.TB, stderr string) string {
	t.Helper()
	// JSON or console log lines.
	re := regexp.MustCompile(`"listen":"([^"]+)"|\blisten=([^ ]+)`)
	var addr string
	eventually(t, "the child's HTTP address in its log", func() bool {
		b, _ := os.ReadFile(stderr)
		for _, l := range strings.Split(string(b), "\n") {
			if m := re.FindStringSubmatch(l); m != nil && (strings.Contains(l, `"message":"http: /`) || strings.Contains(l, " http: /")) {
				addr = m[1] + m[2]
				return true
			}
		}
		return false
	})
	return addr
}

// tryGet is GET http://addr/path: the status (0 when it failed) and body.
func tryGet(addr, path string) (int, string) {
	c := &http.Client{Timeout: waitFor}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, ""
	}
	return resp.StatusCode, string(b)
}

// procStatus is a field of /proc/<pid>/status given in kB, in bytes.
func procStatus(t testing.TB, pid int, field string) float64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			require.NoError(t, err)
			return kb * 1024
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// waitProgress polls cond until it says done; it fails when the progress
// figure it returns has not moved for two minutes (a loaded machine is
// slow, a stuck child does not move).
func waitProgress(t testing.TB, what string, cond func() (float64, bool)) {
	t.Helper()
	last, since := -1.0, time.Now()
	for {
		v, done := cond()
		if done {
			return
		}
		if v != last {
			last, since = v, time.Now()
		} else if time.Since(since) > 2*time.Minute {
			t.Fatalf("%s: stuck at %v for 2 minutes", what, v)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
