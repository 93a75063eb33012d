package jsonsink_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/jsonsink"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

func newSink(t *testing.T, dir string) sinks.Sink {
	t.Helper()
	s, err := jsonsink.New(jsonsink.Config{Dir: dir}, sinks.Settings{Logger: zerolog.New(zerolog.NewTestWriter(t))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// readLines returns splits.jsonl's lines, requiring each to be a complete
// JSON object ending in a newline.
func readLines(t *testing.T, dir string) []split.Report {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "splits.jsonl"))
	require.NoError(t, err)
	if len(b) == 0 {
		return nil
	}
	require.Equal(t, byte('\n'), b[len(b)-1], "file ends inside a line")
	var out []split.Report
	for i, line := range bytes.Split(b[:len(b)-1], []byte("\n")) {
		var r split.Report
		require.NoError(t, json.Unmarshal(line, &r), "line %d is torn: %.80q", i+1, line)
		out = append(out, r)
	}
	return out
}

func runIDs(rs []split.Report) []string {
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.Run.ID)
	}
	return ids
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Conformance(t, func(t *testing.T) sinks.Sink {
		dir := t.TempDir()
		t.Cleanup(func() { requireConfined(t, dir) })
		return newSink(t, dir)
	})
}

// requireConfined checks that nothing was written next to dir, that every
// document is at host/lane/run.json with no temporary file left, and that
// splits.jsonl holds only whole lines.
func requireConfined(t *testing.T, dir string) {
	t.Helper()
	siblings, err := os.ReadDir(filepath.Dir(dir))
	require.NoError(t, err)
	for _, e := range siblings {
		require.Equal(t, filepath.Base(dir), e.Name(), "something was written next to the sink directory")
	}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, err := filepath.Rel(dir, p)
		require.NoError(t, err)
		require.True(t, rel == "." || filepath.IsLocal(rel), "%q escapes", rel)
		require.False(t, strings.HasPrefix(d.Name(), "."), "hidden or temporary file %q left", rel)
		if !d.IsDir() && rel != "splits.jsonl" {
			require.Len(t, strings.Split(rel, string(filepath.Separator)), 3, "file %q is not host/lane/run.json", rel)
			require.True(t, strings.HasSuffix(rel, ".json"), rel)
		}
		return nil
	}))
	readLines(t, dir)
}

func TestDocumentAndLines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := newSink(t, dir)

	r1 := sinktest.Report("run-1")
	require.NoError(t, s.Write(ctx, r1))
	require.NoError(t, s.Write(ctx, r1), "identical rewrite")
	r2 := sinktest.Report("run-2")
	require.NoError(t, s.Write(ctx, r2))
	r1b := r1
	r1b.Flags = []string{"no_trace"}
	require.NoError(t, s.Write(ctx, r1b), "newer split of run-1")
	require.NoError(t, s.Write(ctx, r1b), "identical rewrite of the newer split")

	doc, err := os.ReadFile(filepath.Join(dir, "node-1", "lane-a", "run-1.json"))
	require.NoError(t, err)
	want, err := split.JSON(r1b)
	require.NoError(t, err)
	require.Equal(t, string(want), string(doc), "the document is split.JSON of the last split")

	lines := readLines(t, dir)
	require.Equal(t, []string{"run-1", "run-2", "run-1"}, runIDs(lines))
	require.Equal(t, []string{"no_trace"}, lines[2].Flags)
	require.NoError(t, s.Close(ctx))
	requireConfined(t, dir)
}

func TestIndexRebuiltOnOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	r1, r2 := sinktest.Report("run-1"), sinktest.Report("run-2")

	s := newSink(t, dir)
	require.NoError(t, s.Write(ctx, r1))
	require.NoError(t, s.Write(ctx, r2))
	require.NoError(t, s.Close(ctx))

	s = newSink(t, dir)
	require.NoError(t, s.Write(ctx, r1), "re-sent after a restart")
	require.NoError(t, s.Write(ctx, r2))
	require.Len(t, readLines(t, dir), 2, "identical splits are not appended again after a restart")
	r1.Flags = []string{"fit_probe"}
	require.NoError(t, s.Write(ctx, r1))
	require.NoError(t, s.Close(ctx))
	require.Equal(t, []string{"run-1", "run-2", "run-1"}, runIDs(readLines(t, dir)))
}

func TestTornTailIsTerminated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	// A crash left a line without its end, and someone left a bad line.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "splits.jsonl"),
		[]byte("not json\n{\"schema\":\"gttsplit.split.v1\",\"run\":{\"id\":\"ru"), 0o644))

	s := newSink(t, dir)
	require.NoError(t, s.Write(ctx, sinktest.Report("run-1")))
	require.NoError(t, s.Close(ctx))

	b, err := os.ReadFile(filepath.Join(dir, "splits.jsonl"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	require.Len(t, lines, 3)
	var r split.Report
	require.NoError(t, json.Unmarshal([]byte(lines[2]), &r), "the new line starts on a line of its own")
	require.Equal(t, "run-1", r.Run.ID)
}

func TestLinesNeverTornUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	// Two sinks on one directory stand for two aggregator processes: each
	// has its own file descriptor, so only O_APPEND keeps lines whole.
	a, b := newSink(t, dir), newSink(t, dir)

	// Large lines (about 40 KiB each, many pages) make interleaving likely if a line
	// took more than one write.
	big := make([]split.BufferLine, 400)
	for i := range big {
		big[i] = split.BufferLine{Line: uint64(i), Func: "llama_model_load", Name: "ROCm0", Kind: "model", MiB: split.MiB(i), Row: "model"}
	}
	const writers, perWriter = 6, 4
	var wg sync.WaitGroup
	for w := range writers {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Go(func() {
			for i := range perWriter {
				r := sinktest.Report(fmt.Sprintf("run-%d-%d", w, i))
				r.Detail.Buffers = big
				require.NoError(t, s.Write(ctx, r))
			}
		})
	}
	wg.Wait()
	require.NoError(t, a.Close(ctx))
	require.NoError(t, b.Close(ctx))

	lines := readLines(t, dir)
	require.Len(t, lines, writers*perWriter)
	seen := map[string]bool{}
	for _, r := range lines {
		require.False(t, seen[r.Run.ID], "run %s appended twice", r.Run.ID)
		seen[r.Run.ID] = true
		require.Len(t, r.Detail.Buffers, len(big))
	}
	f, err := os.Open(filepath.Join(dir, "splits.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		require.True(t, json.Valid(sc.Bytes()))
	}
	require.NoError(t, sc.Err())
}

func TestPathTraversal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "out")
	s := newSink(t, dir)
	docs := map[string]bool{}
	for _, id := range append(sinktest.HostileIDs, "splits.jsonl") {
		r := sinktest.Report(id)
		r.Run.Host = id
		r.Run.Lane = id
		require.NoError(t, s.Write(ctx, r), "id %q", id)
	}
	require.NoError(t, s.Close(ctx))
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "splits.jsonl" && filepath.Dir(p) == dir {
			return err
		}
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		var r split.Report
		require.NoError(t, json.Unmarshal(b, &r))
		require.False(t, docs[r.Run.ID], "two documents for %q", r.Run.ID)
		docs[r.Run.ID] = true
		return nil
	}))
	require.Len(t, docs, len(sinktest.HostileIDs)+1, "one document per distinct id")
	require.Len(t, readLines(t, dir), len(sinktest.HostileIDs)+1)
	requireConfined(t, dir)
}

func TestConfig(t *testing.T) {
	t.Parallel()
	require.False(t, jsonsink.Config{}.Enabled(), "the zero Config is off")
	_, err := jsonsink.New(jsonsink.Config{}, sinks.Settings{})
	require.ErrorContains(t, err, "dir: must not be empty")
	s, err := jsonsink.New(jsonsink.Config{Dir: t.TempDir()}, sinks.Settings{})
	require.NoError(t, err)
	require.NoError(t, s.Close(context.Background()))
}
