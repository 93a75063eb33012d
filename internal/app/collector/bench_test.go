package collector

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// userHZ is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on Linux).
const userHZ = 100

// cpuTime returns the user plus system CPU time of process pid so far.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat of %d", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed stat of %d", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed stat of %d", pid)
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// BenchmarkRunCPU measures the CPU the built collector binary itself uses
// while it wraps a child that prints the 4B log (1564 lines) slowly, one
// line every 2 ms, at the default sampling interval (100 ms): offline with
// --out, and publishing to an embedded nats-server (whose own CPU is not
// counted); "idle" is the baseline, a child that prints nothing for 3 s
// (sampling only). It reports the collector's CPU as a share of one core
// over the printing phase ("cpu-%", after the first 100 lines, so start-up
// is not in it), the CPU per captured line in that phase, and the CPU from
// exec to the 100th line (start-up included).
func BenchmarkRunCPU(b *testing.B) {
	if _, err := collectorBinary(); err != nil {
		b.Fatal(err)
	}
	srv := startBroker(b)
	for _, mode := range []string{"idle", "offline", "nats"} {
		b.Run(mode, func(b *testing.B) {
			var share, perLine, startup float64
			n := 0
			for b.Loop() {
				dir := b.TempDir()
				g := func(name string) string { return filepath.Join(dir, name) }
				args := []string{"--log-level", "error", "--source-dir", dir, "run", "--out", filepath.Join(dir, "out")}
				var env []string
				if mode == "nats" {
					env = []string{"GTTSPLIT_NATS_URL=" + srv.ClientURL()}
					args = append(args, "--spool-dir", filepath.Join(dir, "spool"))
				}
				child := childArgv(b, "src="+absPath(b, fixture4B), "delay=2ms",
					"print=0:100", "mark="+g("m1"), "print=100:", "mark="+g("m2"), "gate="+g("g"), "exit=0")
				if mode == "idle" {
					child = childArgv(b, "mark="+g("m1"), "gate="+g("g1"), "mark="+g("m2"), "gate="+g("g"), "exit=0")
				}
				r := startCollector(b, env, append(append(args, "--"), child...)...)
				pid := r.cmd.Process.Pid
				exists := func(name string) func() bool {
					return func() bool { _, err := os.Stat(g(name)); return err == nil }
				}
				eventually(b, "100 lines", exists("m1"))
				c1, err := cpuTime(pid)
				require.NoError(b, err)
				t1 := time.Now()
				if mode == "idle" {
					time.Sleep(3 * time.Second)
					require.NoError(b, os.WriteFile(g("g1"), nil, 0o644))
				}
				eventually(b, "all lines", exists("m2"))
				c2, err := cpuTime(pid)
				require.NoError(b, err)
				t2 := time.Now()
				require.NoError(b, os.WriteFile(g("g"), nil, 0o644))
				require.NoError(b, r.cmd.Wait())
				phase := float64(c2-c1) / float64(t2.Sub(t1)) * 100
				share += phase
				if mode != "idle" {
					perLine += float64((c2 - c1).Microseconds()) / 1464
				}
				startup += float64(c1.Milliseconds())
				n++
				b.Logf("%s: %.2f%% of a core over %s measured (%s CPU); %s CPU from exec to the first mark",
					mode, phase, t2.Sub(t1).Round(time.Millisecond), c2-c1, c1)
			}
			b.ReportMetric(share/float64(n), "cpu-%")
			b.ReportMetric(perLine/float64(n), "cpu-µs/line")
			b.ReportMetric(startup/float64(n), "cpu-ms-to-line-100")
		})
	}
}
