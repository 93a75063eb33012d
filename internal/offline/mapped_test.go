package offline

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gttsplit/gttsplit/internal/perftest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// writeLog writes log to a file of its own and opens it.
func writeLog(t testing.TB, log []byte) *os.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(p, log, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// mapped is the fold of the file f, of size bytes when opened, mapped (or
// read in blocks, where mapping is not to be had) in blocks of block
// bytes.
func mapped(t testing.TB, f *os.File, size int64, block, workers int) string {
	t.Helper()
	fo := split.NewFold(split.Options{})
	n, err := readLogMapped(fo.NewLogFeed("log"), f, size, block, workers)
	if errors.Is(err, errNoMap) {
		n, err = readLogParallel(fo.NewLogFeed("log"), f, size, block, workers)
	}
	if err != nil {
		t.Fatal(err)
	}
	return folded(t, fo, n)
}

// boundaryLog is a log whose lines fall on both sides of every multiple of
// block in the ways that matter: a newline just before, at and just after
// the edge, a CRLF split by it, a line crossing two edges, a -v marker
// and a buffer line cut by an edge, and (end) a last line without its
// newline across the last edge.
func boundaryLog(block int, end string) []byte {
	filler := func(b *bytes.Buffer, upto int) {
		for b.Len() < upto {
			n := min(upto-b.Len(), 60)
			if n == 1 {
				b.WriteByte('\n')
				continue
			}
			b.WriteString(strings.Repeat("s", n-1) + "\n")
		}
	}
	lines := []string{
		"load_tensors: layer 0 assigned to device CUDA0, is_swa = 0\n",
		"load_tensors:        CUDA0 model buffer size =  1000.50 MiB\r\n",
		"llama_context:  CUDA_Host  output buffer size =     0.58 MiB\n",
		"main: build = 4000 (abcdef0)\r\n",
	}
	var b bytes.Buffer
	b.WriteString("build: 4000 (abcdef0) with cc for x86_64-linux-gnu\n")
	for edge, i := block, 0; i < 12; edge, i = edge+block, i+1 {
		l := lines[i%len(lines)]
		switch i % 6 {
		case 0: // the newline just before the edge
			filler(&b, edge-len(l))
		case 1: // the newline at the edge's first byte
			filler(&b, edge-len(l)+1)
		case 2: // the edge in the middle of the line
			filler(&b, edge-len(l)/2)
		case 3: // a CRLF cut between \r and \n
			filler(&b, edge-len(l)+1)
			if strings.HasSuffix(l, "\r\n") {
				break
			}
			b.WriteString(strings.TrimSuffix(l, "\n"))
			l = "\r\n"
		case 4: // a line across this edge and the next
			filler(&b, edge-10)
			b.WriteString(strings.Repeat("x", block+20))
		case 5: // a line that ends right at the edge
			filler(&b, edge-len(l))
		}
		b.WriteString(l)
	}
	b.WriteString("llama_kv_cache:      CUDA0 KV buffer size =   144.00 MiB\n")
	b.WriteString(end)
	return b.Bytes()
}

// The block edges fall before, at, in and after lines, CRLFs, -v markers
// and buffer lines, on pages of the mapping and between them: the mapped
// file, the file read in blocks and the bytes in memory fold as ReadLog
// does, with and without a last newline.
func TestMappedBlockEdges(t *testing.T) {
	t.Parallel()
	page := os.Getpagesize()
	for _, block := range []int{page, 2 * page, 3*page + 7, 1000, 4099} {
		for _, end := range []string{"", "tail without a newline MiB", "load_tensors: CUDA0 model buffer size = 2.00 MiB"} {
			log := boundaryLog(block, end)
			want := sequential(t, log)
			f := writeLog(t, log)
			for _, w := range []int{1, 2, 3} {
				if got := mapped(t, f, int64(len(log)), block, w); got != want {
					t.Fatalf("block %d, end %q, %d workers: the mapped fold differs\n%s\n%s", block, end, w, got, want)
				}
				if got := parallel(t, log, block, w); got != want {
					t.Fatalf("block %d, end %q, %d workers: the block read differs", block, end, w)
				}
			}
		}
	}
}

// An empty file, a file of one line without a newline, and of newlines
// alone.
func TestMappedSmallFiles(t *testing.T) {
	t.Parallel()
	for _, log := range []string{"", "x", "\n", "\n\n\n", "\r\n", "main: build = 1 (a)", "a\nb", strings.Repeat("MiB", 5000)} {
		want := sequential(t, []byte(log))
		f := writeLog(t, []byte(log))
		for _, block := range []int{1, 2, os.Getpagesize()} {
			if got := mapped(t, f, int64(len(log)), block, 2); got != want {
				t.Fatalf("%q, block %d: the mapped fold differs\n%s\n%s", log, block, got, want)
			}
		}
	}
}

// A file that grows after it was opened (a log still being written): the
// lines written since, and a line the size at opening cut, are read on
// to the end, as when the whole file is read.
func TestMappedFileThatGrows(t *testing.T) {
	t.Parallel()
	run, err := perftest.Run4B()
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{len(run), len(run) - 25, len(run) / 2, 100} {
		f := writeLog(t, run[:cut])
		// The file grows after the size was taken.
		if err := os.WriteFile(f.Name(), run, 0o644); err != nil {
			t.Fatal(err)
		}
		want := sequential(t, run)
		for _, block := range []int{os.Getpagesize(), 1 << 20} {
			if got := mapped(t, f, int64(cut), block, 2); got != want {
				t.Fatalf("cut %d, block %d: the grown file folds differently", cut, block)
			}
		}
	}
}

// A file cut short under the mapping is an error of the read, not a
// crash; the same file read in blocks folds what is left.
func TestMappedFileThatShrinks(t *testing.T) {
	t.Parallel()
	log, err := perftest.ServerLog(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	f := writeLog(t, log)
	if err := os.Truncate(f.Name(), 100<<10); err != nil {
		t.Fatal(err)
	}
	fo := split.NewFold(split.Options{})
	_, err = readLogMapped(fo.NewLogFeed("log"), f, int64(len(log)), 64<<10, 2)
	if !errors.Is(err, errShrank) {
		t.Fatalf("err %v, want errShrank", err)
	}
	fo = split.NewFold(split.Options{})
	n, err := readLogParallel(fo.NewLogFeed("log"), f, int64(len(log)), 64<<10, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := folded(t, fo, n), sequential(t, log[:100<<10]); got != want {
		t.Fatalf("the shrunk file read in blocks folds differently\n%s\n%s", got, want)
	}
}

// The generated server and dense logs fold the same mapped, read in
// blocks and streamed.
func TestMappedGeneratedLogs(t *testing.T) {
	t.Parallel()
	size := int64(64 << 20)
	if testing.Short() {
		size = 8 << 20
	}
	for name, gen := range map[string]func(int64) ([]byte, error){"server": perftest.ServerLog, "dense": perftest.DenseLog} {
		log, err := gen(size)
		if err != nil {
			t.Fatal(err)
		}
		want := sequential(t, log)
		f := writeLog(t, log)
		if got := mapped(t, f, int64(len(log)), mapBlock, workers()); got != want {
			t.Fatalf("%s: the mapped fold differs", name)
		}
		fo := split.NewFold(split.Options{})
		n, err := readLogParallel(fo.NewLogFeed("log"), f, int64(len(log)), readBlock, workers())
		if err != nil {
			t.Fatal(err)
		}
		if folded(t, fo, n) != want {
			t.Fatalf("%s: the block read differs", name)
		}
	}
}

// Parse maps a regular file, streams a pipe and standard input ("-"), and
// each folds as ReadLog does.
func TestParseTakesThePathOfItsInput(t *testing.T) {
	src := filepath.Join("..", "..", "testdata", "runs", "4b", "split.log")
	log, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	want := sequential(t, log)
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	fo := split.NewFold(split.Options{})
	feed := fo.NewLogFeed("log")
	wantVia := viaMap
	if runtime.GOOS != "linux" {
		wantVia = viaBlocks
	}
	via, err := readLog(feed, f, st.Mode().IsRegular(), st.Size(), nil)
	if err != nil || via != wantVia {
		t.Fatalf("a regular file: read %s, err %v; want %s", via, err, wantVia)
	}
	if got := folded(t, fo, feed.Lines()); got != want {
		t.Fatal("the mapped file folds differently")
	}

	// A pipe, standard input: streamed, the sniffed head first.
	pipe := func() *os.File {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, _ = w.Write(log)
			w.Close()
		}()
		t.Cleanup(func() { r.Close() })
		return r
	}
	r := pipe()
	fo = split.NewFold(split.Options{})
	feed = fo.NewLogFeed("log")
	head := make([]byte, 1000)
	if _, err := r.Read(head[:1]); err != nil {
		t.Fatal(err)
	}
	if via, err := readLog(feed, r, false, 0, head[:1]); err != nil || via != viaStream {
		t.Fatalf("a pipe: read %s, err %v", via, err)
	}
	if got := folded(t, fo, feed.Lines()); got != want {
		t.Fatal("the pipe folds differently")
	}

	stdin := os.Stdin
	os.Stdin = pipe()
	defer func() { os.Stdin = stdin }()
	fo = split.NewFold(split.Options{})
	if _, err := Parse(fo, "-", nil); err != nil {
		t.Fatal(err)
	}
	if got := folded(t, fo, fo.Sent().Streams[0].Lines); got != want {
		t.Fatal("standard input folds differently")
	}
}

// FuzzMappedEqualsReadLog: any bytes in a file, mapped in blocks of any
// size, fold as Fold.ReadLog folds them.
func FuzzMappedEqualsReadLog(f *testing.F) {
	for _, log := range fixtureLogs(f) {
		f.Add(log[:min(len(log), 16<<10)], uint16(4096), uint8(2))
	}
	f.Add(boundaryLog(512, "no newline"), uint16(511), uint8(2))
	f.Add([]byte(""), uint16(1), uint8(1))
	f.Add([]byte("\r\n\r\n MiB\r"), uint16(2), uint8(2))
	dir := f.TempDir()
	var n int
	f.Fuzz(func(t *testing.T, log []byte, block uint16, w uint8) {
		n++
		p := filepath.Join(dir, fmt.Sprint(n))
		if err := os.WriteFile(p, log, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(p)
		fl, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer fl.Close()
		b, workers := int(block)%8192+1, int(w)%4+1
		if got, want := mapped(t, fl, int64(len(log)), b, workers), sequential(t, log); got != want {
			t.Fatalf("block %d, %d workers: the mapped fold differs\n%s\n%s", b, workers, got, want)
		}
	})
}

// The mapping's pages are released as the blocks are applied: `aggregator
// parse` of a 256 MB log file peaks far below the file's size in resident
// memory (ru_maxrss, which counts the mapped file's pages as top does),
// on one core, on two, and with more workers than cores; and it grows
// past its peak on a small log by no more than the blocks in flight. The
// binary is built without the race detector (whose shadow memory would
// count) and runs under a launcher of its own (perftest.RunChild): a
// child this test process started directly would have the test
// process's own peak counted into its ru_maxrss, and the tests running
// beside this one make that peak 180 MiB.
func TestMappedReleasesAppliedBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds aggregator, writes and parses a 256 MB log")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the log is mapped on Linux only")
	}
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "aggregator")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/gttsplit/gttsplit/cmd/aggregator").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	p := filepath.Join(dir, "server.log")
	w, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	size, err := perftest.WriteServerLog(w, 256<<20)
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	parse := func(log string, procs int) perftest.Usage {
		t.Helper()
		cmd := exec.Command(bin, "parse", log)
		cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", procs))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		u, err := perftest.RunChild(cmd)
		if err != nil {
			t.Fatalf("aggregator parse %s: %v\n%s", log, err, out.Bytes())
		}
		return u
	}
	small := filepath.Join("..", "..", "testdata", "runs", "4b", "split.log")
	for _, procs := range []int{1, 2, 16} {
		base := parse(small, procs)
		u := parse(p, procs)
		t.Logf("GOMAXPROCS=%d: peak RSS %d MiB parsing %d MiB, %d MiB parsing the 4B run (the launcher's %d MiB)",
			procs, u.PeakRSS>>20, size>>20, base.PeakRSS>>20, u.LauncherRSS>>20)
		if u.PeakRSS > 128<<20 {
			t.Errorf("GOMAXPROCS=%d: peak RSS %d MiB parsing a %d MiB file: the mapping's pages are not released", procs, u.PeakRSS>>20, size>>20)
		}
		// The blocks in flight, and room for the heap's growth.
		if grew := u.PeakRSS - base.PeakRSS; grew > mapInFlight+16<<20 {
			t.Errorf("GOMAXPROCS=%d: the peak RSS grew by %d MiB from a small log to %d MiB: more than the %d MiB of blocks in flight", procs, grew>>20, size>>20, mapInFlight>>20)
		}
	}
}
