package present

import (
	"encoding/json"
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// withFigures is r with each row's figure set to a value of its own
// (1000.25 + 100 × its place in split.Rows), through the report's JSON.
func withFigures(t *testing.T, r split.Report) split.Report {
	t.Helper()
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for i, row := range split.Rows {
		m[row.JSON] = 1000.25 + 100*float64(i)
	}
	b, err = json.Marshal(m)
	require.NoError(t, err)
	var out split.Report
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

// Every row of the GTT and beside it is a line of the report's table, in
// text and Markdown, with its figure; every share is under it; every part
// and the rest are in the bars' legend. A row added to split.Rows is
// rendered without a line here.
func TestEveryRowIsRendered(t *testing.T) {
	t.Parallel()
	r := withFigures(t, foldRun(t, "4b"))
	txt, md := Text(r), Markdown(r)
	for i, row := range split.Rows {
		v := 1000.25 + 100*float64(i)
		switch row.Kind {
		case split.RowTotal:
			// The table's columns: MiB at peak, at final.
			require.Contains(t, txt, fmt.Sprintf("%.1f", v), row.Key)
		case split.RowPart, split.RowRest, split.RowOutside:
			f := fmt.Sprintf("%.1f", v)
			if row.Kind == split.RowOutside {
				f = fmt.Sprintf("%.2f", v)
			}
			label := row.Labels.Report
			if n := row.Note(r); n != "" {
				label += " (" + n + ")"
			}
			require.Regexp(t, "(?m)^"+regexp.QuoteMeta(label)+" +"+regexp.QuoteMeta(f)+" ", txt, row.Key)
			require.Contains(t, md, "| "+label+" | "+f+" |", row.Key)
		case split.RowShare:
			require.Contains(t, txt, fmt.Sprintf("%.1f %%", v), row.Key)
		}
		if row.Kind == split.RowPart || row.Kind == split.RowRest {
			require.Contains(t, TextBars(r), row.Glyph+" "+row.Labels.Bar, row.Key)
		}
	}
}

// Every row of the GTT and beside it is a row of a comparison, by its
// report's key, with both figures and their difference.
func TestEveryRowIsCompared(t *testing.T) {
	t.Parallel()
	a := withFigures(t, split.Report{})
	b := withFigures(t, split.Report{})
	c := Compare(a, b, "a", "b")
	keys := map[string]CompareRow{}
	for _, x := range c.Rows {
		keys[x.Key] = x
	}
	txt := CompareText(c)
	for _, row := range split.Rows {
		if row.Kind == split.RowShare {
			continue
		}
		x, ok := keys[row.JSON]
		require.True(t, ok, "%s is not compared", row.Key)
		require.Equal(t, row.Labels.Report, x.Part)
		require.Equal(t, row.Of(a), x.A, row.Key)
		require.Equal(t, split.MiB(0), *x.Diff, row.Key)
		require.Contains(t, txt, row.Labels.Report, row.Key)
	}
	require.Len(t, c.Rows, len(split.RowsOf(split.RowTotal, split.RowPart, split.RowRest, split.RowOutside)))
}
