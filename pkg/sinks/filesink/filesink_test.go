package filesink_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/filesink"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/gttsplit/gttsplit/pkg/split/present"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

func newSink(t *testing.T, dir string) sinks.Sink {
	t.Helper()
	s, err := filesink.New(filesink.Config{Dir: dir}, sinks.Settings{Logger: zerolog.New(zerolog.NewTestWriter(t))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Conformance(t, func(t *testing.T) sinks.Sink {
		dir := t.TempDir()
		t.Cleanup(func() { requireConfined(t, dir) })
		return newSink(t, dir)
	})
}

// requireConfined walks the parent of dir and fails if anything but dir
// itself was created there, and checks every file under dir is a report at
// depth three (host/lane/run.md) with no temporary file left.
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
		if !d.IsDir() {
			require.Len(t, strings.Split(rel, string(filepath.Separator)), 3, "file %q is not host/lane/run.md", rel)
			require.True(t, strings.HasSuffix(rel, ".md"), rel)
		}
		return nil
	}))
}

func TestWritesMarkdownAtRunPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s := newSink(t, dir)
	r := sinktest.Report("2025-01-02_run-7")
	require.NoError(t, s.Write(ctx, r))

	got, err := os.ReadFile(filepath.Join(dir, "node-1", "lane-a", "2025-01-02_run-7.md"))
	require.NoError(t, err, "readable ids are kept as they are")
	require.Equal(t, present.Markdown(r), string(got))

	r.Flags = []string{"not_verbose"}
	require.NoError(t, s.Write(ctx, r))
	got, err = os.ReadFile(filepath.Join(dir, "node-1", "lane-a", "2025-01-02_run-7.md"))
	require.NoError(t, err)
	require.Equal(t, present.Markdown(r), string(got), "a newer split replaces the file")
	require.NoError(t, s.Close(ctx))
	requireConfined(t, dir)
}

func TestPathTraversal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := t.TempDir()
	dir := filepath.Join(base, "out")
	s := newSink(t, dir)

	names := map[string]string{} // file → run id written there
	for _, id := range sinktest.HostileIDs {
		r := sinktest.Report(id)
		r.Run.Host = id
		r.Run.Lane = id
		require.NoError(t, s.Write(ctx, r), "id %q", id)
		// The file holding this run's report must be inside dir and be
		// the only one that mentions it.
		var found []string
		require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if _, seen := names[p]; !seen {
				found = append(found, p)
			}
			return nil
		}))
		require.Len(t, found, 1, "id %q must create exactly one new file (distinct ids, distinct files)", id)
		names[found[0]] = id
		rel, err := filepath.Rel(dir, found[0])
		require.NoError(t, err)
		require.True(t, filepath.IsLocal(rel), "id %q written to %q", id, found[0])
		for _, part := range strings.Split(rel, string(filepath.Separator)) {
			require.LessOrEqual(t, len(part), 120, "component of %q too long", id)
			require.NotContains(t, part, "\x00")
		}
	}
	require.Len(t, names, len(sinktest.HostileIDs))
	require.NoError(t, s.Close(ctx))
	requireConfined(t, dir)
}

func TestSharesDirectoryWithJSONSink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newSink(t, dir)
	r := sinktest.Report("run-1")
	r.Run.Host = "splits.jsonl"
	require.NoError(t, s.Write(context.Background(), r))
	_, err := os.Stat(filepath.Join(dir, "splits.jsonl"))
	require.ErrorIs(t, err, os.ErrNotExist, "the JSON sink's file name stays free")
}

func TestSymlinkInsideDirCannotEscape(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := t.TempDir()
	dir := filepath.Join(base, "out")
	outside := filepath.Join(base, "outside")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.MkdirAll(outside, 0o755))
	// A host directory replaced by a link to somewhere else.
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "node-1")))

	s := newSink(t, dir)
	err := s.Write(ctx, sinktest.Report("run-1"))
	require.Error(t, err)
	entries, rerr := os.ReadDir(outside)
	require.NoError(t, rerr)
	require.Empty(t, entries, "nothing may be written through the link")
}

func TestConfig(t *testing.T) {
	t.Parallel()
	require.False(t, filesink.Config{}.Enabled(), "the zero Config is off")
	_, err := filesink.New(filesink.Config{}, sinks.Settings{})
	require.ErrorContains(t, err, "dir: must not be empty")
	s, err := filesink.New(filesink.Config{Dir: t.TempDir()}, sinks.Settings{})
	require.NoError(t, err)
	require.NoError(t, s.Close(context.Background()))
}
