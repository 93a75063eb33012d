package gate

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/stretchr/testify/require"
)

func TestCloseWithoutCalls(t *testing.T) {
	t.Parallel()
	var released atomic.Int32
	boom := errors.New("boom")
	g := New(func() error { released.Add(1); return boom })
	require.ErrorIs(t, g.Close(context.Background()), boom, "the first Close returns release's error")
	require.NoError(t, g.Close(context.Background()))
	require.Equal(t, int32(1), released.Load())
	require.ErrorIs(t, g.Enter(), sinks.ErrClosed)
}

func TestCloseWaitsForCallInFlight(t *testing.T) {
	t.Parallel()
	var released atomic.Int32
	g := New(func() error { released.Add(1); return nil })
	require.NoError(t, g.Enter())

	// A done ctx: Close gives up waiting, release waits for the call.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, g.Close(ctx), context.Canceled)
	require.Equal(t, int32(0), released.Load(), "not released under a call in flight")
	require.ErrorIs(t, g.Enter(), sinks.ErrClosed)

	done := make(chan error, 1)
	go func() { done <- g.Close(context.Background()) }()
	g.Exit()
	require.NoError(t, <-done)
	require.Equal(t, int32(1), released.Load(), "released by the last call out")
}

func TestNilRelease(t *testing.T) {
	t.Parallel()
	g := New(nil)
	require.NoError(t, g.Enter())
	g.Exit()
	require.NoError(t, g.Close(context.Background()))
}
