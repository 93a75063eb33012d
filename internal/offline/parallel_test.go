package offline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// folded is what a fold of a log comes to: the report, the whole state
// and the line count.
func folded(t testing.TB, f *split.Fold, lines uint64) string {
	t.Helper()
	rep, err := split.JSON(f.Report())
	if err != nil {
		t.Fatal(err)
	}
	st, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s\n%s\n%d lines", rep, st, lines)
}

// sequential is the plain path: Fold.ReadLog over the whole log.
func sequential(t testing.TB, log []byte) string {
	t.Helper()
	f := split.NewFold(split.Options{})
	n, err := f.ReadLog(bytes.NewReader(log), "log")
	if err != nil {
		t.Fatal(err)
	}
	return folded(t, f, n)
}

// parallel is the block read of log: with ReadAt, and from bytes in
// memory as from a mapping; it fails the test when the two differ.
func parallel(t testing.TB, log []byte, block, workers int) string {
	t.Helper()
	f := split.NewFold(split.Options{})
	n, err := readLogParallel(f.NewLogFeed("log"), bytes.NewReader(log), int64(len(log)), block, workers)
	if err != nil {
		t.Fatal(err)
	}
	got := folded(t, f, n)
	f = split.NewFold(split.Options{})
	r := bytes.NewReader(log)
	n, err = readPieces(f.NewLogFeed("log"), &mapBlocks{m: log, block: block}, r, int64(len(log)), block, workers, 2*workers)
	if err != nil {
		t.Fatal(err)
	}
	if mem := folded(t, f, n); mem != got {
		t.Fatalf("block %d, %d workers: in memory and with ReadAt differ\n%s\n%s", block, workers, mem, got)
	}
	return got
}

// fixtureLogs are the repository's real and hand-made logs.
func fixtureLogs(t testing.TB) map[string][]byte {
	t.Helper()
	logs := map[string][]byte{}
	for _, root := range []string{filepath.Join("..", "..", "testdata"), filepath.Join("..", "..", "pkg", "split", "testdata")} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".log") {
				return err
			}
			b, err := os.ReadFile(p)
			logs[p] = b
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(logs) < 10 {
		t.Fatalf("only %d fixture logs", len(logs))
	}
	return logs
}

// The parallel read folds every fixture log as Fold.ReadLog does, for
// blocks that cut lines, tables and load blocks anywhere.
func TestParallelEqualsReadLogOnFixtures(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(14, 1))
	for name, log := range fixtureLogs(t) {
		want := sequential(t, log)
		blocks := []int{64, 1000 + rng.IntN(4000), 1 + rng.IntN(len(log)+1), readBlock, mapBlock}
		if len(log) < 32<<10 {
			blocks = append(blocks, 1, 2, 7) // a piece per byte
		}
		for _, block := range blocks {
			for _, w := range []int{1, 2, 3} {
				if got := parallel(t, log, block, w); got != want {
					t.Fatalf("%s, block %d, %d workers: the parallel fold differs\n%s\n%s", name, block, w, got, want)
				}
			}
		}
	}
}

// A memory-breakdown table whose rows (which carry no other anchor) are
// cut from their header by a block boundary, at every place.
func TestParallelBreakdownTableAcrossBlocks(t *testing.T) {
	t.Parallel()
	log, err := os.ReadFile(filepath.Join("..", "..", "testdata", "runs", "4b", "split.log"))
	if err != nil {
		t.Fatal(err)
	}
	head := bytes.Index(log, []byte("memory breakdown [MiB]"))
	if head < 0 {
		t.Fatal("no breakdown table in the 4B log")
	}
	want := sequential(t, log)
	for d := -50; d < 400; d += 3 {
		// The second block starts just before, in or after the table.
		for _, w := range []int{1, 2} {
			if got := parallel(t, log, head+d, w); got != want {
				t.Fatalf("block %d: the parallel fold differs", head+d)
			}
		}
	}
}

// A log whose only -v line comes late, after lines that look like -v
// markers but are other lines, and lines that are too long for a block.
func TestParallelDebugVerdictAndLongLines(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	b.WriteString("build: 4000 (abcdef0) with cc\n")
	b.WriteString("llama_model_loader: loaded meta data with 3 key-value pairs and 1 tensors\n")
	b.WriteString(strings.Repeat("generated text ", 5000) + "\n")
	b.WriteString("load_tensors: layer 0 assigned to device CUDA0 buffer size = 1.00 MiB\n")
	b.WriteString(strings.Repeat("x", 70000) + "\n")
	b.WriteString("load_tensors: layer 1 assigned to device CUDA0\n")
	b.WriteString("tail without a newline MiB")
	log := b.Bytes()
	want := sequential(t, log)
	for _, block := range []int{1, 5, 100, 4096, 65536, 1 << 20} {
		for _, w := range []int{1, 2, 4} {
			if got := parallel(t, log, block, w); got != want {
				t.Fatalf("block %d, %d workers: the parallel fold differs\n%s\n%s", block, w, got, want)
			}
		}
	}
}

// Parse reads a regular file in parallel and a pipe in one stream: both
// fold as ReadLog does.
func TestParseParallelAndPipe(t *testing.T) {
	t.Parallel()
	src := filepath.Join("..", "..", "testdata", "runs", "4b", "split.log")
	log, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	want := sequential(t, log)
	f := split.NewFold(split.Options{})
	if _, err := Parse(f, src, nil); err != nil {
		t.Fatal(err)
	}
	if got := folded(t, f, f.Sent().Streams[0].Lines); got != want {
		t.Fatalf("Parse differs from ReadLog")
	}
}

// FuzzParallelEqualsReadLog: any bytes, cut into any blocks, on any number
// of workers, fold as Fold.ReadLog folds them.
func FuzzParallelEqualsReadLog(f *testing.F) {
	for _, log := range fixtureLogs(f) {
		f.Add(log[:min(len(log), 16<<10)], uint16(4096), uint8(2))
	}
	f.Add([]byte("no newline MiB"), uint16(3), uint8(2))
	f.Add([]byte("\n\n\r\n MiB \n"), uint16(1), uint8(3))
	f.Fuzz(func(t *testing.T, log []byte, block uint16, w uint8) {
		want := sequential(t, log)
		if got := parallel(t, log, int(block)%8192+1, int(w)%4+1); got != want {
			t.Fatalf("block %d, %d workers: the parallel fold differs\n%s\n%s", int(block)%8192+1, int(w)%4+1, got, want)
		}
	})
}
