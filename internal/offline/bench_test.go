package offline

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/internal/perftest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// BenchmarkReadLogPaths folds a generated llama-server log file (256 MB,
// GTTSPLIT_BENCH_LOG_BYTES to change it; in the page cache) by each path
// a log can take, and in the same iterations counts its newlines as `wc
// -l` does (read(2) into a 128 KiB buffer, count), the baseline; it
// reports x/baseline (the baseline's time over the path's: ≥ 1 is
// faster), its median over the pairs, and load1 (the load average over
// the last minute, at the end):
//
//   - map/BLOCK: mapped and scanned in place in blocks of BLOCK on every
//     core, each block's pages released once applied (a regular file);
//
//   - keep/BLOCK: the same, the pages kept mapped (what releasing costs);
//
//   - read/BLOCK: read with ReadAt in blocks on every core (a file that
//     cannot be mapped);
//
//   - stream: one reader, a few blocks ahead of the scan (a pipe).
//
//     go test ./internal/offline -run '^$' -bench ReadLogPaths -benchtime 10x
func BenchmarkReadLogPaths(b *testing.B) {
	f, size := benchLogFile(b)
	run := func(b *testing.B, fold func(*split.LogFeed) error) {
		var pairs perftest.Pairs
		var total time.Duration
		b.SetBytes(size)
		for i := 0; b.Loop(); i++ {
			var base time.Duration
			wc := func() {
				t0 := time.Now()
				if countLines(b, f) == 0 {
					b.Fatal("no lines")
				}
				base = time.Since(t0)
			}
			if i%2 == 1 {
				wc()
			}
			t0 := time.Now()
			fo := split.NewFold(split.Options{})
			if err := fold(fo.NewLogFeed("log")); err != nil {
				b.Fatal(err)
			}
			if r := fo.Report(); r.ModelGTTMiB == nil {
				b.Fatal("no model row")
			}
			ours := time.Since(t0)
			if i%2 == 0 {
				wc()
			}
			pairs.Add(ours, base)
			total += ours
		}
		pairs.Report(b)
		b.ReportMetric(float64(size)*float64(b.N)/total.Seconds()/1e9, "GB/s")
		b.ReportMetric(perftest.Load1(), "load1")
	}
	for _, block := range []int{1 << 20, 4 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("map/%dM", block>>20), func(b *testing.B) {
			run(b, func(feed *split.LogFeed) error {
				_, err := readLogMapped(feed, f, size, block, workers())
				return err
			})
		})
	}
	b.Run("keep/4M", func(b *testing.B) {
		run(b, func(feed *split.LogFeed) error {
			_, err := readLogMappedKeep(feed, f, size, 4<<20, workers())
			return err
		})
	})
	for _, block := range []int{512 << 10, 4 << 20} {
		b.Run(fmt.Sprintf("read/%dK", block>>10), func(b *testing.B) {
			run(b, func(feed *split.LogFeed) error {
				_, err := readLogParallel(feed, f, size, block, workers())
				return err
			})
		})
	}
	b.Run("stream", func(b *testing.B) {
		run(b, func(feed *split.LogFeed) error {
			ra := newReadAhead(io.NewSectionReader(f, 0, size))
			defer ra.Close()
			_, err := feed.ReadFrom(ra)
			feed.Close()
			return err
		})
	})
}

// benchLogFile writes the generated server log to a temporary file, reads
// it once (into the page cache) and opens it.
func benchLogFile(b *testing.B) (*os.File, int64) {
	size := int64(256 << 20)
	if s := os.Getenv("GTTSPLIT_BENCH_LOG_BYTES"); s != "" {
		var err error
		if size, err = strconv.ParseInt(s, 10, 64); err != nil {
			b.Fatal(err)
		}
	}
	p := filepath.Join(b.TempDir(), "server.log")
	w, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	n, err := perftest.WriteServerLog(w, size)
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	countLines(b, f)
	return f, n
}

// countLines is `wc -l`: read(2) into a 128 KiB buffer, count newlines.
func countLines(b *testing.B, f *os.File) int {
	buf := make([]byte, 128<<10)
	r := io.NewSectionReader(f, 0, 1<<62)
	n := 0
	for {
		m, err := r.Read(buf)
		n += bytes.Count(buf[:m], []byte{'\n'})
		if err == io.EOF {
			return n
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}
