package split

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// realExpected is testdata/logs/real/<case>/expected.json: the figures
// worked out by hand from docs/accounting.md before the code ran on the
// log. A null figure must be null; an absent optional field is not checked.
type realExpected struct {
	ModelGTT      *float64 `json:"model_gtt_mib"`
	ModelHost     *float64 `json:"model_host_mib"`
	State         *float64 `json:"state_mib"`
	Compute       *float64 `json:"compute_mib"`
	KV            *float64 `json:"kv_mib"`
	RS            *float64 `json:"rs_mib"`
	HostKV        *float64 `json:"host_kv_mib"`
	HostCompute   *float64 `json:"host_compute_mib"`
	ProbeLoads    *int     `json:"probe_loads"`
	RemoteBuffers *int     `json:"remote_buffers"`
	FailedBuffers *int     `json:"failed_buffers"`
	Build         string   `json:"llama_build"`
	Flags         []string `json:"flags"`
	NotFlags      []string `json:"not_flags"`
	NoChecks      []string `json:"no_checks"`
	Warnings      []string `json:"warnings_contain"`
	FuncsClean    bool     `json:"buffer_funcs_clean"`
	Models        []struct {
		Role     string   `json:"role"`
		Live     bool     `json:"live"`
		ModelGTT *float64 `json:"model_gtt_mib"`
	} `json:"models"`
	// Devices is the report's device table, row by row ([]: none shown);
	// absent: not checked.
	Devices *[]struct {
		Name        string   `json:"name"`
		Kind        string   `json:"kind"`
		Model       *float64 `json:"model_mib"`
		State       *float64 `json:"state_mib"`
		Compute     *float64 `json:"compute_mib"`
		Spans       []string `json:"spans"`
		Description string   `json:"description"`
	} `json:"devices"`
}

func requireMiB(t *testing.T, want *float64, got *MiB, what string) {
	t.Helper()
	if want == nil {
		require.Nil(t, got, "%s must be null", what)
		return
	}
	require.NotNil(t, got, "%s must be %.2f, is null", what, *want)
	require.InDelta(t, *want, round2(float64(*got)), 1e-9, what)
}

// TestRealLogs folds every case of testdata/logs/real (public llama.cpp
// logs, and a few made-up ones that say so in their README) and checks the
// figures of its expected.json.
func TestRealLogs(t *testing.T) {
	t.Parallel()
	dirs, err := filepath.Glob(filepath.Join("..", "..", "testdata", "logs", "real", "*"))
	require.NoError(t, err)
	n := 0
	for _, dir := range dirs {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			continue
		}
		n++
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(filepath.Join(dir, "expected.json"))
			require.NoError(t, err)
			var w realExpected
			require.NoError(t, json.Unmarshal(b, &w))
			readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
			require.NoError(t, err)
			require.Contains(t, string(readme), "Source:", "every case names its source")
			lf, err := os.Open(filepath.Join(dir, "llama.log"))
			require.NoError(t, err)
			defer lf.Close()
			f := NewFold(Options{})
			_, err = f.ReadLog(lf, "log")
			require.NoError(t, err)
			r := f.Report()

			requireMiB(t, w.ModelGTT, r.ModelGTTMiB, "model_gtt_mib")
			requireMiB(t, w.ModelHost, r.ModelHostMiB, "model_host_mib")
			requireMiB(t, w.State, r.StateMiB, "state_mib")
			requireMiB(t, w.Compute, r.ComputeMiB, "compute_mib")
			if w.KV != nil {
				requireMiB(t, w.KV, r.Detail.KVMiB, "kv_mib")
			}
			if w.RS != nil {
				requireMiB(t, w.RS, r.Detail.RSMiB, "rs_mib")
			}
			if w.HostKV != nil {
				require.InDelta(t, *w.HostKV, round2(float64(r.Detail.HostKVMiB)), 1e-9, "host_kv_mib")
			}
			if w.HostCompute != nil {
				require.InDelta(t, *w.HostCompute, round2(float64(r.Detail.HostComputeMiB)), 1e-9, "host_compute_mib")
			}
			if w.ProbeLoads != nil {
				require.Equal(t, *w.ProbeLoads, r.Detail.ProbeLoads, "probe_loads")
			}
			if w.RemoteBuffers != nil {
				require.Len(t, r.Detail.Remote, *w.RemoteBuffers, "remote buffers")
			}
			if w.FailedBuffers != nil {
				require.Len(t, r.Detail.Failed, *w.FailedBuffers, "failed buffers")
			}
			if w.Build != "" {
				require.Contains(t, r.Provenance.LlamaBuild, w.Build)
			}
			for _, fl := range w.Flags {
				require.Contains(t, r.Flags, fl)
			}
			for _, fl := range w.NotFlags {
				require.NotContains(t, r.Flags, fl)
			}
			for _, name := range w.NoChecks {
				for _, c := range r.Checks {
					require.NotEqual(t, name, c.Name, "check %s must not be made: %s", name, c.Detail)
				}
			}
			warnings := strings.Join(r.Detail.Warnings, "\n")
			for _, s := range w.Warnings {
				require.Contains(t, warnings, s)
			}
			if w.FuncsClean {
				for _, bl := range r.Detail.Buffers {
					require.NotContains(t, bl.Func, "[", "line %d", bl.Line)
				}
			}
			if w.Devices != nil {
				require.Len(t, r.Devices, len(*w.Devices), "devices")
				for i, d := range *w.Devices {
					g := r.Devices[i]
					require.Equal(t, d.Name, g.Name, "devices[%d].name", i)
					require.Equal(t, d.Kind, g.Kind, "devices[%d].kind", i)
					requireMiB(t, d.Model, g.ModelMiB, d.Name+" model_mib")
					requireMiB(t, d.State, g.StateMiB, d.Name+" state_mib")
					requireMiB(t, d.Compute, g.ComputeMiB, d.Name+" compute_mib")
					require.Equal(t, d.Spans, g.Spans, "devices[%d].spans", i)
					require.Equal(t, d.Description, g.Description, "devices[%d].description", i)
				}
			}
			require.Len(t, r.Models, len(w.Models), "models")
			for i, m := range w.Models {
				require.Equal(t, m.Role, r.Models[i].Role, "models[%d].role", i)
				require.Equal(t, m.Live, r.Models[i].Live, "models[%d].live", i)
				requireMiB(t, m.ModelGTT, r.Models[i].ModelGTTMiB, "models[].model_gtt_mib")
			}
		})
	}
	require.GreaterOrEqual(t, n, 25, "the corpus has at least 25 cases")
}
