package regress_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// laneRun is a run of the 4B lane at a build: the bundled run's figures,
// with the packed copy and the peak as given.
func laneRun(id, build, started string, peak, packed float64) regress.Run {
	return regress.Run{ID: id, Host: "strix01", Lane: "gpu0", F: split.Figures{
		Model: "Qwen3.5-4B-Q4_K_M.gguf", Build: build, Commit: split.BuildCommit(build), Started: started, Complete: true,
		PeakGTTMiB: mib(peak), FinalGTTMiB: mib(peak * 0.93), ModelGTTMiB: mib(2375.91), PackedMiB: mib(packed),
		StateMiB: mib(36), ComputeMiB: mib(43.21), UnattributedMiB: mib(674.08),
	}}
}

func ids(g regress.Group) []string {
	var out []string
	for _, r := range g.Rows {
		out = append(out, r.RunID)
	}
	return out
}

// The rows of a lane are ordered by build number, then by start time
// (given in any order; a build that sorts after as a string, b10020, is
// the later one; unknown builds last); a change beyond the threshold is
// marked, one within it is not.
func TestHistoryOrderAndMarks(t *testing.T) {
	runs := []regress.Run{
		laneRun("d", "b10020 (aaaaaaaaa)", "2026-11-09T10:00:00Z", 3129.2, 0),                // fixed again
		laneRun("c2", "b9866 (40f58efe1)", "2026-11-08T11:00:00+01:00", 3925.0, 795.8),       // 10:00 UTC
		laneRun("u", "", "2026-11-01T10:00:00Z", 3129.2, 0),                                  // build unknown: last
		laneRun("a", "b9800 (bbbbbbbbb)", "2026-11-07T10:00:00Z", 3129.2, 0),                 // before the packed copy
		laneRun("c1", "b9866 (40f58efe1)", "2026-11-08T09:00:00Z", 3925.0, 795.8),            // the regression
		laneRun("b", "b9801 (ccccccccc)", "2026-11-07T11:00:00Z", 3129.2*1.049, 0),           // +4.9 %: within 5 %
		laneRun("e", "b10021 (ddddddddd)", "2026-11-09T11:00:00Z", 3129.2*1.049*1.051, 0.00), // +5.1 %
	}
	h := regress.NewHistory(runs, regress.Filter{}, 5)
	require.Len(t, h.Groups, 1)
	g := h.Groups[0]
	require.Equal(t, []string{"a", "b", "c1", "c2", "d", "e", "u"}, ids(g))
	byID := map[string]regress.Row{}
	for _, r := range g.Rows {
		byID[r.RunID] = r
	}
	require.Empty(t, byID["a"].Changes, "the first row has nothing before it")
	require.Empty(t, byID["b"].Marked, "+4.9 % is within 5 %")
	require.InDelta(t, 4.9, float64(*byID["b"].Changes["peak"].Pct), 0.01)

	c1 := byID["c1"]
	require.Equal(t, []string{"peak", "final", "packed"}, c1.Marked)
	require.True(t, c1.Changes["packed"].FromZero)
	require.Nil(t, c1.Changes["packed"].Pct)
	require.Equal(t, "new ▲", regress.ChangeText(c1.Changes["packed"]))
	require.Equal(t, "+19.6 % ▲", regress.ChangeText(c1.Changes["peak"]))
	require.Equal(t, "+0.0 %", regress.ChangeText(c1.Changes["model"]))
	require.False(t, c1.Changes["model"].Marked)

	require.Empty(t, byID["c2"].Marked, "the same build again")
	require.Equal(t, []string{"peak", "final", "packed"}, byID["d"].Marked)
	require.Equal(t, "-100.0 % ▼", regress.ChangeText(byID["d"].Changes["packed"]))
	require.Equal(t, []string{"peak", "final"}, byID["e"].Marked, "+5.1 % is beyond 5 %")
	require.Equal(t, "+0.0 %", regress.ChangeText(byID["e"].Changes["packed"]), "0 and 0")
	require.Nil(t, byID["u"].BuildNumber)
	require.Equal(t, int64(10021), *byID["e"].BuildNumber)

	// A higher threshold marks less; the JSON carries every change.
	h = regress.NewHistory(runs, regress.Filter{}, 25)
	require.Equal(t, []string{"packed"}, h.Groups[0].Rows[2].Marked)
	b, err := regress.HistoryJSON(h)
	require.NoError(t, err)
	var back struct {
		Schema       string
		ThresholdPct float64 `json:"threshold_pct"`
		Groups       []struct {
			Rows []struct {
				RunID   string `json:"run_id"`
				Changes map[string]struct {
					DiffMiB  float64  `json:"diff_mib"`
					Pct      *float64 `json:"pct"`
					FromZero bool     `json:"from_zero"`
					Marked   bool
				}
			}
		}
	}
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, regress.HistorySchema, back.Schema)
	require.Equal(t, 25.0, back.ThresholdPct)
	p := back.Groups[0].Rows[2].Changes["packed"]
	require.Equal(t, 795.8, p.DiffMiB)
	require.True(t, p.FromZero && p.Marked)
	require.Nil(t, p.Pct)
}

// Runs are grouped by host, lane and model file, controls apart; an
// unknown figure has no change; the filter picks hosts and lanes exactly
// and models by a part of the name.
func TestHistoryGroupsAndFilter(t *testing.T) {
	a := laneRun("a", "b9800 (b)", "2026-11-07T10:00:00Z", 3129.2, 0)
	b := laneRun("b", "b9866 (b)", "2026-11-08T10:00:00Z", 3925.0, 795.8)
	b.F.PackedMiB = nil
	other := laneRun("o", "b9866 (b)", "2026-11-08T10:00:00Z", 3925.0, 795.8)
	other.Lane = "gpu1"
	big := laneRun("x", "b9866 (b)", "2026-11-08T10:00:00Z", 20497, 2631.3)
	big.F.Model = "Qwen3.5-27B-Q4_K_M-00001-of-00002.gguf"
	ctl := laneRun("c", "b9866 (b)", "2026-11-08T10:10:00Z", 753.3, 0)
	ctl.F.ControlOf = "b"
	runs := []regress.Run{ctl, big, other, b, a}

	h := regress.NewHistory(runs, regress.Filter{}, 5)
	var titles []string
	for _, g := range h.Groups {
		titles = append(titles, g.Title())
	}
	require.Equal(t, []string{
		"strix01 gpu0 Qwen3.5-27B-Q4_K_M-00001-of-00002.gguf",
		"strix01 gpu0 Qwen3.5-4B-Q4_K_M.gguf",
		"strix01 gpu0 Qwen3.5-4B-Q4_K_M.gguf (controls: offload off)",
		"strix01 gpu1 Qwen3.5-4B-Q4_K_M.gguf",
	}, titles)
	rows := h.Groups[1].Rows
	require.Equal(t, []string{"a", "b"}, ids(h.Groups[1]))
	_, ok := rows[1].Changes["packed"]
	require.False(t, ok, "packed is unknown in b: no change")

	for f, want := range map[regress.Filter][]string{
		{Lane: "gpu1"}:              {"o"},
		{Model: "qwen3.5-27b"}:      {"x"},
		{Model: "4B", Lane: "gpu0"}: {"a", "b", "c"},
		{Host: "strix0"}:            nil,
	} {
		var got []string
		for _, g := range regress.NewHistory(runs, f, 5).Groups {
			got = append(got, ids(g)...)
		}
		require.Equal(t, want, got, "%+v", f)
	}

	txt := regress.HistoryText(regress.NewHistory([]regress.Run{b, a, laneRun("c", "b9900 (b)", "", 3925.0, 795.8)}, regress.Filter{Lane: "gpu0"}, 5))
	lines := strings.Split(txt, "\n")
	require.Contains(t, lines[0], "strix01 gpu0 Qwen3.5-4B-Q4_K_M.gguf: 3 runs")
	require.Regexp(t, `^b9800 +b +2026-11-07 10:00:00Z +3129\.2 `, lines[2])
	require.Regexp(t, `^b9866 .* 3925\.0 .* unknown `, lines[3])
	require.Regexp(t, `^ +change +\+25\.4 % ▲ +\+25\.4 % ▲ +\+0\.0 % +\+0\.0 %`, lines[4])
	require.Regexp(t, `^b9900 +b +unknown `, lines[5])
	md := regress.HistoryMarkdown(regress.NewHistory([]regress.Run{b, a}, regress.Filter{}, 5))
	require.Contains(t, md, "| **3925.0<br>+25.4 % ▲** |")
	require.Equal(t, "no closed run matches", regress.HistoryText(regress.NewHistory(nil, regress.Filter{}, 5)))
}
