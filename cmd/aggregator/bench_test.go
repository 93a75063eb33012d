package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/internal/perftest"
)

// BenchmarkParseProcess runs the whole `aggregator parse` process (a
// binary built for the benchmark) on a generated llama-server log of 1.2 GB
// (GTTSPLIT_BENCH_LOG_BYTES to change it; the 4B run once, then request
// and slot lines: internal/perftest) in a temporary directory, and in the
// same iterations `wc -l` of the same file as the baseline (the file is in
// the page cache for both). It reports:
//
//   - x/baseline: wc -l's wall time over parse's (≥ 1: parse is faster);
//
//   - cpu-x/baseline: the same with user+system CPU time;
//
//   - peak-RSS-MiB: the largest maximum resident set size of a parse
//     child (getrusage ru_maxrss, which is /proc/self/status VmHWM at exit).
//
//     go test ./cmd/aggregator -run '^$' -bench ParseProcess -benchtime 3x
func BenchmarkParseProcess(b *testing.B) {
	wc, err := exec.LookPath("wc")
	if err != nil {
		b.Skip("no wc on PATH")
	}
	size := int64(1200 << 20)
	if s := os.Getenv("GTTSPLIT_BENCH_LOG_BYTES"); s != "" {
		if size, err = strconv.ParseInt(s, 10, 64); err != nil {
			b.Fatal(err)
		}
	}
	dir := b.TempDir()
	bin := filepath.Join(dir, "aggregator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	logPath := filepath.Join(dir, "server.log")
	f, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	n, err := perftest.WriteServerLog(f, size)
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		b.Fatal(err)
	}
	run := func(name string, args ...string) (wall, cpu time.Duration, maxRSS int64) {
		cmd := exec.Command(name, args...)
		t0 := time.Now()
		if out, err := cmd.Output(); err != nil || len(out) == 0 {
			b.Fatalf("%s %v: %v (%d bytes out)", name, args, err, len(out))
		}
		wall = time.Since(t0)
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		cpu = time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
		return wall, cpu, ru.Maxrss << 10
	}
	run(wc, "-l", logPath) // into the page cache
	b.SetBytes(n)
	var wcWall, wcCPU, pWall, pCPU time.Duration
	var peak int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w, c, _ := run(wc, "-l", logPath)
		wcWall, wcCPU = wcWall+w, wcCPU+c
		b.StartTimer()
		w, c, rss := run(bin, "parse", logPath)
		pWall, pCPU = pWall+w, pCPU+c
		peak = max(peak, rss)
	}
	b.ReportMetric(float64(wcWall)/float64(pWall), "x/baseline")
	b.ReportMetric(float64(wcCPU)/float64(pCPU), "cpu-x/baseline")
	b.ReportMetric(float64(n)*float64(b.N)/pWall.Seconds()/1e9, "GB/s")
	b.ReportMetric(float64(n)*float64(b.N)/wcWall.Seconds()/1e9, "wc-GB/s")
	b.ReportMetric(float64(peak)/(1<<20), "peak-RSS-MiB")
}
