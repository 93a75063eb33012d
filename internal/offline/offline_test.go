package offline

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/split"
)

func TestParseRunWithFileAndSnapshotSamples(t *testing.T) {
	t.Parallel()
	td := filepath.Join("..", "..", "testdata")
	f := split.NewFold(split.Options{})
	require.NoError(t, Parse(f, filepath.Join(td, "runs", "4b", "split.log"),
		[]string{filepath.Join(td, "runs", "4b", "gtt.txt"), filepath.Join(td, "fdinfo", "4b-peak")}))
	r := f.Report()
	require.InDelta(t, 3925.0, float64(*r.PeakGTTMiB), 1e-9)
	require.InDelta(t, 2375.91, float64(*r.ModelGTTMiB), 1e-9)
	require.Equal(t, 17, r.Detail.Samples, "16 ticks from gtt.txt and one snapshot, numbered apart")
}

func TestParseInputErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := split.NewFold(split.Options{})
	require.ErrorIs(t, Parse(f, filepath.Join(dir, "missing.log"), nil), ErrInput)
	require.ErrorIs(t, Parse(f, dir, nil), ErrInput, "a directory is not a log")
	log := filepath.Join(dir, "a.log")
	require.NoError(t, os.WriteFile(log, []byte("x\n"), 0o644))
	require.ErrorIs(t, Parse(f, log, []string{filepath.Join(dir, "nope")}), ErrInput)
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.Mkdir(empty, 0o755))
	require.ErrorIs(t, Parse(f, log, []string{empty}), ErrInput, "a snapshot dir without fd files")
	bad := filepath.Join(dir, "bad.txt")
	require.NoError(t, os.WriteFile(bad, []byte("not a samples file\n"), 0o644))
	require.ErrorIs(t, Parse(f, log, []string{bad}), ErrInput)
}
