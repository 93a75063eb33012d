package sinktest_test

import (
	"context"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/stretchr/testify/require"
)

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	sinktest.Conformance(t, func(t *testing.T) sinks.Sink { return &sinktest.Memory{} })
}

func TestMemoryFailAndBlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var m sinktest.Memory
	m.FailNext(sinktest.ErrInjected, nil)
	require.ErrorIs(t, m.Write(ctx, sinktest.Report("a")), sinktest.ErrInjected)
	require.NoError(t, m.Write(ctx, sinktest.Report("a")))
	r := sinktest.Report("a")
	r.Flags = []string{"x"}
	require.NoError(t, m.Write(ctx, r))
	require.Len(t, m.Reports(), 2)
	require.Equal(t, []string{"x"}, m.Runs()["a"].Flags, "Runs keeps the last report of a run")
	require.Equal(t, 3, m.Attempts())

	ch := make(chan struct{})
	m.Block(ch)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Write(cctx, sinktest.Report("b")) }()
	cancel()
	require.ErrorIs(t, <-done, context.Canceled, "a blocked write honours ctx")
	close(ch)
	require.NoError(t, m.Write(ctx, sinktest.Report("b")))
	require.False(t, m.Closed())
	require.NoError(t, m.Close(ctx))
	require.True(t, m.Closed())
}
