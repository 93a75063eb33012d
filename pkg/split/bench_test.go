package split

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/internal/perftest"
	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

var (
	bigOnce           sync.Once
	denseLog, longLog []byte
	serverLog         []byte
)

// benchLogs builds two logs of at least 100 MB from the 4B fixture's lines:
//
//   - dense: the whole run repeated (every repetition a new load, context,
//     trace and breakdown table: 7 % of its lines are relevant), a worst
//     case no real log reaches;
//   - long: the run once, then its lines without any anchor (generation
//     text, -v tensor lines, sampler output) repeated, as a llama-server
//     that loaded once and then served for hours: a few relevant lines in
//     a thousand.
func benchLogs(b *testing.B) {
	bigOnce.Do(func() {
		src, err := os.ReadFile(filepath.Join("..", "..", "testdata", "runs", "4b", "split.log"))
		if err != nil {
			b.Fatal(err)
		}
		var dense bytes.Buffer
		dense.Grow(110 << 20)
		for dense.Len() < 100<<20 {
			dense.Write(src)
		}
		denseLog = dense.Bytes()

		p := llamalog.MustParser()
		var quiet bytes.Buffer
		for _, l := range bytes.SplitAfter(src, []byte("\n")) {
			if !p.Relevant(l, true) {
				quiet.Write(l)
			}
		}
		var long bytes.Buffer
		long.Grow(110 << 20)
		long.Write(src)
		for long.Len() < 100<<20 {
			long.Write(quiet.Bytes())
		}
		longLog = long.Bytes()
		if serverLog, err = perftest.ServerLog(100 << 20); err != nil {
			b.Fatal(err)
		}
	})
}

func benchLog(b *testing.B) []byte { benchLogs(b); return longLog }

// BenchmarkScanBaseline is the baseline: plain bufio.Scanner line scanning
// of the same bytes, doing nothing with the lines.
func BenchmarkScanBaseline(b *testing.B) { scanBaseline(b, benchLog(b)) }

func scanBaseline(b *testing.B, data []byte) {
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if lineScan(data) == 0 {
			b.Fatal("no lines")
		}
	}
}

// BenchmarkParseFold is gttsplit's parse+fold of the same bytes (ReadLog
// then Report).
func BenchmarkParseFold(b *testing.B) { parseFold(b, benchLog(b)) }

// BenchmarkScanBaselineDense and BenchmarkParseFoldDense do the same on the
// dense log.
func BenchmarkScanBaselineDense(b *testing.B) { benchLogs(b); scanBaseline(b, denseLog) }

// BenchmarkParseFoldDense is parse+fold of the dense log.
func BenchmarkParseFoldDense(b *testing.B) { benchLogs(b); parseFold(b, denseLog) }

// parseFold times ReadLog+Report of data and, in the same iterations, the
// scanBaseline line scan of the same bytes, each first every other
// iteration; it reports the ratio of the two rates as x/baseline (≥ 1 is
// faster than the line scan), and the same ratio of the CPU time each
// used as cpu-x/baseline: on a loaded machine the wall time of either
// counts the time it waited for a core, the CPU time only what it did.
func parseFold(b *testing.B, data []byte) {
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var ours, base, oursCPU, baseCPU time.Duration
	b.ResetTimer()
	scan := func() {
		b.StopTimer()
		c0, t0 := perftest.ProcessCPU(b), time.Now()
		if lineScan(data) == 0 {
			b.Fatal("no lines")
		}
		base += time.Since(t0)
		baseCPU += perftest.ProcessCPU(b) - c0
		b.StartTimer()
	}
	for i := 0; i < b.N; i++ {
		// Each goes first every other iteration, so neither always
		// finds the machine as the other left it.
		if i%2 == 1 {
			scan()
		}
		c0, t0 := perftest.ProcessCPU(b), time.Now()
		f := NewFold(Options{})
		if _, err := f.ReadLog(bytes.NewReader(data), "log"); err != nil {
			b.Fatal(err)
		}
		if r := f.Report(); r.ModelGTTMiB == nil {
			b.Fatal("no model row")
		}
		ours += time.Since(t0)
		oursCPU += perftest.ProcessCPU(b) - c0
		if i%2 == 0 {
			scan()
		}
	}
	b.ReportMetric(float64(base)/float64(ours), "x/baseline")
	b.ReportMetric(float64(baseCPU)/float64(max(oursCPU, 1)), "cpu-x/baseline")
	b.ReportMetric(float64(len(data))*float64(b.N)/ours.Seconds()/1e9, "GB/s")
	b.ReportMetric(float64(len(data))*float64(b.N)/base.Seconds()/1e9, "base-GB/s")
	b.ReportMetric(perftest.Load1(), "load1")
}

// lineScan is the baseline: bufio.Scanner line scanning, nothing done with
// the lines.
func lineScan(data []byte) int {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	n := 0
	for sc.Scan() {
		n++
	}
	return n
}

// BenchmarkParseFoldServer is parse+fold of a 100 MB llama-server log
// (the 4B run once, then request and slot lines: internal/perftest), with
// the line scan of the same bytes as its baseline.
func BenchmarkParseFoldServer(b *testing.B) {
	benchLogs(b)
	parseFold(b, serverLog)
}

// BenchmarkNaiveRegexpPerLine is the design the block scanner replaces: a
// scanner visiting every line and trying the buffer regexp on each.
func BenchmarkNaiveRegexpPerLine(b *testing.B) {
	data := benchLog(b)
	re := regexp.MustCompile(`^(~?[A-Za-z_]\w*): +(\S+) +(model|KV|RS|compute|output) buffer size = +([0-9.]+) MiB$`)
	tr := regexp.MustCompile(DefaultTracePattern)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 1<<30)
		var scratch []byte
		n := 0
		for sc.Scan() {
			p := llamalog.Payload(sc.Bytes(), &scratch)
			if re.Match(p) || tr.Match(p) {
				n++
			}
		}
		if n == 0 {
			b.Fatal("nothing matched")
		}
	}
}

// BenchmarkAddLine is the serve path: each line of 20 MB of the server
// log (the 4B run, then request and slot lines) applied with AddLine, as
// the aggregator applies the lines of decoded events.
func BenchmarkAddLine(b *testing.B) { addLines(b, &serverLog) }

// BenchmarkAddLineDense is the same over 20 MB of the dense log.
func BenchmarkAddLineDense(b *testing.B) { addLines(b, &denseLog) }

func addLines(b *testing.B, data *[]byte) {
	benchLogs(b)
	d := (*data)[:20<<20]
	d = d[:bytes.LastIndexByte(d, '\n')+1]
	var lines []Line
	for i, l := range splitLines(string(d)) {
		lines = append(lines, Line{Stream: "log", Seq: uint64(i + 1), Text: l})
	}
	b.SetBytes(int64(len(d)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f := NewFold(Options{})
		for _, l := range lines {
			f.AddLine(l)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(lines)), "ns/line")
}

// BenchmarkAddSample folds the ticks of the 4B run's samples (one card)
// and of the two-card run of testdata/devices when present, each into a
// fresh fold: the cost a sample event adds to a served run.
func BenchmarkAddSample(b *testing.B) {
	for _, name := range []string{"runs/4b/gtt.txt", "devices/2xrocm-pci/gtt.txt"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "testdata", filepath.FromSlash(name)))
		if err != nil {
			continue
		}
		ss, _, err := ParseSamples(data)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(filepath.Dir(name), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				f := NewFold(Options{})
				for _, s := range ss {
					f.AddSample(s)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ss)), "ns/sample")
		})
	}
}
