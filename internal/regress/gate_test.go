package regress_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/regress"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// reference folds the bundled runs: the 4B and 27B runs and the 4B run's
// offload-off control.
func reference(t *testing.T) (r4, r27, ctl split.Report) {
	t.Helper()
	opts := rt.FoldOptions(t)
	control := filepath.Join(filepath.Dir(rt.Runs("4b")), "..", "..", "controls", "4b-ngl0", "events.jsonl")
	return rt.Load(t, rt.Runs("4b"), opts).Report, rt.Load(t, rt.Runs("27b"), opts).Report, rt.Load(t, control, opts).Report
}

func pct(v float64) *float64 { return &v }

func mib(v float64) *split.MiB { m := split.MiB(v); return &m }

func texts(g regress.GateResult) []string {
	var out []string
	for _, r := range g.Runs {
		for _, c := range r.Checks {
			out = append(out, c.Status+": "+c.Text)
		}
	}
	return out
}

// The bundled runs against fixed limits: the 4B run's packed copy is
// 33.5 % of its model buffer, the 27B run's 16.7 %, and the control has no
// trace (duplicate unknown).
func TestGateReferenceRuns(t *testing.T) {
	r4, r27, ctl := reference(t)
	in := []regress.Input{{Input: "4b", Report: r4}, {Input: "27b", Report: r27}, {Input: "4b-ngl0", Report: ctl}}

	g := regress.Gate(in, nil, regress.Limits{MaxDuplicatePct: pct(20), MaxUnattributedPct: pct(10), MaxPeakMiB: pct(4096)})
	require.False(t, g.Pass)
	require.Equal(t, 3, g.Failed)
	require.Equal(t, []string{
		"fail: duplicate 33.5 % > 20 %", "fail: unattributed 17.2 % > 10 %", "pass: peak 3925.0 MiB ≤ 4096 MiB",
		"pass: duplicate 16.7 % ≤ 20 %", "pass: unattributed 9.3 % ≤ 10 %", "fail: peak 20497.0 MiB > 4096 MiB",
		"fail: duplicate unknown, limit 20 %", "fail: unattributed 94.3 % > 10 %", "pass: peak 753.3 MiB ≤ 4096 MiB",
	}, texts(g))
	require.Equal(t, []bool{false, false, false}, []bool{g.Runs[0].Pass, g.Runs[1].Pass, g.Runs[2].Pass})

	// The 27B run alone passes; the control passes with --allow-unknown.
	g = regress.Gate(in[1:2], nil, regress.Limits{MaxDuplicatePct: pct(20)})
	require.True(t, g.Pass)
	g = regress.Gate(in[2:], nil, regress.Limits{MaxDuplicatePct: pct(20), AllowUnknown: true})
	require.True(t, g.Pass, texts(g))
	require.Equal(t, []string{"unknown: duplicate unknown, limit 20 % (unknown: allowed)"}, texts(g))

	txt := regress.GateText(regress.Gate(in[:1], nil, regress.Limits{MaxDuplicatePct: pct(10)}))
	require.Equal(t, "FAIL strix01-20261107T140311-4b (4b)\n  FAIL duplicate 33.5 % > 10 %\ngate: FAIL: 1 of 1 run failed (duplicate ≤ 10 %)", txt)
}

// Growth against a baseline: each growth part is held to the baseline's
// figure plus the allowed growth; a part that was 0 may not grow at all;
// an unknown figure on either side fails unless allowed.
func TestGateGrowth(t *testing.T) {
	r4, _, _ := reference(t)
	fixed := r4
	fixed.PeakGTTMiB, fixed.PackedMiB = mib(3129.2), mib(0) // the packed copy gone
	five := regress.Limits{MaxGrowthPct: pct(5)}

	// The packed copy coming back: from 0, and the peak by 25.4 %.
	g := regress.Gate([]regress.Input{{Input: "new", Report: r4}}, &regress.Input{Input: "base", Report: fixed}, five)
	require.False(t, g.Pass)
	require.Equal(t, []string{
		"fail: peak 3925.0 MiB > 3285.7 MiB (baseline 3129.2 MiB + 5 %)",
		"pass: model buffer 2375.9 MiB ≤ 2494.7 MiB (baseline 2375.9 MiB + 5 %)",
		"fail: packed 795.8 MiB > 0.0 MiB (baseline 0.0 MiB + 5 %)",
		"pass: KV + state 36.0 MiB ≤ 37.8 MiB (baseline 36.0 MiB + 5 %)",
		"pass: compute 43.2 MiB ≤ 45.4 MiB (baseline 43.2 MiB + 5 %)",
	}, texts(g))
	// The other way round it passes: everything shrank or stayed.
	require.True(t, regress.Gate([]regress.Input{{Report: fixed}}, &regress.Input{Report: r4}, five).Pass)

	// The baseline read back from its JSON (two decimals) against the run
	// folded from its events: no growth at 0 %.
	var back split.Report
	b, err := split.JSON(r4)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &back))
	require.True(t, regress.Gate([]regress.Input{{Report: r4}}, &regress.Input{Report: back}, regress.Limits{MaxGrowthPct: pct(0)}).Pass)

	// A growth over the limit by less than the shown precision says so.
	grown := back
	grown.PeakGTTMiB = mib(3925.04)
	g = regress.Gate([]regress.Input{{Report: grown}}, &regress.Input{Report: back}, regress.Limits{MaxGrowthPct: pct(0)})
	require.Equal(t, "fail: peak 3925.040 MiB > 3925.0 MiB (baseline 3925.0 MiB + 0 %)", texts(g)[0])

	// Unknown in the baseline (no trace) or in the run.
	noTrace := fixed
	noTrace.PackedMiB = nil
	g = regress.Gate([]regress.Input{{Report: r4}}, &regress.Input{Report: noTrace}, regress.Limits{MaxGrowthPct: pct(50)})
	require.Equal(t, "fail: packed 795.8 MiB: the baseline's is unknown", texts(g)[2])
	g = regress.Gate([]regress.Input{{Report: noTrace}}, &regress.Input{Report: r4}, regress.Limits{MaxGrowthPct: pct(50)})
	require.Equal(t, "fail: packed unknown, limit 1193.7 MiB (baseline 795.8 MiB + 50 %)", texts(g)[2])
	g = regress.Gate([]regress.Input{{Report: noTrace}}, &regress.Input{Report: noTrace}, regress.Limits{MaxGrowthPct: pct(50)})
	require.Equal(t, "fail: packed unknown, and the baseline's too", texts(g)[2])
	g = regress.Gate([]regress.Input{{Report: noTrace}}, &regress.Input{Report: r4}, regress.Limits{MaxGrowthPct: pct(50), AllowUnknown: true})
	require.True(t, g.Pass)
}

func TestGateLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		l        regress.Limits
		baseline bool
		err      string
	}{
		{"none", regress.Limits{}, false, "no limit to check"},
		{"growth without a baseline", regress.Limits{MaxGrowthPct: pct(5)}, false, "--max-growth needs --baseline RUN"},
		{"a baseline without growth", regress.Limits{MaxDuplicatePct: pct(5)}, true, "--baseline needs --max-growth"},
		{"one limit", regress.Limits{MaxPeakMiB: pct(0)}, false, ""},
		{"growth", regress.Limits{MaxGrowthPct: pct(0)}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.Validate(tc.baseline)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
}

func TestParsePct(t *testing.T) {
	for in, want := range map[string]float64{"10": 10, "10%": 10, "10 %": 10, " 7.5% ": 7.5, "0": 0} {
		got, err := regress.ParsePct(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "%", "ten", "-1", "NaN", "Inf", "10%%"} {
		_, err := regress.ParsePct(in)
		require.Error(t, err, in)
	}
	v, err := regress.ParseMiB("4096MiB")
	require.NoError(t, err)
	require.Equal(t, 4096.0, v)
	_, err = regress.ParseMiB("4 GiB")
	require.Error(t, err)
}

// The GitHub annotations: one ::error line per failed check, with the
// message's % and newlines escaped as workflow commands need.
func TestGateAnnotations(t *testing.T) {
	r4, r27, _ := reference(t)
	r4.Run.ID = "run\nwith a newline"
	g := regress.Gate([]regress.Input{{Input: "4b", Report: r4}, {Input: "27b", Report: r27}}, nil, regress.Limits{MaxDuplicatePct: pct(20)})
	a := regress.GateAnnotations(g)
	require.Equal(t, "::error title=gttsplit gate::run%0Awith a newline (4b): duplicate 33.5 %25 > 20 %25\n", a)
	md := regress.GateMarkdown(g)
	require.Contains(t, md, "### gttsplit gate: FAIL: 1 of 2 runs failed")
	require.Contains(t, md, "| duplicate 33.5 % > 20 % | **FAIL** |")
	require.True(t, strings.HasPrefix(md, "### "))
}

// A run whose command failed (exited 3, stopped by SIGINT) fails the gate
// whatever its figures, unless AllowFailed; naive, it passes as any run
// within its limits.
func TestGateFailsAFailedCommand(t *testing.T) {
	_, r27, _ := reference(t)
	three := 3
	failed, stopped := r27, r27
	failed.Run.ExitCode = &three
	stopped.Run.ExitCode, stopped.Run.Signal = nil, "SIGINT"
	l := regress.Limits{MaxDuplicatePct: pct(20)}

	g := regress.Gate([]regress.Input{{Input: "27b", Report: r27}}, nil, l)
	require.True(t, g.Pass, "exit 0: no command check")
	require.Len(t, g.Runs[0].Checks, 1)

	g = regress.Gate([]regress.Input{{Input: "f", Report: failed}, {Input: "s", Report: stopped}}, nil, l)
	require.False(t, g.Pass)
	require.Equal(t, 2, g.Failed)
	require.Equal(t, []string{
		"pass: duplicate 16.7 % ≤ 20 %", "fail: command exited with status 3",
		"pass: duplicate 16.7 % ≤ 20 %", "fail: command stopped by SIGINT",
	}, texts(g))
	require.Equal(t, "exit", g.Runs[0].Checks[1].Kind)
	require.Equal(t, "run.signal", g.Runs[1].Checks[1].Key)

	l.AllowFailed = true
	g = regress.Gate([]regress.Input{{Input: "f", Report: failed}}, nil, l)
	require.True(t, g.Pass)
	require.Equal(t, []string{"pass: duplicate 16.7 % ≤ 20 %", "allowed: command exited with status 3 (allowed: --allow-failed)"}, texts(g))
	require.Contains(t, regress.GateText(g), "failed commands allowed")
}
