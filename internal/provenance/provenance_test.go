package provenance

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func gitOK(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.email=t@example.invalid", "-c", "user.name=t"}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
}

func TestReadTreeCleanDirtyAndNotGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	t.Parallel()
	dir := t.TempDir()
	_, err := ReadTree(t.Context(), dir)
	require.ErrorIs(t, err, ErrNotGit)

	gitOK(t, dir, "init", "-q")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644))
	gitOK(t, dir, "add", "a")
	gitOK(t, dir, "commit", "-qm", "a")
	tr, err := ReadTree(t.Context(), dir)
	require.NoError(t, err)
	require.Len(t, tr.Commit, 40)
	require.False(t, tr.CommitTime.IsZero(), "the commit's time")
	require.WithinDuration(t, time.Now(), tr.CommitTime, time.Hour)
	require.NotNil(t, tr.Dirty)
	require.False(t, *tr.Dirty)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "b"), []byte("b"), 0o644))
	tr, err = ReadTree(t.Context(), dir)
	require.NoError(t, err)
	require.True(t, *tr.Dirty, "an untracked file makes the tree dirty")
}
