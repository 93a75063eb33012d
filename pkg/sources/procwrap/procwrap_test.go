package procwrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/sources/procwrap/procwraptest"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == procwraptest.Arg {
		os.Exit(procwraptest.Main(os.Args[2:]))
	}
	goleak.VerifyTestMain(m)
}

// syncBuffer is a bytes.Buffer that the child's copying goroutine and the
// test can share; it closes seen once the output contains want.
type syncBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
}

func newSyncBuffer(want string) *syncBuffer {
	return &syncBuffer{want: want, seen: make(chan struct{})}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if b.want != "" && bytes.Contains(b.buf.Bytes(), []byte(b.want)) {
		close(b.seen)
		b.want = ""
	}
	return n, err
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// recorder is a downstream that keeps every record; before, when set, is
// waited for before any record is accepted.
type recorder struct {
	mu     sync.Mutex
	recs   []sources.Record
	before <-chan struct{}
}

func (r *recorder) emit(ctx context.Context, rec sources.Record) error {
	if r.before != nil {
		select {
		case <-r.before:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}

func (r *recorder) records() []sources.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.recs)
}

// lines checks the record sequence (Started first, Finished last, Lines of
// one stream each in between) and returns every captured line.
func (r *recorder) lines(t *testing.T) []split.Line {
	t.Helper()
	recs := r.records()
	require.GreaterOrEqual(t, len(recs), 2)
	require.NotNil(t, recs[0].Started, "first record must be Started")
	require.NotNil(t, recs[len(recs)-1].Finished, "last record must be Finished")
	var out []split.Line
	for _, rec := range recs[1 : len(recs)-1] {
		require.NotEmpty(t, rec.Lines, "middle records hold lines")
		require.Nil(t, rec.Started)
		require.Nil(t, rec.Finished)
		for _, l := range rec.Lines {
			require.Equal(t, rec.Lines[0].Stream, l.Stream, "one stream per record")
			require.False(t, l.Time.IsZero())
		}
		out = append(out, rec.Lines...)
	}
	return out
}

func (r *recorder) finished(t *testing.T) *split.FinishInfo {
	t.Helper()
	recs := r.records()
	require.NotEmpty(t, recs)
	fin := recs[len(recs)-1].Finished
	require.NotNil(t, fin)
	return fin
}

type child struct {
	cfg    Config
	opt    Options
	batch  sources.BatchConfig
	stdout *syncBuffer
	stderr *syncBuffer
}

// newChild configures the test binary as the child, running ops.
func newChild(t *testing.T, ops ...string) *child {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	c := &child{stdout: newSyncBuffer(""), stderr: newSyncBuffer("")}
	c.cfg = DefaultConfig()
	c.opt.Command = append([]string{exe, procwraptest.Arg}, ops...)
	// GORACE: a child built with -race would otherwise sleep 1s at exit.
	c.opt.BaseEnv = []string{"PATH=" + os.Getenv("PATH"), "GORACE=atexit_sleep_ms=0"}
	c.opt.Stdin = strings.NewReader("")
	c.opt.Stdout = c.stdout
	c.opt.Stderr = c.stderr
	c.batch = sources.DefaultBatchConfig()
	c.batch.MaxDelay = 5 * time.Millisecond
	c.cfg.KillGrace = 5 * time.Second
	return c
}

func (c *child) source(t *testing.T) *Source {
	t.Helper()
	s, err := New(c.cfg, c.opt, sources.Settings{Logger: zerolog.New(zerolog.NewTestWriter(t)), Batch: c.batch})
	require.NoError(t, err)
	return s
}

// run runs the child to its end with a fresh recorder.
func (c *child) run(t *testing.T) (*Source, *recorder) {
	t.Helper()
	s := c.source(t)
	rec := &recorder{}
	require.NoError(t, s.Run(t.Context(), rec.emit))
	return s, rec
}

// splitLines is what capture should make of b: lines without "\n", the
// last one even without a newline.
func splitLines(b []byte) []string {
	s := string(b)
	if s == "" {
		return nil
	}
	parts := strings.Split(s, "\n")
	if parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return parts
}

func texts(ls []split.Line, stream string) []string {
	var out []string
	for _, l := range ls {
		if stream == "" || l.Stream == stream {
			out = append(out, l.Text)
		}
	}
	return out
}

// requireSeqs checks that the captured seqs are exactly 1..n, each once.
func requireSeqs(t *testing.T, ls []split.Line, n int) {
	t.Helper()
	seqs := make([]uint64, 0, len(ls))
	for _, l := range ls {
		seqs = append(seqs, l.Seq)
	}
	slices.Sort(seqs)
	want := make([]uint64, n)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	require.Equal(t, want, seqs)
}

func TestPassthroughIsByteForByte(t *testing.T) {
	t.Parallel()
	log, err := os.ReadFile("testdata/llama.log")
	require.NoError(t, err)
	for _, chunk := range []int{0, 1, 7, 4096} {
		t.Run(fmt.Sprintf("chunk=%d", chunk), func(t *testing.T) {
			t.Parallel()
			c := newChild(t, fmt.Sprintf("chunk=%d", chunk), "cat=testdata/llama.log", "err=testdata/llama.log")
			s, rec := c.run(t)

			require.Equal(t, log, c.stdout.Bytes())
			require.Equal(t, log, c.stderr.Bytes())
			want := splitLines(log)
			require.Equal(t, "last line without newline", want[len(want)-1])
			require.Contains(t, want, "windows line\r", "a \\r is kept")

			ls := rec.lines(t)
			require.Equal(t, want, texts(ls, "stdout"))
			require.Equal(t, want, texts(ls, "stderr"))
			requireSeqs(t, ls, 2*len(want))
			for _, stream := range []string{"stdout", "stderr"} {
				var prev uint64
				for _, l := range ls {
					if l.Stream == stream {
						require.Greater(t, l.Seq, prev, "seqs grow within a stream")
						prev = l.Seq
					}
				}
			}
			require.Zero(t, s.Dropped())
			require.Equal(t, 0, s.ExitCode())
			fin := rec.finished(t)
			require.NotNil(t, fin.ExitCode)
			require.Equal(t, 0, *fin.ExitCode)
			require.Empty(t, fin.Signal)
		})
	}
}

func TestMixedStreamsShareOneCounter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var all []string
	var b strings.Builder
	for i := range 500 {
		line := fmt.Sprintf("line %03d %s", i, strings.Repeat("x", i%37))
		all = append(all, line)
		b.WriteString(line + "\n")
	}
	b.WriteString("partial")
	all = append(all, "partial")
	path := filepath.Join(dir, "mixed.log")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))

	c := newChild(t, "chunk=3", "mix="+path)
	c.batch.MaxLines = 16
	_, rec := c.run(t)

	var wantOut, wantErr []string
	var outBytes, errBytes strings.Builder
	for i, l := range all {
		nl := "\n"
		if i == len(all)-1 {
			nl = ""
		}
		if i%2 == 0 {
			wantOut = append(wantOut, l)
			outBytes.WriteString(l + nl)
		} else {
			wantErr = append(wantErr, l)
			errBytes.WriteString(l + nl)
		}
	}
	require.Equal(t, outBytes.String(), string(c.stdout.Bytes()))
	require.Equal(t, errBytes.String(), string(c.stderr.Bytes()))

	ls := rec.lines(t)
	require.Equal(t, wantOut, texts(ls, "stdout"))
	require.Equal(t, wantErr, texts(ls, "stderr"))
	requireSeqs(t, ls, len(all))
	for _, r := range rec.records() {
		require.LessOrEqual(t, len(r.Lines), 16)
	}
}

func TestLongLineIsCapturedInPieces(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	long := strings.Repeat("0123456789", 25) // 250 bytes
	content := "short\n" + long + "\nend\n"
	path := filepath.Join(dir, "long.log")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))

	c := newChild(t, "chunk=33", "cat="+path)
	c.opt.MaxLineBytes = 100
	_, rec := c.run(t)
	require.Equal(t, content, string(c.stdout.Bytes()))
	require.Equal(t, []string{"short", long[:100], long[100:200], long[200:], "end"}, texts(rec.lines(t), ""))
}

func TestVerbosityFlag(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		args   []string
		add    bool
		wantV  bool
		wantAt int
	}{
		{name: "appended", args: nil, add: true, wantV: true},
		{name: "lv 3", args: []string{"-lv", "3"}, add: true},
		{name: "verbose", args: []string{"--verbose"}, add: true},
		{name: "lv=2", args: []string{"-lv=2"}, add: true},
		{name: "log-verbosity", args: []string{"--log-verbosity", "1"}, add: true},
		{name: "log-verbose", args: []string{"--log-verbose"}, add: true},
		{name: "verbosity=4", args: []string{"--verbosity=4"}, add: true},
		{name: "v already", args: []string{"-v"}, add: true},
		{name: "other flags", args: []string{"-m", "model.gguf", "-ngl", "99"}, add: true, wantV: true},
		{name: "disabled", args: nil, add: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newChild(t, append([]string{"args"}, tc.args...)...)
			c.cfg.AddVerbose = tc.add
			s, rec := c.run(t)

			want := append([]string{"args"}, tc.args...)
			if tc.wantV {
				want = append(want, "-v")
			}
			require.Equal(t, want, s.Argv()[2:])
			// The child saw exactly that argv.
			got := texts(rec.lines(t), "stdout")
			require.Len(t, got, 1)
			var seen []string
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(got[0], "args=")), &seen))
			require.Equal(t, want, seen)
			require.Equal(t, s.CommandLine(), rec.records()[0].Started.Command)
			require.Equal(t, shellQuote(append(c.opt.Command[:2:2], want...)), rec.records()[0].Started.Command)
		})
	}
}

func TestTraceEnv(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		base  []string
		extra []string
		set   bool
		want  string
	}{
		{name: "set when absent", set: true, want: "env " + TraceEnv + "=1"},
		{name: "existing value kept", base: []string{TraceEnv + "=0"}, set: true, want: "env " + TraceEnv + "=0"},
		{name: "empty value kept", base: []string{TraceEnv + "="}, set: true, want: "env " + TraceEnv + "="},
		{name: "extra env kept", extra: []string{TraceEnv + "=2"}, set: true, want: "env " + TraceEnv + "=2"},
		{name: "disabled", set: false, want: "env " + TraceEnv + " unset"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newChild(t, "env="+TraceEnv, "env=GTTSPLIT_EXTRA")
			c.opt.BaseEnv = append(c.opt.BaseEnv, tc.base...)
			c.opt.Env = append([]string{"GTTSPLIT_EXTRA=yes"}, tc.extra...)
			c.cfg.SetTraceEnv = tc.set
			_, rec := c.run(t)
			require.Equal(t, []string{tc.want, "env GTTSPLIT_EXTRA=yes"}, texts(rec.lines(t), "stdout"))
		})
	}
}

func TestExitCodePassesThrough(t *testing.T) {
	t.Parallel()
	c := newChild(t, "exit=3")
	s, rec := c.run(t)
	require.Equal(t, 3, s.ExitCode())
	fin := rec.finished(t)
	require.NotNil(t, fin.ExitCode)
	require.Equal(t, 3, *fin.ExitCode)
	require.False(t, fin.Finished.Before(rec.records()[0].Started.Started))
}

func TestPIDIsExposed(t *testing.T) {
	t.Parallel()
	c := newChild(t, "pid")
	s := c.source(t)
	require.Equal(t, 0, s.PID())
	rec := &recorder{}
	errc := make(chan error, 1)
	go func() { errc <- s.Run(t.Context(), rec.emit) }()
	pid, err := s.WaitPID(t.Context())
	require.NoError(t, err)
	require.NoError(t, <-errc)
	require.Equal(t, []string{fmt.Sprintf("pid=%d", pid)}, texts(rec.lines(t), "stdout"))
	require.Equal(t, pid, s.PID())
}

// startWaiting runs a child that waits for a signal and returns once it is
// ready for it.
func startWaiting(t *testing.T, mode string, mutate func(*Config)) (*Source, *recorder, <-chan error, context.CancelFunc) {
	t.Helper()
	c := newChild(t, "wait="+mode)
	c.stdout = newSyncBuffer("ready\n")
	c.opt.Stdout = c.stdout
	if mutate != nil {
		mutate(&c.cfg)
	}
	s := c.source(t)
	rec := &recorder{}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx, rec.emit) }()
	select {
	case <-c.stdout.seen:
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("child never became ready")
	}
	return s, rec, errc, cancel
}

func TestSignalIsForwarded(t *testing.T) {
	t.Parallel()
	t.Run("dies by SIGTERM", func(t *testing.T) {
		t.Parallel()
		s, rec, errc, cancel := startWaiting(t, "die", nil)
		defer cancel()
		require.NoError(t, s.Signal(syscall.SIGTERM))
		require.NoError(t, <-errc)
		require.Equal(t, 128+15, s.ExitCode())
		fin := rec.finished(t)
		require.Nil(t, fin.ExitCode)
		require.Equal(t, "SIGTERM", fin.Signal)
		require.Equal(t, []string{"got SIGTERM"}, texts(rec.lines(t), "stderr"))
		require.ErrorIs(t, s.Signal(syscall.SIGTERM), os.ErrProcessDone)
	})
	t.Run("handles SIGINT", func(t *testing.T) {
		t.Parallel()
		s, rec, errc, cancel := startWaiting(t, "exit", nil)
		defer cancel()
		require.NoError(t, s.Signal(os.Interrupt))
		require.NoError(t, <-errc)
		require.Equal(t, 42, s.ExitCode())
		require.Equal(t, []string{"got SIGINT"}, texts(rec.lines(t), "stderr"))
	})
	t.Run("SIGKILL when a forwarded SIGTERM is ignored", func(t *testing.T) {
		t.Parallel()
		s, rec, errc, cancel := startWaiting(t, "ignore", func(c *Config) { c.KillGrace = 200 * time.Millisecond })
		defer cancel()
		require.NoError(t, s.Signal(syscall.SIGTERM))
		require.NoError(t, <-errc) // the context was never cancelled
		require.Equal(t, 128+9, s.ExitCode())
		require.Equal(t, "SIGKILL", rec.finished(t).Signal)
	})
}

func TestCancelStopsChild(t *testing.T) {
	t.Parallel()
	t.Run("SIGTERM", func(t *testing.T) {
		t.Parallel()
		s, rec, errc, cancel := startWaiting(t, "die", nil)
		cancel()
		require.NoError(t, <-errc)
		require.Equal(t, 128+15, s.ExitCode())
		// The last lines and Finished are still emitted after cancel.
		require.Equal(t, []string{"got SIGTERM"}, texts(rec.lines(t), "stderr"))
		require.Equal(t, "SIGTERM", rec.finished(t).Signal)
	})
	t.Run("SIGKILL after grace", func(t *testing.T) {
		t.Parallel()
		s, rec, errc, cancel := startWaiting(t, "ignore", func(c *Config) { c.KillGrace = 100 * time.Millisecond })
		cancel()
		require.NoError(t, <-errc)
		require.Equal(t, 128+9, s.ExitCode())
		require.Equal(t, "SIGKILL", rec.finished(t).Signal)
	})
}

func TestMissingExecutable(t *testing.T) {
	t.Parallel()
	opt := Options{Command: []string{"gttsplit-no-such-command", "-m", "x"}, BaseEnv: []string{"PATH=" + t.TempDir()}}
	s, err := New(DefaultConfig(), opt, sources.Settings{})
	require.NoError(t, err)
	rec := &recorder{}
	err = s.Run(t.Context(), rec.emit)
	require.ErrorIs(t, err, ErrCannotRun)
	require.EqualError(t, err, `cannot run "gttsplit-no-such-command": executable file not found in $PATH`)
	require.Equal(t, 127, s.ExitCode())
	require.Empty(t, rec.records())
	_, err = s.WaitPID(t.Context())
	require.ErrorIs(t, err, ErrNotStarted)
	require.ErrorIs(t, s.Signal(syscall.SIGTERM), ErrNotStarted)
	require.ErrorIs(t, s.Run(t.Context(), rec.emit), ErrAlreadyRun)
}

func TestCancelledBeforeStart(t *testing.T) {
	t.Parallel()
	c := newChild(t, "pid")
	s := c.source(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rec := &recorder{}
	require.NoError(t, s.Run(ctx, rec.emit))
	require.Empty(t, rec.records())
	require.Equal(t, -1, s.ExitCode())
	_, err := s.WaitPID(t.Context())
	require.ErrorIs(t, err, ErrNotStarted)
}

func TestNotExecutable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "script")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"), 0o644))
	s, err := New(DefaultConfig(), Options{Command: []string{path}}, sources.Settings{})
	require.NoError(t, err)
	err = s.Run(t.Context(), (&recorder{}).emit)
	require.ErrorIs(t, err, ErrCannotRun)
	require.ErrorIs(t, err, os.ErrPermission)
	require.Equal(t, 127, s.ExitCode())
}

// A downstream that takes nothing until the child has written everything
// must not hold the child back: output passes through in full and the lines
// beyond the buffer are counted as dropped.
func TestSlowDownstreamNeverBlocksPassthrough(t *testing.T) {
	t.Parallel()
	const n = 5000
	var want bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&want, "flood line %d of %d\n", i, n)
	}
	c := newChild(t, fmt.Sprintf("flood=%d", n))
	c.stdout = newSyncBuffer(fmt.Sprintf("flood line %d of %d\n", n, n))
	c.opt.Stdout = c.stdout
	c.opt.BufferBytes = 8 << 10
	c.opt.MaxLineBytes = 1 << 10
	c.batch.MaxLines = 64
	s := c.source(t)
	rec := &recorder{before: c.stdout.seen}
	require.NoError(t, s.Run(t.Context(), rec.emit))

	require.Equal(t, want.Bytes(), c.stdout.Bytes())
	ls := rec.lines(t)
	require.NotZero(t, s.Dropped())
	require.Equal(t, uint64(n), uint64(len(ls))+s.Dropped())
	var prev uint64
	for _, l := range ls {
		require.Greater(t, l.Seq, prev)
		require.Equal(t, fmt.Sprintf("flood line %d of %d", l.Seq, n), l.Text, "a line keeps its seq when others are dropped")
		prev = l.Seq
	}
}

// A downstream that fails stops capture but not the child.
func TestDownstreamFailureLetsChildFinish(t *testing.T) {
	t.Parallel()
	c := newChild(t, "flood=2000")
	s := c.source(t)
	boom := errors.New("pipeline closed")
	var calls int
	emit := func(_ context.Context, r sources.Record) error {
		calls++
		if r.Lines != nil {
			return boom
		}
		return nil
	}
	err := s.Run(t.Context(), emit)
	require.ErrorIs(t, err, boom)
	require.Equal(t, 0, s.ExitCode())
	require.Len(t, splitLines(c.stdout.Bytes()), 2000)
	require.Equal(t, 2, calls, "Started, then the refused batch")
	require.NotZero(t, s.Dropped())
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	require.True(t, cfg.AddVerbose)
	require.True(t, cfg.SetTraceEnv)
	require.NoError(t, cfg.Validate())
	cfg.KillGrace = -time.Second
	cfg.RedactFlags = "(token"
	err := cfg.Validate()
	require.ErrorContains(t, err, "kill_grace: must be a positive duration, got -1s")
	require.ErrorContains(t, err, "redact_flags: does not compile")
	_, err = New(cfg, Options{Command: []string{"true"}}, sources.Settings{})
	require.Error(t, err)
	_, err = New(DefaultConfig(), Options{}, sources.Settings{})
	require.ErrorContains(t, err, "command: must not be empty")
	_, err = New(DefaultConfig(), Options{Command: []string{"true"}, BufferBytes: 10}, sources.Settings{})
	require.ErrorContains(t, err, "buffer_bytes: must hold at least one line")
	src, err := New(DefaultConfig(), Options{Command: []string{"true"}}, sources.Settings{})
	require.NoError(t, err)
	require.IsType(t, &Source{}, src)
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	require.Equal(t, `llama-cli -m /m/model.gguf -p 'hello world' '' 'it'\''s' -v`,
		shellQuote([]string{"llama-cli", "-m", "/m/model.gguf", "-p", "hello world", "", "it's", "-v"}))
}
