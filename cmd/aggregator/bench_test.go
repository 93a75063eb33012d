package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/internal/perftest"
)

// BenchmarkParseProcess runs the whole `aggregator parse` process (a
// binary built for the benchmark) on a generated log in a temporary
// directory and, in turn with it (one pair a round, each first every other
// round), `wc -l` of the same file as the baseline (the file is in the
// page cache for both; parse maps it):
//
//   - server: a llama-server log of 1.2 GB (GTTSPLIT_BENCH_LOG_BYTES to
//     change it): the 4B run once, then request and slot lines;
//   - dense: 300 MB of the 4B run repeated, a load every 1,564 lines (a
//     worst case).
//
// It reports x/baseline (wc -l's summed wall time over parse's: ≥ 1 is
// parse faster) and median-x/baseline (the median of that ratio pair by
// pair); sys/baseline, parse's system time over wc -l's (the kernel's
// share: copying, mapping); cpu-x/baseline, wc -l's user+system time over
// parse's; peak-RSS-MiB, the largest maximum resident set size of a parse
// child (getrusage ru_maxrss, /proc/PID/status VmHWM at exit: the file's
// pages mapped count, as top shows them); load1, the load average over
// the last minute, at the end.
//
//	go test ./cmd/aggregator -run '^$' -bench ParseProcess -benchtime 3x
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
	for _, c := range []struct {
		name  string
		size  int64
		write func(io.Writer, int64) (int64, error)
	}{
		{"server", size, perftest.WriteServerLog},
		{"dense", 300 << 20, perftest.WriteDenseLog},
	} {
		b.Run(c.name, func(b *testing.B) {
			logPath := filepath.Join(dir, c.name+".log")
			f, err := os.Create(logPath)
			if err != nil {
				b.Fatal(err)
			}
			n, err := c.write(f, c.size)
			if err == nil {
				err = f.Close()
			}
			if err != nil {
				b.Fatal(err)
			}
			defer os.Remove(logPath)
			parseVsWc(b, bin, wc, logPath, n)
		})
	}
}

// parseVsWc times `bin parse log` against `wc -l log` in pairs.
func parseVsWc(b *testing.B, bin, wc, logPath string, n int64) {
	type usage struct {
		wall, cpu, sys time.Duration
		maxRSS         int64
	}
	run := func(name string, args ...string) usage {
		cmd := exec.Command(name, args...)
		var out bytes.Buffer
		cmd.Stdout = &out
		u, err := perftest.RunChild(cmd)
		if err != nil || out.Len() == 0 {
			b.Fatalf("%s %v: %v (%d bytes out)", name, args, err, out.Len())
		}
		return usage{u.Wall, u.User + u.Sys, u.Sys, u.PeakRSS}
	}
	run(wc, "-l", logPath) // into the page cache
	run(bin, "parse", logPath)
	b.SetBytes(n)
	var pairs perftest.Pairs
	var wcU, pU usage
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		var w usage
		if i%2 == 1 {
			w = run(wc, "-l", logPath)
		}
		b.StartTimer()
		p := run(bin, "parse", logPath)
		b.StopTimer()
		if i%2 == 0 {
			w = run(wc, "-l", logPath)
		}
		b.StartTimer()
		pairs.Add(p.wall, w.wall)
		wcU.wall, wcU.cpu, wcU.sys = wcU.wall+w.wall, wcU.cpu+w.cpu, wcU.sys+w.sys
		pU.wall, pU.cpu, pU.sys = pU.wall+p.wall, pU.cpu+p.cpu, pU.sys+p.sys
		pU.maxRSS = max(pU.maxRSS, p.maxRSS)
	}
	pairs.Report(b)
	b.ReportMetric(float64(pU.sys)/float64(max(wcU.sys, 1)), "sys/baseline")
	b.ReportMetric(float64(wcU.cpu)/float64(pU.cpu), "cpu-x/baseline")
	b.ReportMetric(float64(n)*float64(b.N)/pU.wall.Seconds()/1e9, "GB/s")
	b.ReportMetric(float64(n)*float64(b.N)/wcU.wall.Seconds()/1e9, "wc-GB/s")
	b.ReportMetric(float64(pU.maxRSS)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(perftest.Load1(), "load1")
}
