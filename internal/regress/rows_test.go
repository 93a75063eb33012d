package regress_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// Every row that says Growth is gated against the baseline, by its key,
// its history label and its unit; every row the history shows is a
// column of its text and Markdown, a MiB row with its change. A row added
// to split.Rows with those flags needs no line here.
func TestEveryRowIsGatedAndShown(t *testing.T) {
	r4, r27, _ := reference(t)
	g := regress.Gate([]regress.Input{{Input: "27b", Report: r27}}, &regress.Input{Input: "4b", Report: r4},
		regress.Limits{MaxGrowthPct: pct(5), MaxDuplicatePct: pct(10), MaxUnattributedPct: pct(10), MaxPeakMiB: pct(1)})
	growth := map[string]regress.GateCheck{}
	for _, c := range g.Runs[0].Checks {
		if c.Kind == "growth" {
			growth[c.Key] = c
		}
	}
	n := 0
	for _, row := range split.Rows {
		if !row.Growth {
			continue
		}
		n++
		c, ok := growth[row.JSON]
		require.True(t, ok, "%s is not gated", row.Key)
		require.Equal(t, row.Labels.History, c.Name)
		require.Equal(t, string(row.Unit), c.Unit)
		require.Equal(t, row.OfFigures(split.FiguresOf(r27)), c.Value)
	}
	require.Len(t, growth, n)

	later := regress.RunOf(regress.Input{Report: r4})
	later.ID, later.F.Build = "later", "b9999 (abc)"
	h := regress.NewHistory([]regress.Run{regress.RunOf(regress.Input{Report: r4}), later}, regress.Filter{}, 5)
	txt, md := regress.HistoryText(h), regress.HistoryMarkdown(h)
	head := strings.Split(txt, "\n")[1]
	cols := 0
	for _, row := range split.Rows {
		if !row.History {
			continue
		}
		cols++
		require.Contains(t, head, row.Labels.History, row.Key)
		require.Contains(t, md, " "+row.Labels.History+" |", row.Key)
		if row.Unit == split.UnitMiB {
			_, ok := h.Groups[0].Rows[1].Changes[row.Key]
			require.True(t, ok, "%s has no change", row.Key)
		}
	}
	require.Len(t, regress.Columns(), cols)
}
