package sinktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/stretchr/testify/require"
)

// HostileIDs are run ids a sink must survive without escaping its
// directory, crashing or mangling another run's output: traversal,
// separators, NUL, dot-only, empty, over-long and non-ASCII ids.
var HostileIDs = []string{
	"../../etc/x",
	"..",
	".",
	"...",
	"",
	"a/b/c",
	`a\b`,
	"/abs/path",
	"nul\x00byte",
	"-->",
	"run\nnewline",
	"ünïcödé",
	strings.Repeat("long", 200),
}

// Conformance runs the suite every sink passes. newSink returns a new,
// open sink for one subtest, which may run in parallel with the others;
// newSink registers its own cleanup (the suite closes each sink it uses).
// The suite checks that writes succeed, that rewriting the same split is
// accepted, that Close is idempotent and safe without any Write, that a
// cancelled context is honoured, that Write after Close fails with
// sinks.ErrClosed, that concurrent writes succeed, and that hostile run ids
// are written or rejected with a permanent error, never a crash.
func Conformance(t *testing.T, newSink func(t *testing.T) sinks.Sink) {
	t.Helper()
	ctx := context.Background()

	t.Run("CloseWithoutWrite", func(t *testing.T) {
		t.Parallel()
		s := newSink(t)
		require.NoError(t, s.Close(ctx))
		require.NoError(t, s.Close(ctx), "second Close")
	})

	t.Run("WriteRewriteClose", func(t *testing.T) {
		t.Parallel()
		s := newSink(t)
		r := Report("conf-run-1")
		require.NoError(t, s.Write(ctx, r))
		require.NoError(t, s.Write(ctx, r), "rewrite of the same split")
		changed := r
		changed.Flags = []string{"fit_probe"}
		require.NoError(t, s.Write(ctx, changed), "newer split of the same run")
		require.NoError(t, s.Write(ctx, changed), "rewrite of the newer split")
		require.NoError(t, s.Write(ctx, Report("conf-run-2")))
		require.NoError(t, s.Close(ctx))
		require.NoError(t, s.Close(ctx), "second Close")
	})

	t.Run("WriteAfterClose", func(t *testing.T) {
		t.Parallel()
		s := newSink(t)
		require.NoError(t, s.Write(ctx, Report("conf-run-1")))
		require.NoError(t, s.Close(ctx))
		err := s.Write(ctx, Report("conf-run-2"))
		require.ErrorIs(t, err, sinks.ErrClosed)
		require.True(t, sinks.IsPermanent(err), "write after close is permanent")
	})

	t.Run("CancelledContext", func(t *testing.T) {
		t.Parallel()
		s := newSink(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err := s.Write(cctx, Report("conf-run-1"))
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, sinks.IsPermanent(err), "a cancelled write is worth retrying")
		require.NoError(t, s.Write(ctx, Report("conf-run-1")), "usable after a cancelled write")
		if err := s.Close(cctx); err != nil {
			require.ErrorIs(t, err, context.Canceled)
		}
		require.ErrorIs(t, s.Write(ctx, Report("conf-run-2")), sinks.ErrClosed, "closed even when Close's ctx was done")
		require.NoError(t, s.Close(ctx), "Close after a cancelled Close")
	})

	t.Run("ConcurrentWrites", func(t *testing.T) {
		t.Parallel()
		s := newSink(t)
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		for g := range 4 {
			wg.Go(func() {
				for i := range 8 {
					r := Report(fmt.Sprintf("conf-run-%d", i%4))
					r.Run.Lane = fmt.Sprintf("lane-%d", g%2)
					if err := s.Write(ctx, r); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.NoError(t, s.Close(ctx))
	})

	t.Run("HostileIDs", func(t *testing.T) {
		t.Parallel()
		s := newSink(t)
		for _, id := range HostileIDs {
			for _, r := range hostile(id) {
				err := s.Write(ctx, r)
				if err != nil {
					require.True(t, sinks.IsPermanent(err), "id %q: a rejected id must be a permanent error, got %v", id, err)
				}
			}
		}
		require.NoError(t, s.Close(ctx))
	})
}

// hostile returns reports that carry id as run id, host and lane.
func hostile(id string) []split.Report {
	a := Report(id)
	b := Report("conf-host")
	b.Run.Host = id
	c := Report("conf-lane")
	c.Run.Lane = id
	return []split.Report{a, b, c}
}

// ErrInjected is a transient error for FailNext.
var ErrInjected = errors.New("sinktest: injected failure")
