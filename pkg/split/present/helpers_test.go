package present

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// foldFiles folds a saved log and its samples file ("" for none), as
// `aggregator parse` does.
func foldFiles(t testing.TB, logPath, samplesPath string) split.Report {
	t.Helper()
	f := split.NewFold(split.Options{})
	lf, err := os.Open(logPath)
	require.NoError(t, err)
	defer lf.Close()
	_, err = f.ReadLog(lf, "log")
	require.NoError(t, err)
	if samplesPath != "" {
		b, err := os.ReadFile(samplesPath)
		require.NoError(t, err)
		ss, st, err := split.ParseSamples(b)
		require.NoError(t, err)
		f.NoteSkippedSampleLines(st.SkippedLines)
		for _, s := range ss {
			f.AddSample(s)
		}
	}
	return f.Report()
}

// foldRun folds testdata/runs/<name>/{split.log,gtt.txt}.
func foldRun(t testing.TB, name string) split.Report {
	t.Helper()
	dir := filepath.Join("..", "..", "..", "testdata", "runs", name)
	return foldFiles(t, filepath.Join(dir, "split.log"), filepath.Join(dir, "gtt.txt"))
}

func devicesDir(name string) string {
	return filepath.Join("..", "..", "..", "testdata", "devices", name)
}

// twoCards folds testdata/devices/2xrocm-pci's log with one of its samples
// files.
func twoCards(t testing.TB, samples string) split.Report {
	t.Helper()
	dir := devicesDir("2xrocm-pci")
	return foldFiles(t, filepath.Join(dir, "split.log"), filepath.Join(dir, samples))
}

func m(v float64) *split.MiB { x := split.MiB(v); return &x }
