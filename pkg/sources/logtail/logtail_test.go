package logtail_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/sources/logtail"
	"github.com/stretchr/testify/require"
)

func TestAppendsInChunksHoldPartialLine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "llama.log")
	w := appender(t, path)
	cfg, done := config(t, path, t.TempDir())
	s := &sink{}
	r := start(t, cfg, s)

	write(t, w, "alpha\nbe")
	s.waitLines(t, 1)
	write(t, w, "ta\ngam")
	s.waitLines(t, 2)
	write(t, w, "ma\n")
	write(t, w, "del")
	s.waitLines(t, 3)
	write(t, w, "ta") // no newline: held until Done, then flushed
	close(done)
	require.NoError(t, r.wait(t))

	ls := s.lines()
	require.Equal(t, []string{"alpha", "beta", "gamma", "delta"}, texts(ls))
	requireSeqs(t, ls, 1)
}

func TestPartialLineNotFlushedStaysBeforeCheckpoint(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "llama.log")
	state := t.TempDir()
	require.NoError(t, os.WriteFile(path, []byte("one\ntwo\nthr"), 0o644))

	cfg, done := config(t, path, state)
	cfg.FlushPartialOnDone = false
	close(done)
	s := &sink{}
	require.NoError(t, start(t, cfg, s).wait(t))
	require.Equal(t, []string{"one", "two"}, texts(s.lines()))

	// The writer comes back and finishes the line: the next run starts at
	// the partial line and numbers on.
	w := appender(t, path)
	write(t, w, "ee\nfour\n")
	cfg2, done2 := config(t, path, state)
	close(done2)
	s2 := &sink{}
	require.NoError(t, start(t, cfg2, s2).wait(t))
	ls := s2.lines()
	require.Equal(t, []string{"three", "four"}, texts(ls))
	requireSeqs(t, ls, 3)
}

func TestCRLFKeepsCarriageReturn(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "llama.log")
	require.NoError(t, os.WriteFile(path, []byte("a\r\nb\r\n\r\n\nc\n"), 0o644))
	cfg, done := config(t, path, "")
	close(done)
	s := &sink{}
	require.NoError(t, start(t, cfg, s).wait(t))
	ls := s.lines()
	require.Equal(t, []string{"a\r", "b\r", "\r", "", "c"}, texts(ls))
	requireSeqs(t, ls, 1)
}

func TestBatchesAreBoundedAndConsecutive(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "llama.log")
	want := numbered("line", 0, 1000)
	require.NoError(t, os.WriteFile(path, []byte(joinLines(want)), 0o644))
	cfg, done := config(t, path, "")
	cfg.Batch.MaxLines = 7
	close(done)
	s := &sink{}
	require.NoError(t, start(t, cfg, s).wait(t))
	recs := s.records()
	// 1000 lines read in one pass: 142 full batches and the rest.
	require.Len(t, recs, (1000+6)/7)
	for _, r := range recs {
		require.NotEmpty(t, r.Lines)
		require.LessOrEqual(t, len(r.Lines), 7)
		require.NotNil(t, r.Ack)
		require.Nil(t, r.Sample)
	}
	ls := s.lines()
	require.Equal(t, want, texts(ls))
	requireSeqs(t, ls, 1)
}

func TestLongLineIsCut(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "llama.log")
	require.NoError(t, os.WriteFile(path, []byte("short\n0123456789abcdefghij\nxyz\n"), 0o644))
	cfg, done := config(t, path, "")
	cfg.MaxLineBytes = 8
	close(done)
	s := &sink{}
	require.NoError(t, start(t, cfg, s).wait(t))
	require.Equal(t, []string{"short", "01234567", "89abcdef", "ghij", "xyz"}, texts(s.lines()))
}

func TestFileAppearsLater(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "llama.log")
	cfg, done := config(t, path, t.TempDir())
	s := &sink{}
	r := start(t, cfg, s)
	w := appender(t, path)
	write(t, w, "first\nsecond\n")
	s.waitLines(t, 2)
	close(done)
	require.NoError(t, r.wait(t))
	require.Equal(t, []string{"first", "second"}, texts(s.lines()))
}

func TestDoneWithoutFileReturnsNil(t *testing.T) {
	t.Parallel()
	cfg, done := config(t, filepath.Join(t.TempDir(), "never.log"), t.TempDir())
	close(done)
	s := &sink{}
	require.NoError(t, start(t, cfg, s).wait(t))
	require.Empty(t, s.records())
}

func TestCancelReturnsNil(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "llama.log")
	w := appender(t, path)
	write(t, w, "x\n")
	cfg, _ := config(t, path, t.TempDir())
	s := &sink{}
	r := start(t, cfg, s)
	s.waitLines(t, 1)
	require.NoError(t, r.stop(t))
}

func TestEmitErrorFailsTheSource(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "llama.log")
	require.NoError(t, os.WriteFile(path, []byte("x\n"), 0o644))
	cfg, _ := config(t, path, t.TempDir())
	closed := errors.New("pipeline closed")
	s := &sink{err: closed}
	err := start(t, cfg, s).wait(t)
	require.ErrorIs(t, err, closed)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	cfg := logtail.DefaultConfig()
	require.NoError(t, logtail.Config{Path: "x", Stream: "log", PollInterval: 1, MaxLineBytes: 1}.Validate())
	cfg.PollInterval = 0
	cfg.MaxLineBytes = -1
	cfg.AckWait = -1
	cfg.Stream = ""
	_, err := logtail.New(cfg, sources.Settings{})
	require.Error(t, err)
	for _, key := range []string{"path:", "stream:", "poll_interval:", "max_line_bytes:", "ack_wait:"} {
		require.Contains(t, err.Error(), key)
	}

	ok := logtail.DefaultConfig()
	ok.Path = "llama.log"
	src, err := logtail.New(ok, sources.Settings{})
	require.NoError(t, err)
	require.NotNil(t, src)
}

func TestStateDirUnusable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))
	cfg, _ := config(t, filepath.Join(dir, "llama.log"), filepath.Join(blocker, "state"))
	src, err := logtail.New(cfg.Config, sources.Settings{})
	require.NoError(t, err)
	err = src.Run(context.Background(), (&sink{}).emit)
	require.ErrorContains(t, err, "create state dir")
}

func TestCorruptStateFileIsIgnored(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "llama.log")
	state := t.TempDir()
	require.NoError(t, os.WriteFile(path, []byte("a\nb\n"), 0o644))
	cfg, done := config(t, path, state)
	close(done)
	require.NoError(t, start(t, cfg, &sink{}).wait(t))
	files, err := filepath.Glob(filepath.Join(state, "logtail-*.json"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	require.NoError(t, os.WriteFile(files[0], []byte("{not json"), 0o644))

	cfg2, done2 := config(t, path, state)
	close(done2)
	s := &sink{}
	require.NoError(t, start(t, cfg2, s).wait(t))
	ls := s.lines()
	require.Equal(t, []string{"a", "b"}, texts(ls))
	requireSeqs(t, ls, 1)
	b, err := os.ReadFile(files[0])
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "{\"version\":1"), "state rewritten: %s", b)
}
