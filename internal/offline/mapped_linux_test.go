package offline

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gttsplit/gttsplit/internal/perftest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// readLogMappedKeep is readLogMapped keeping every page it touched mapped
// to the end (the file's size resident): what releasing the blocks costs.
func readLogMappedKeep(feed *split.LogFeed, f *os.File, size int64, block, workers int) (uint64, error) {
	m, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	defer syscall.Munmap(m)
	return readPieces(feed, &mapBlocks{m: m, block: block}, f, size, block, workers, 2*workers)
}

// BenchmarkMapCosts measures what reading a file in place costs the
// kernel, each way of mapping it against the others, on the generated
// server log of BenchmarkReadLogPaths (256 MB; GTTSPLIT_BENCH_LOG_BYTES):
// two goroutines count the newlines of 4 MiB windows (the work is nothing:
// what is left is the kernel's). Each reports, per GB: sys-ms (system
// time), faults (minor page faults) and wall-ms, with load1 beside:
//
//   - read/0, read/backN: pread(2) of 512 KiB blocks into page-aligned
//     buffers, from multiples of the block or N bytes before them (as the
//     pieces read before, to see whether a line starts at the block's
//     first byte): the copy out of the page cache, its destination N
//     bytes ahead of its source within a page;
//
//   - map/WINDOW: a mapping of each window, unmapped once counted (a
//     TLB shoot-down each), for windows of 64 KiB, 512 KiB and 4 MiB;
//
//   - drop: one mapping of the file, each window's pages released
//     (MADV_DONTNEED) once counted: what readLogMapped does;
//
//   - keep: one mapping, nothing released (the file's size resident);
//
//   - populate, populate-read: map/4M with MAP_POPULATE, or with
//     MADV_POPULATE_READ before the count (the pages mapped in one call);
//
//   - willneed, sequential: drop with MADV_WILLNEED of each window, or
//     MADV_SEQUENTIAL on the mapping;
//
//   - cold/...: the same with the file's pages evicted from the page cache
//     first (POSIX_FADV_DONTNEED of this file alone): the disk's read-ahead.
//
//     go test ./internal/offline -run '^$' -bench MapCosts -benchtime 5x
func BenchmarkMapCosts(b *testing.B) {
	f, size := benchLogFile(b)
	fd := int(f.Fd())
	const window = 4 << 20
	const madvPopulateRead = 22 // MADV_POPULATE_READ, Linux 5.14
	// each runs count on two goroutines over the windows of [0, size).
	each := func(count func(lo, hi int64)) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for {
					k := next.Add(1) - 1
					lo := k * window
					if lo >= size {
						return
					}
					count(lo, min(lo+window, size))
				}
			})
		}
		wg.Wait()
	}
	var lines atomic.Int64
	nl := func(m []byte) { lines.Add(int64(bytes.Count(m, []byte{'\n'}))) }
	mapWindows := func(w int64, flags, advice int) func() {
		return func() {
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					for {
						lo := (next.Add(1) - 1) * w
						if lo >= size {
							return
						}
						m, err := syscall.Mmap(fd, lo, int(min(w, size-lo)), syscall.PROT_READ, syscall.MAP_SHARED|flags)
						if err != nil {
							panic(err)
						}
						if advice >= 0 {
							_ = syscall.Madvise(m, advice)
						}
						nl(m)
						_ = syscall.Munmap(m)
					}
				})
			}
			wg.Wait()
		}
	}
	whole := func(whole, window int, release bool) func() {
		return func() {
			m, err := syscall.Mmap(fd, 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
			if err != nil {
				panic(err)
			}
			defer syscall.Munmap(m)
			if whole >= 0 {
				_ = syscall.Madvise(m, whole)
			}
			each(func(lo, hi int64) {
				if window >= 0 {
					_ = syscall.Madvise(m[lo:hi], window)
				}
				nl(m[lo:hi])
				if release {
					_ = syscall.Madvise(m[lo:hi], syscall.MADV_DONTNEED)
				}
			})
		}
	}
	pread := func(back int64) func() {
		return func() {
			const block = 512 << 10
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					buf := make([]byte, block)
					for {
						lo := (next.Add(1) - 1) * block
						if lo >= size {
							return
						}
						lo = max(0, lo-back)
						n, _ := f.ReadAt(buf, lo)
						nl(buf[:n])
					}
				})
			}
			wg.Wait()
		}
	}
	ways := []struct {
		name string
		run  func()
	}{
		{"read/0", pread(0)},
		{"read/back1", pread(1)},
		{"read/back8", pread(8)},
		{"read/back64", pread(64)},
		{"map/64K", mapWindows(64<<10, 0, -1)},
		{"map/512K", mapWindows(512<<10, 0, -1)},
		{"map/4M", mapWindows(window, 0, -1)},
		{"drop", whole(-1, -1, true)},
		{"keep", whole(-1, -1, false)},
		{"populate", mapWindows(window, syscall.MAP_POPULATE, -1)},
		{"populate-read", mapWindows(window, 0, madvPopulateRead)},
		{"willneed", whole(-1, syscall.MADV_WILLNEED, true)},
		{"sequential", whole(syscall.MADV_SEQUENTIAL, -1, true)},
	}
	evict := func() {
		if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
			b.Fatal(err)
		}
	}
	for _, cold := range []bool{false, true} {
		for _, w := range ways {
			name := w.name
			if cold {
				if strings.HasPrefix(name, "read/") && name != "read/0" || strings.HasPrefix(name, "map/") && name != "map/4M" {
					continue
				}
				name = "cold/" + name
			}
			b.Run(name, func(b *testing.B) {
				b.SetBytes(size)
				var sys, wall time.Duration
				var faults int64
				for b.Loop() {
					b.StopTimer()
					if cold {
						evict()
					} else {
						countLines(b, f) // all of it in the page cache
					}
					b.StartTimer()
					var r0, r1 syscall.Rusage
					_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
					t0 := time.Now()
					w.run()
					wall += time.Since(t0)
					_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
					sys += time.Duration(syscall.TimevalToNsec(r1.Stime) - syscall.TimevalToNsec(r0.Stime))
					faults += r1.Minflt - r0.Minflt
				}
				gb := float64(size) * float64(b.N) / 1e9
				b.ReportMetric(float64(sys.Milliseconds())/gb, "sys-ms/GB")
				b.ReportMetric(float64(wall.Milliseconds())/gb, "wall-ms/GB")
				b.ReportMetric(float64(faults)/gb, "faults/GB")
				b.ReportMetric(perftest.Load1(), "load1")
			})
		}
	}
}

// The mapping's resident pages stay within the blocks in flight, at most
// mapInFlight bytes, however the goroutines are scheduled: on one core or
// with more workers than cores, with goroutines spinning beside them, and
// with an applier that sleeps at every block (the workers stop; they do
// not scan ahead). The mapping's Rss (/proc/self/smaps) is read each time
// a block is released.
func TestMappedResidentStaysInFlight(t *testing.T) {
	// Not parallel: it sets GOMAXPROCS.
	p := filepath.Join(t.TempDir(), "server.log")
	w, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	size, err := perftest.WriteServerLog(w, 12*mapBlock)
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := ""
	for _, c := range []struct{ procs, workers, hogs int }{{1, 2, 2}, {2, 8, 3}, {4, 16, 4}} {
		t.Run(fmt.Sprintf("procs%d-workers%d", c.procs, c.workers), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(c.procs))
			stop := make(chan struct{})
			var hogs sync.WaitGroup
			for range c.hogs {
				hogs.Go(func() {
					for n := 0; ; n++ {
						select {
						case <-stop:
							return
						default:
						}
						for i := 0; i < 1<<16; i++ {
							n ^= i
						}
					}
				})
			}
			defer func() { close(stop); hogs.Wait() }()
			m, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			defer syscall.Munmap(m)
			var peak int64
			src := &mapBlocks{m: m, block: mapBlock, page: os.Getpagesize(), released: func(k int64) {
				peak = max(peak, mappingRss(t, m))
				time.Sleep(5 * time.Millisecond) // a starved applier
			}}
			fo := split.NewFold(split.Options{})
			n, err := readMapped(fo.NewLogFeed("log"), src, f, size, c.workers)
			if err != nil {
				t.Fatal(err)
			}
			got := folded(t, fo, n)
			if want == "" {
				want = got
			} else if got != want {
				t.Fatal("the fold differs between the schedules")
			}
			_, inflight := mapWindow(mapBlock, c.workers)
			t.Logf("%d blocks in flight, the mapping's peak Rss %d KiB", inflight, peak>>10)
			if peak > mapInFlight || peak > int64(inflight)*mapBlock {
				t.Fatalf("the mapping held %d KiB resident: more than the %d blocks of %d KiB in flight (at most %d KiB)", peak>>10, inflight, mapBlock>>10, mapInFlight>>10)
			}
		})
	}
}

// mappingRss is the resident size of the mapping m (its Rss in
// /proc/self/smaps).
func mappingRss(t *testing.T, m []byte) int64 {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	head := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&m[0])))
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, head):
			in = true
		case in && strings.HasPrefix(l, "Rss:"):
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(l, "Rss:")), " kB"), 10, 64)
			if err != nil {
				t.Fatal(l, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no mapping at %s in /proc/self/smaps", head)
	return 0
}
