package split

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEraLogs checks the small logs of testdata/logs against the answer key
// in testdata/README.md §3: one llama.cpp era or trap each.
func TestEraLogs(t *testing.T) {
	t.Parallel()
	type want struct {
		model, host, state, compute float64 // -1: null
		kv, rs                      float64 // -1: not checked
		build                       string
		flags                       []string
		notFlags                    []string
		unknown                     int
	}
	cases := map[string]want{
		"b4000_legacy": {model: 4403.49, host: 281.81, state: 512, compute: 312.50, kv: 512, rs: 0, build: "b4000 (e6e7c75d)",
			flags: []string{FlagNotVerbose}},
		"b5300_recurrent": {model: 1402.57, host: 104.34, state: 14.25, compute: 128.22, kv: 0, rs: 14.25, build: "b5300",
			notFlags: []string{FlagNotVerbose, FlagMultipleModels, FlagMultipleContexts, FlagFitProbe}},
		"router": {model: 1136.91, host: 136.00, state: 384.62, compute: 337.03, kv: -1, rs: -1, build: "b9300 (c41d7a5b2)",
			flags: []string{FlagNotVerbose}, notFlags: []string{FlagNotModelLoad}},
		"no_model_load": {model: -1, host: -1, state: -1, compute: -1, kv: -1, rs: -1, build: "b7561 (0b3e1a7f2)",
			flags: []string{FlagNotModelLoad, FlagNotVerbose}, notFlags: []string{FlagFitProbe}},
		"b9200_not_verbose": {model: -1, host: -1, state: -1, compute: -1, kv: -1, rs: -1, build: "",
			flags: []string{FlagNotModelLoad, FlagNotVerbose}},
		// Both loads are live (main + draft): summed, each listed.
		"two_models": {model: 8649.17, host: 555.60, state: 1632.00, compute: 1039.18, kv: 1632.00, rs: 0, build: "b5000 (4ad2436f)",
			flags: []string{FlagMultipleModels, FlagNotVerbose}, notFlags: []string{FlagMultipleContexts}},
		// The DSV4 state is state, outside the KV/RS rule (other_state_mib).
		"unknown_kind": {model: 3012.44, host: 210, state: 182.75, compute: 434.51, kv: 172, rs: 0, build: "b10470 (b2f0c6a41)",
			flags: []string{FlagUnknownBuffer, FlagNotVerbose}, notFlags: []string{FlagFitProbe}, unknown: 1},
	}
	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			f := NewFold(Options{})
			lf, err := os.Open(filepath.Join("..", "..", "testdata", "logs", name+".log"))
			require.NoError(t, err)
			defer lf.Close()
			_, err = f.ReadLog(lf, "log")
			require.NoError(t, err)
			r := f.Report()
			require.InDelta(t, w.model, val(r.ModelGTTMiB), 1e-9, "model")
			require.InDelta(t, w.host, val(r.ModelHostMiB), 1e-9, "host")
			require.InDelta(t, w.state, val(r.StateMiB), 1e-9, "state")
			require.InDelta(t, w.compute, val(r.ComputeMiB), 1e-9, "compute")
			if w.kv >= 0 {
				require.InDelta(t, w.kv, val(r.Detail.KVMiB), 1e-9, "kv")
				require.InDelta(t, w.rs, val(r.Detail.RSMiB), 1e-9, "rs")
			}
			require.Contains(t, r.Provenance.LlamaBuild, w.build)
			if w.build == "" {
				require.Empty(t, r.Provenance.LlamaBuild)
			}
			for _, fl := range w.flags {
				require.Contains(t, r.Flags, fl)
			}
			for _, fl := range w.notFlags {
				require.NotContains(t, r.Flags, fl)
			}
			require.Len(t, r.Detail.Unknown, w.unknown)
			require.Nil(t, r.PackedMiB, "no trace in these logs")
			require.Contains(t, r.Flags, FlagNoTrace)
			require.Nil(t, r.PeakGTTMiB)
			require.Equal(t, 0, r.Detail.LinesSkipped, "nothing in these logs is malformed")
		})
	}
}

// TestFDInfoSnapshotDir: one `cp -r /proc/PID/fdinfo` snapshot of the 4B
// peak gives the peak, each client once (counting every fd gives 7848.0).
func TestFDInfoSnapshotDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "..", "testdata", "fdinfo", "4b-peak")
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	s := Sample{Seq: 1, Procs: []ProcFDs{{PID: 48213}}}
	for i, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		s.Procs[0].FDs = append(s.Procs[0].FDs, FDInfo{FD: i, Text: string(b)})
	}
	f := NewFold(Options{})
	f.AddSample(s)
	r := f.Report()
	require.InDelta(t, 3925.0, val(r.PeakGTTMiB), 1e-9)
	require.NotEqual(t, 7848.0, val(r.PeakGTTMiB))
}
