package aggregator

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// BenchmarkOpenRuns measures what `aggregator serve` holds for open runs:
// a run table (Runs) of 10,000 runs (GTTSPLIT_BENCH_RUNS to change it),
// each one the whole 4B run's events but the run-finished one (its load,
// buffer lines, trace, breakdown table and fdinfo samples, 3,000 log lines)
// under its own id (an open run: no split reported yet, so no
// RunState.Reported). It reports the live heap of the table after a GC
// (heap-MiB), what one open run costs (KiB/run), and the benchmark
// process's peak RSS (VmHWM, which includes the test binary itself).
//
//	go test ./internal/app/aggregator -run '^$' -bench OpenRuns -benchtime 1x
func BenchmarkOpenRuns(b *testing.B) {
	n := benchRuns(b)
	f, err := os.Open(fixture4B)
	if err != nil {
		b.Fatal(err)
	}
	var evs []events.Decoded
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), events.MaxLineBytes)
	for sc.Scan() {
		d, err := events.DecodeBytes(sc.Bytes())
		if err != nil {
			b.Fatal(err)
		}
		if d.Finished == nil {
			evs = append(evs, d)
		}
	}
	f.Close()
	lines := 0
	for _, d := range evs {
		lines += len(d.Lines)
	}
	b.ReportAllocs()
	var heap, perRun float64
	for i := 0; i < b.N; i++ {
		before := liveHeap()
		rs := runtable.NewRuns(split.Options{})
		now := time.Now()
		for r := 0; r < n; r++ {
			id := fmt.Sprintf("run-%05d-%d", r, i)
			for _, d := range evs {
				d.Origin.RunID = id
				rs.Apply(d, now)
			}
		}
		heap = float64(liveHeap()-before) / (1 << 20)
		perRun = heap * 1024 / float64(n)
		runtime.KeepAlive(rs)
	}
	b.ReportMetric(heap, "heap-MiB")
	b.ReportMetric(perRun, "KiB/run")
	b.ReportMetric(float64(n), "runs")
	b.ReportMetric(float64(lines), "lines/run")
	b.ReportMetric(procStatus(b, os.Getpid(), "VmHWM")/(1<<20), "peak-RSS-MiB")
}

func liveHeap() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
