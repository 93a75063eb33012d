package dirlock

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAcquireIsExclusive(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "store")
	l, err := Acquire(dir)
	require.NoError(t, err)
	_, err = Acquire(dir)
	require.ErrorIs(t, err, ErrLocked)
	require.ErrorContains(t, err, fmt.Sprintf("(pid %d)", os.Getpid()))
	require.ErrorContains(t, err, dir)
	l.Release()
	l.Release() // idempotent
	l2, err := Acquire(dir)
	require.NoError(t, err, "released")
	l2.Release()
}
