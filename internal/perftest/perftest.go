// Package perftest builds the large logs the performance benchmarks read.
// They are made from the repository's fixtures on the fly, in memory or in
// a temporary directory, never stored. FixtureLines gives the fixtures'
// lines to seed the fuzz targets.
package perftest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Root is the repository root (found from this file's place).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// FixtureLines returns up to max distinct lines of the fixtures that glob
// names under testdata/ (every fuzz target's seed corpus covers the real
// formats).
func FixtureLines(t testing.TB, glob string, max int) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(Root(), "testdata", glob))
	seen := map[string]bool{}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if !seen[l] && len(out) < max {
				seen[l] = true
				out = append(out, l)
			}
		}
	}
	return out
}

// Run4B is the 4B run's verbose log (testdata/runs/4b/split.log).
func Run4B() ([]byte, error) {
	return os.ReadFile(filepath.Join(Root(), "testdata", "runs", "4b", "split.log"))
}

// requestBlock is what llama-server prints for one chat request (the
// shapes of testdata/logs/two_models.log and router.log); %d is the task.
const requestBlock = `srv  params_from_: Chat format: Content-only
slot get_availabl: id  0 | task -1 | selected slot by LRU, t_last = 1764624000
slot launch_slot_: id  0 | task %[1]d | processing task
slot update_slots: id  0 | task %[1]d | new prompt, n_ctx_slot = 8192, n_keep = 0, n_prompt_tokens = 27
slot update_slots: id  0 | task %[1]d | kv cache rm [0, end)
slot update_slots: id  0 | task %[1]d | prompt processing progress, n_past = 27, n_tokens = 27, progress = 1.000000
slot update_slots: id  0 | task %[1]d | prompt done, n_past = 27, n_tokens = 27
slot      release: id  0 | task %[1]d | stop processing: n_past = 156, truncated = 0
slot print_timing: id  0 | task %[1]d | 
prompt eval time =     188.22 ms /    27 tokens (    6.97 ms per token,   143.45 tokens per second)
       eval time =    3105.33 ms /   130 runs   (   23.89 ms per token,    41.86 tokens per second)
      total time =    3293.55 ms /   157 tokens
srv  update_slots: all slots are idle
srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 200
`

// WriteServerLog writes a llama-server log of at least size bytes: the 4B
// run (its load, buffers, trace and breakdown table) once, then request
// after request, as a server that loaded once and served for hours. It
// returns the bytes written.
func WriteServerLog(w io.Writer, size int64) (int64, error) {
	run, err := Run4B()
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	n, err := bw.Write(run)
	total := int64(n)
	var blk bytes.Buffer
	for task := 0; err == nil && total < size; task++ {
		blk.Reset()
		for i := 0; i < 64; i++ {
			fmt.Fprintf(&blk, requestBlock, task*64+i)
		}
		n, err = bw.Write(blk.Bytes())
		total += int64(n)
	}
	if err == nil {
		err = bw.Flush()
	}
	return total, err
}

// ServerLog is WriteServerLog into memory.
func ServerLog(size int64) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(int(size) + 1<<20)
	_, err := WriteServerLog(&b, size)
	return b.Bytes(), err
}

// WriteDenseLog writes the 4B run again and again until at least size
// bytes (every repetition a new load: a worst case no real log reaches).
func WriteDenseLog(w io.Writer, size int64) (int64, error) {
	run, err := Run4B()
	if err != nil {
		return 0, err
	}
	var total int64
	for total < size {
		n, err := w.Write(run)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// DenseLog is WriteDenseLog into memory.
func DenseLog(size int64) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(int(size) + 1<<20)
	_, err := WriteDenseLog(&b, size)
	return b.Bytes(), err
}
