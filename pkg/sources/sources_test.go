package sources

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRegistryRejectsDuplicateTypes(t *testing.T) {
	t.Parallel()
	f := Factory{Type: "x", DefaultConfig: func() any { return nil }, New: func(any, Settings) (Source, error) { return nil, nil }}
	r, err := NewRegistry(f, Factory{Type: "y"})
	require.NoError(t, err)
	require.Len(t, r, 2)
	_, err = NewRegistry(f, f)
	require.ErrorIs(t, err, ErrDuplicateType)
	require.ErrorContains(t, err, `"x"`)
}

// runOnce is the smallest Source: it emits one record and ends.
type runOnce struct{ r Record }

func (s runOnce) Run(ctx context.Context, emit Emit) error { return emit(ctx, s.r) }

var _ Source = runOnce{}

func TestEmitErrorsReachTheSource(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	err := runOnce{}.Run(t.Context(), func(context.Context, Record) error { return boom })
	require.ErrorIs(t, err, boom)
}
