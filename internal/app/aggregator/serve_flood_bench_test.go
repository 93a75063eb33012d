package aggregator

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/natstest"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// BenchmarkServeFlood measures a flood of open runs into one `aggregator
// serve` process on its embedded broker (defaults, idle timeout 24 h):
// GTTSPLIT_BENCH_RUNS (10,000 unless given) `run.started` events, each of
// a run of its own, published at once. It waits until every run is open
// and every event acknowledged, and reports the process's peak resident
// set size (peak-RSS-MiB, VmHWM: the broker's memory is in it; the limit
// is memory_limit_mib, 224 MiB), the runs kept in the state bucket rather
// than in memory (runs-shed), what the open runs cost beside their states
// (open-runs-beside-MiB: their summaries, cold entries and the broker's
// index of their keys; with the closed runs' summaries and stubs in the
// run index), the events delivered again (redelivered), the pulls that
// waited for the partition furthest behind in the events stream and the
// seconds they waited (floor-waits, floor-wait-s; a FLOOR line says how
// often the looks found pulls waiting and what /readyz said then), and
// the time the flood took to fold. GTTSPLIT_BENCH_BIN runs a given aggregator binary
// instead of building this tree's (to compare two versions on one
// machine). GTTSPLIT_BENCH_CLOSED=1 makes it a flood of closed runs: idle
// timeout 2 s (each run closes incomplete 2 s after its start), done once
// every run closed and every event acknowledged; it reports the closed
// runs whose summaries the run index does not hold in memory
// (closed-evicted), and RSS-MiB is then what the closed runs leave behind.
// GTTSPLIT_BENCH_HEAPPROFILE=<dir> turns on the child's /debug/pprof/
// (http.pprof) and keeps in <dir>/peak-heap.pprof its heap profile taken
// when its peak RSS last grew by 8 MiB or more (near the peak).
//
//	GTTSPLIT_BENCH_RUNS=100000 go test ./internal/app/aggregator -run '^$' -bench ServeFlood -benchtime 1x -timeout 60m
func BenchmarkServeFlood(b *testing.B) {
	n := benchRuns(b)
	bin := os.Getenv("GTTSPLIT_BENCH_BIN")
	if bin == "" {
		bin = buildAggregator(b)
	}
	fx := loadFixture(b, fixture4B)
	group := config.DefaultAggregator().Consumer.Fleet.Group
	closed := os.Getenv("GTTSPLIT_BENCH_CLOSED") == "1"
	idle := "GTTSPLIT_IDLE_TIMEOUT=24h"
	if closed {
		idle = "GTTSPLIT_IDLE_TIMEOUT=2s"
	}
	profDir := os.Getenv("GTTSPLIT_BENCH_HEAPPROFILE")
	env := []string{"GTTSPLIT_LOG_FORMAT=json", idle}
	if profDir != "" {
		env = append(env, "GTTSPLIT_HTTP_PPROF=true")
	}
	for i := 0; i < b.N; i++ {
		ports, err := natstest.FreePorts(1)
		require.NoError(b, err)
		port := ports[0]
		logDir := b.TempDir()
		// No nats.url: serve starts its embedded broker.
		c := startServeChild(b, bin, "", logDir, "serve",
			[]string{"--log-level", "info", "--embedded-listen", fmt.Sprintf("127.0.0.1:%d", port)}, env...)
		addr := childHTTP(b, filepath.Join(logDir, "serve.stderr"))
		eventually(b, "the child ready", func() bool {
			code, _ := tryGet(addr, "/readyz")
			return code == http.StatusOK
		})
		br := &rt.Broker{URL: fmt.Sprintf("nats://127.0.0.1:%d", port)}
		br.NC, br.JS = rt.Connect(b, br.URL)
		pid := c.cmd.Process.Pid
		load0 := loadAvg()

		start := time.Now()
		const chunk = 1000 // events a publish waits for
		var wires []events.Wire
		for r := 0; r < n; r++ {
			o := events.Origin{RunID: fmt.Sprintf("flood-%06d-%d", r, i), Host: fx.Origin.Host, Lane: fx.Origin.Lane}
			w, err := rt.Rewrite(fx.Decoded[0], o)
			require.NoError(b, err)
			wires = append(wires, w)
			if len(wires) == chunk || r == n-1 {
				br.Publish(b, wires...)
				wires = wires[:0]
			}
		}
		published := time.Since(start)
		// Done once every run is open and every event acknowledged; a
		// flood that stops moving for two minutes fails, its figures
		// said first.
		var page string
		last, since := "", time.Now()
		profiled := 0.0
		var logged time.Time
		// The pulls waiting for the partition furthest behind (with the
		// embedded broker), at each look: the most at once, the looks
		// that found any, and what /readyz answered then.
		floorMost, floorLooks, floorSaid, floorUnready := 0.0, 0, 0, 0
		for {
			hwm := procStatus(b, pid, "VmHWM")
			if profDir != "" && hwm >= profiled+8<<20 {
				profiled = hwm
				heapProfile(b, addr, filepath.Join(profDir, "peak-heap.pprof"))
				heapProfile(b, addr, filepath.Join(profDir, fmt.Sprintf("peak-heap-%03.0f.pprof", hwm/(1<<20))))
			}
			_, page = tryGet(addr, "/metrics")
			what := "gttsplit_runs_open"
			if closed {
				what = "gttsplit_runs_completed_total" // every close, whatever its status
			}
			got := metricSum(page, what)
			if w, _ := strconv.ParseFloat(metricValue(page, "gttsplit_pull_floor_waiting"), 64); w > 0 {
				floorMost = max(floorMost, w)
				floorLooks++
				code, body := tryGet(addr, "/readyz")
				if strings.Contains(body, "catching up in stream order") {
					floorSaid++
				}
				if code != http.StatusOK {
					floorUnready++
				}
			}
			if profDir != "" && time.Since(logged) >= 15*time.Second {
				logged = time.Now()
				progress(b, filepath.Join(profDir, "progress.log"), fmt.Sprintf("%s %.0fs %s %.0f, peak %.0f MiB, RSS %.0f MiB, index %s B, runs %s B, held %s, holds %s, redelivered %s, load %s",
					logged.UTC().Format("15:04:05"), time.Since(start).Seconds(), what, got, hwm/(1<<20), procStatus(b, pid, "VmRSS")/(1<<20),
					metricValue(page, "gttsplit_run_index_memory_bytes"), metricValue(page, "gttsplit_run_memory_bytes"),
					metricValue(page, "gttsplit_memory_held"), metricValue(page, "gttsplit_memory_holds_total"),
					metricValue(page, "gttsplit_events_redelivered_total"), loadAvg()))
			}
			if got >= float64(n) && br.Idle(b, group) {
				break
			}
			ci, _ := br.ConsumerInfo(group)
			now := fmt.Sprintf("%v %s, %v", got, what, ci)
			if ci != nil {
				now = fmt.Sprintf("%v %s, %d pending, %d unacknowledged", got, what, ci.NumPending, ci.NumAckPending)
			}
			if now != last {
				last, since = now, time.Now()
			} else if time.Since(since) > 2*time.Minute {
				b.Fatalf("FLOOD %d runs stuck for 2 minutes at %s after %s: peak RSS %.0f MiB, %s redelivered; load %s -> %s", n, now,
					time.Since(start).Round(time.Second), procStatus(b, pid, "VmHWM")/(1<<20),
					metricValue(page, "gttsplit_events_redelivered_total"), load0, loadAvg())
			}
			time.Sleep(time.Second)
		}
		took := time.Since(start)
		_, page = tryGet(addr, "/metrics")
		_, ready := tryGet(addr, "/readyz")
		peak, rss := procStatus(b, pid, "VmHWM"), procStatus(b, pid, "VmRSS")
		redelivered, _ := strconv.ParseFloat(metricValue(page, "gttsplit_events_redelivered_total"), 64)
		shed, _ := strconv.ParseFloat(metricValue(page, "gttsplit_runs_shed"), 64)
		held, _ := strconv.ParseFloat(metricValue(page, "gttsplit_run_memory_bytes"), 64)
		beside, _ := strconv.ParseFloat(metricValue(page, "gttsplit_run_index_memory_bytes"), 64)
		b.ReportMetric(peak/(1<<20), "peak-RSS-MiB")
		b.ReportMetric(rss/(1<<20), "RSS-MiB")
		b.ReportMetric(shed, "runs-shed")
		b.ReportMetric(beside/(1<<20), "open-runs-beside-MiB")
		unlisted := unlistedRuns(addr)
		b.ReportMetric(unlisted, "runs-unlisted")
		evicted, _ := strconv.ParseFloat(metricValue(page, "gttsplit_runs_closed_evicted"), 64)
		b.ReportMetric(evicted, "closed-evicted")
		early, _ := strconv.ParseFloat(metricValue(page, "gttsplit_runs_expired_early_total"), 64)
		b.ReportMetric(early, "closed-deleted-early")
		b.ReportMetric(redelivered, "redelivered")
		floorWaits, _ := strconv.ParseFloat(metricValue(page, "gttsplit_pull_floor_waits_total"), 64)
		floorSeconds, _ := strconv.ParseFloat(metricValue(page, "gttsplit_pull_floor_wait_seconds_total"), 64)
		b.ReportMetric(floorWaits, "floor-waits")
		b.ReportMetric(floorSeconds, "floor-wait-s")
		b.Logf("FLOOR %v pulls waited for the partition furthest behind, %.1f s in all; %d of the looks found pulls waiting (at most %.0f at once), /readyz said so at %d of them and answered 503 at %d (other reasons)",
			floorWaits, floorSeconds, floorLooks, floorMost, floorSaid, floorUnready)
		b.ReportMetric(took.Seconds(), "s-to-fold")
		b.ReportMetric(float64(n), "runs")
		b.Logf("FLOOD %d runs (closed %v): peak RSS %.0f MiB, RSS %.0f MiB, %v shed, %v not listed on /runs, %v closed evicted, %v deleted early (past the closed runs' share), runs in memory %.0f MiB + %.0f MiB beside them (every open run's summary, cold entry and broker keys; the closed runs' summaries and stubs), %v redelivered, published in %s, folded in %s; /readyz %q; load %s -> %s",
			n, closed, peak/(1<<20), rss/(1<<20), shed, unlisted, evicted, early, held/(1<<20), beside/(1<<20), redelivered, published.Round(time.Second), took.Round(time.Second),
			strings.TrimSpace(ready), load0, loadAvg())
	}
}

// heapProfile saves the heap profile of the aggregator at addr (its
// /debug/pprof/heap) to file; a failure is logged, not fatal.
func heapProfile(b *testing.B, addr, file string) {
	c := &http.Client{Timeout: time.Minute}
	resp, err := c.Get("http://" + addr + "/debug/pprof/heap")
	if err != nil {
		b.Logf("heap profile: %v", err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode == http.StatusOK {
		err = os.WriteFile(file, body, 0o644)
	}
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Logf("heap profile: %v (HTTP %d)", err, resp.StatusCode)
	}
}

// progress appends line to file (the flood's progress, with a heap
// profile); a failure is logged, not fatal.
func progress(b *testing.B, file, line string) {
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fmt.Fprintln(f, line)
		_ = f.Close()
	}
	if err != nil {
		b.Logf("progress: %v", err)
	}
}

// metricSum is the sum of every series of the metric name on page.
func metricSum(page, name string) float64 {
	sum := 0.0
	for _, l := range strings.Split(page, "\n") {
		rest, ok := strings.CutPrefix(l, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(f) > 0 {
			v, _ := strconv.ParseFloat(f[0], 64)
			sum += v
		}
	}
	return sum
}

// unlistedRuns is how many open runs the aggregator at addr says /runs
// does not list (X-Unlisted-Runs; -1 when it cannot be read).
func unlistedRuns(addr string) float64 {
	c := &http.Client{Timeout: time.Minute}
	resp, err := c.Get("http://" + addr + "/runs?limit=1")
	if err != nil {
		return -1
	}
	_ = resp.Body.Close()
	v := resp.Header.Get("X-Unlisted-Runs")
	if v == "" {
		return 0
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return -1
	}
	return n
}

// loadAvg is the machine's load averages (/proc/loadavg's first three).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
