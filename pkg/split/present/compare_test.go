package present

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// The 4B run and its offload-off control (testdata/controls/4b-ngl0): the
// difference of the peaks, 3925.0 − 753.3 = 3171.7 MiB, is the model buffer
// 2375.9 + the packed copy 795.8.
func TestCompareReferenceControl(t *testing.T) {
	on := foldRun(t, "4b")
	off := foldRun(t, filepath.Join("..", "controls", "4b-ngl0"))
	c := Compare(on, off, "4b", "4b-ngl0")
	require.Equal(t, VerdictResidentTwice, c.Verdict)
	require.Equal(t, "weights resident twice: the difference of the peaks is 3171.7 MiB ≈ model buffer + packed copy (2375.9 + 795.8 = 3171.7 MiB)", c.Words)
	require.Equal(t, "a", c.Offload)
	require.Equal(t, "offload", c.A.Role)
	require.Equal(t, "control", c.B.Role)
	require.InDelta(t, 3171.70, float64(*c.PeakDiffMiB), 0.01)

	// The order of the inputs does not matter to the verdict.
	r := Compare(off, on, "4b-ngl0", "4b")
	require.Equal(t, VerdictResidentTwice, r.Verdict)
	require.Equal(t, "b", r.Offload)
	require.InDelta(t, -3171.70, float64(*r.Rows[0].Diff), 0.01)

	txt := CompareText(c)
	require.Contains(t, txt, "process GTT at peak (fdinfo)   3925.0    753.3    +3171.7")
	require.Contains(t, txt, "verdict: weights resident twice")
	md := CompareMarkdown(c)
	require.Contains(t, md, "| process GTT at peak (fdinfo) | 3925.0 | 753.3 | +3171.7 |")
	b, err := CompareJSON(c)
	require.NoError(t, err)
	var back map[string]any
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, "resident_twice", back["verdict"])
	require.Equal(t, CompareSchema, back["schema"])
}

func TestCompareVerdicts(t *testing.T) {
	rep := func(peak, model, packed *split.MiB, cmd string) split.Report {
		return split.Report{PeakGTTMiB: peak, ModelGTTMiB: model, PackedMiB: packed, Run: split.RunMeta{Command: cmd}}
	}
	off := rep(m(700), m(0), nil, "llama-cli -m x.gguf -ngl 0")
	for _, tc := range []struct {
		name    string
		a, b    split.Report
		verdict string
		words   string
	}{
		{"once", rep(m(3100), m(2400), m(800), "llama-cli -m x.gguf -ngl 99"), off, VerdictResidentOnce,
			"resident once: the difference of the peaks is 2400.0 MiB ≈ model buffer (2400.0 MiB), not model buffer + packed copy (3200.0 MiB)"},
		{"once, no packed copy", rep(m(3110), m(2400), m(0), ""), off, VerdictResidentOnce, "resident once: the difference of the peaks is 2410.0 MiB ≈ model buffer (2400.0 MiB); the packed copy (0.0 MiB) is within the tolerance"},
		{"once, no trace", rep(m(3100), m(2400), nil, ""), off, VerdictResidentOnce, "resident once: the difference of the peaks is 2400.0 MiB ≈ model buffer (2400.0 MiB); A has no host-weight trace, so a packed copy is not known"},
		{"no trace and more than the model", rep(m(3900), m(2400), nil, ""), off, VerdictCannotTell,
			"cannot tell: the difference of the peaks is 3200.0 MiB, not ≈ the model buffer (2400.0 MiB ± 120), and A has no host-weight trace (packed copy unknown)"},
		{"neither", rep(m(5000), m(2400), m(800), ""), off, VerdictCannotTell,
			"cannot tell: the difference of the peaks is 4300.0 MiB, neither ≈ the model buffer (2400.0 MiB) nor ≈ model buffer + packed copy (3200.0 MiB), within ± 120 MiB; B is the control"},
		{"no peak", rep(nil, m(2400), m(800), ""), off, VerdictCannotTell, "cannot tell: A has no process peak (no fdinfo samples with an amdgpu client)"},
		{"no model load", rep(m(3000), nil, nil, ""), off, VerdictCannotTell, "cannot tell: A has no model buffer line in its log, so its model buffer is unknown"},
		{"both offloaded", rep(m(3000), m(2400), nil, ""), rep(m(3000), m(2400), nil, ""), VerdictCannotTell,
			"cannot tell: both runs hold a model buffer in GTT (2400.0 and 2400.0 MiB): the control must run with offload off (-ngl 0)"},
		{"neither offloaded", rep(m(700), m(0), nil, ""), off, VerdictCannotTell,
			"cannot tell: neither run holds its model buffer in GTT: compare a run with offload (-ngl 99) with its control (-ngl 0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Compare(tc.a, tc.b, "a", "b")
			require.Equal(t, tc.verdict, c.Verdict)
			require.Equal(t, tc.words, c.Words)
		})
	}
	c := Compare(rep(m(3100), m(2400), m(800), "llama-cli -m x.gguf -ngl 99 -c 512"), off, "a", "b")
	require.Len(t, c.Notes, 1)
	require.True(t, strings.Contains(c.Notes[0], "differ beyond the offload setting"), c.Notes[0])
}

func TestStripOffload(t *testing.T) {
	require.Equal(t, "llama-cli -m x.gguf -c 256", stripOffload("llama-cli -m x.gguf -ngl 99 -c 256"))
	require.Equal(t, "llama-cli -m x.gguf", stripOffload("llama-cli --n-gpu-layers=0 -m x.gguf"))
	require.Equal(t, "llama-cli -m x.gguf", stripOffload("llama-cli --gpu-layers 12 -m x.gguf"))
}

// Two runs on the same devices are compared device by device; runs on
// other devices are compared as totals, and say so.
func TestCompareDevices(t *testing.T) {
	t.Parallel()
	a, b := twoCards(t, "gtt.txt"), twoCards(t, "gtt-over.txt")
	c := Compare(a, b, "a", "b")
	require.Len(t, c.Devices, 2)
	require.Equal(t, "ROCm0", c.Devices[0].Name)
	rows := map[string]CompareRow{}
	for _, r := range c.Devices[0].Rows {
		rows[r.Key] = r
	}
	require.InDelta(t, 442.0, float64(*rows["card_peak_mib"].Diff), 1e-9, "10842 − 10400")
	require.InDelta(t, 442.0, float64(*rows["not_attributed_mib"].Diff), 1e-6, "316.52 − (−125.48)")
	require.InDelta(t, 0.0, float64(*rows["model_mib"].Diff), 1e-9)
	txt := CompareText(c)
	require.Contains(t, txt, "ROCm0    its card's memory at peak  10842.0  10400.0     +442.0")
	require.Contains(t, strings.Join(c.Notes, "\n"), "keeps device buffers in the VRAM of a discrete card (0000:03:00.0)")
	md := CompareMarkdown(c)
	require.Contains(t, md, "| ROCm1 | not attributed on its card | 255.2 | 255.2 | +0.0 |")

	other := Compare(a, foldRun(t, "4b"), "a", "4b")
	require.Empty(t, other.Devices)
	require.Contains(t, strings.Join(other.Notes, "\n"), "the runs' devices differ (A: ROCm0, ROCm1; B: none): compared as totals only")
}
