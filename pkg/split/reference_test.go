package split

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// foldRun folds testdata/runs/<name>/{split.log,gtt.txt} with the default
// options, as `aggregator parse` does.
func foldRun(t *testing.T, name string) Report {
	t.Helper()
	dir := filepath.Join("..", "..", "testdata", "runs", name)
	return foldFiles(t, filepath.Join(dir, "split.log"), filepath.Join(dir, "gtt.txt")).Report()
}

// TestReferenceFigures reproduces the README's reference table (the 4B and
// 27B runs) from the fixtures.
func TestReferenceFigures(t *testing.T) {
	t.Parallel()
	type want struct {
		peak, model, packed, state, compute, unattributed, dup float64
		weights                                                int
		host                                                   float64 // -1: none
	}
	cases := map[string]want{
		"4b":  {peak: 3925.0, model: 2375.91, packed: 795.8, weights: 38, state: 36.0, compute: 43.21, unattributed: 674.08, dup: 33.49, host: 304.28},
		"27b": {peak: 20497.0, model: 15718.5, packed: 2631.3, weights: 66, state: 165.6, compute: 72.1, unattributed: 1909.5, dup: 16.74, host: 0},
	}
	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			r := foldRun(t, name)
			require.InDelta(t, w.peak, val(r.PeakGTTMiB), 1e-9, "peak")
			require.InDelta(t, w.model, val(r.ModelGTTMiB), 1e-9, "model")
			require.InDelta(t, w.packed, val(r.PackedMiB), 1e-9, "packed")
			require.Equal(t, w.weights, *r.PackedWeights, "packed weights")
			require.InDelta(t, w.state, val(r.StateMiB), 1e-9, "KV + state")
			require.InDelta(t, w.compute, val(r.ComputeMiB), 1e-9, "compute + output")
			require.InDelta(t, w.unattributed, val(r.UnattributedMiB), 1e-9, "not attributed")
			require.InDelta(t, w.dup, val(r.DuplicatePct), 1e-9, "duplicate %")
			require.InDelta(t, w.host, val(r.ModelHostMiB), 1e-9, "CPU model buffer")
			require.Contains(t, r.Flags, FlagFitProbe)
			require.NotContains(t, r.Flags, FlagNotVerbose)
			require.NotContains(t, r.Flags, FlagNoTrace)
			require.Less(t, val(r.FinalGTTMiB), val(r.PeakGTTMiB), "the fixture settles below its peak")
			// llama.cpp's own table after the real load agrees with the
			// buffer lines; the probe's table (compute 51 MiB in 4B) is not
			// the one compared.
			for _, c := range r.Checks {
				if strings.HasPrefix(c.Name, "breakdown_") || c.Name == "trace_vs_model" || c.Name == "process_vs_card" {
					require.Equal(t, StatusOK, c.Status, "%s: %s", c.Name, c.Detail)
				}
			}
		})
	}
}
