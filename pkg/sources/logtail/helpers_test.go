package logtail_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/sources/logtail"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// patience bounds every wait; generous for a loaded machine.
const patience = 30 * time.Second

// sink records what a source emits. ack decides, by the record's index,
// whether to acknowledge it at once; nil acknowledges everything.
type sink struct {
	mu   sync.Mutex
	recs []sources.Record
	ack  func(i int) bool
	err  error // returned by emit when set
}

func (s *sink) emit(_ context.Context, r sources.Record) error {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return s.err
	}
	i := len(s.recs)
	s.recs = append(s.recs, r)
	ack := s.ack == nil || s.ack(i)
	s.mu.Unlock()
	if ack && r.Ack != nil {
		r.Ack()
	}
	return nil
}

func (s *sink) records() []sources.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sources.Record(nil), s.recs...)
}

func (s *sink) lines() []split.Line {
	var out []split.Line
	for _, r := range s.records() {
		out = append(out, r.Lines...)
	}
	return out
}

func texts(ls []split.Line) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Text
	}
	return out
}

// waitLines waits until the sink holds at least n lines.
func (s *sink) waitLines(t *testing.T, n int) {
	t.Helper()
	waitFor(t, func() bool { return len(s.lines()) >= n }, fmt.Sprintf("%d lines", n))
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// testConfig is a follower's config and the batching its Settings give.
type testConfig struct {
	logtail.Config
	Batch sources.BatchConfig
}

// config returns a fast-polling config following path, with its own Done.
func config(t *testing.T, path, stateDir string) (*testConfig, chan struct{}) {
	t.Helper()
	cfg := &testConfig{Config: logtail.DefaultConfig(), Batch: sources.DefaultBatchConfig()}
	cfg.Path = path
	cfg.StateDir = stateDir
	cfg.RunID = "run-1"
	cfg.PollInterval = 5 * time.Millisecond
	cfg.Batch.MaxDelay = 5 * time.Millisecond
	cfg.AckWait = patience
	done := make(chan struct{})
	cfg.Done = done
	return cfg, done
}

// running is one Run call in its own goroutine.
type running struct {
	cancel context.CancelFunc
	errc   chan error
}

func start(t *testing.T, cfg *testConfig, s *sink) *running {
	t.Helper()
	src, err := logtail.New(cfg.Config, sources.Settings{Logger: zerolog.New(zerolog.NewTestWriter(t)), Batch: cfg.Batch})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, errc: make(chan error, 1)}
	go func() { r.errc <- src.Run(ctx, s.emit) }()
	t.Cleanup(func() {
		cancel()
		<-r.errc // wait puts the result back, so this never blocks for long
	})
	return r
}

// wait waits for Run to return by itself (after Done) and returns its error.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.errc:
		r.errc <- err // keep it for Cleanup
		return err
	case <-time.After(patience):
		t.Fatal("Run did not return")
		return nil
	}
}

// stop cancels Run and returns its error.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	return r.wait(t)
}

// appender opens path for appending, as a logger does.
func appender(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func write(t *testing.T, f *os.File, s string) {
	t.Helper()
	_, err := f.WriteString(s)
	require.NoError(t, err)
}

// numbered returns "<prefix>-<i>" for i in [from, to).
func numbered(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s-%04d", prefix, i))
	}
	return out
}

func joinLines(ls []string) string {
	var b []byte
	for _, l := range ls {
		b = append(b, l...)
		b = append(b, '\n')
	}
	return string(b)
}

// requireSeqs checks that lines are numbered first, first+1, ... and come
// from the "log" stream with a capture time.
func requireSeqs(t *testing.T, ls []split.Line, first uint64) {
	t.Helper()
	for i, l := range ls {
		require.Equal(t, first+uint64(i), l.Seq, "line %d %q", i, l.Text)
		require.Equal(t, "log", l.Stream)
		require.False(t, l.Time.IsZero())
	}
}
