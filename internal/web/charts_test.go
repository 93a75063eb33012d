package web

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/split"
)

func TestNiceTicks(t *testing.T) {
	ticks, top := niceTicks(3925, 5)
	require.Equal(t, []float64{0, 1000, 2000, 3000, 4000}, ticks)
	require.Equal(t, 4000.0, top)
	ticks, top = niceTicks(3.48, 6)
	require.Equal(t, []float64{0, 1, 2, 3, 4}, ticks)
	require.Equal(t, 4.0, top)
	_, top = niceTicks(0, 5)
	require.Equal(t, 1.0, top)
}

func mibp(v float64) *split.MiB { x := split.MiB(v); return &x }

func TestCharts(t *testing.T) {
	ms := func(v float64) *split.Millis { x := split.Millis(v); return &x }
	r := split.Report{PeakGTTMiB: mibp(4000), FinalGTTMiB: mibp(3000), ModelGTTMiB: mibp(2000), PackedMiB: mibp(1000), StateMiB: mibp(100), ComputeMiB: mibp(100), UnattributedMiB: mibp(800)}
	cs := NewBarChart(r)
	for _, c := range []*BarChart{cs.Wide, cs.Narrow} {
		require.Len(t, c.Bars, 2)
		// 4000 MiB spans the whole axis (0..4000): the segments tile it.
		peak := c.Bars[0].Segments
		require.Equal(t, "model", peak[0].Key)
		require.Equal(t, c.Left, peak[0].X)
		require.InDelta(t, (c.Right-c.Left)/2, peak[0].W, 0.1)
		last := peak[len(peak)-1]
		require.Equal(t, "unattributed", last.Key)
		require.False(t, last.Unknown)
		require.InDelta(t, 800, last.MiB, 1e-9)
		require.InDelta(t, c.Right, last.X+last.W, 0.2)
		require.InDelta(t, 20, last.Share, 1e-9)
	}
	require.Less(t, cs.Narrow.Width, cs.Wide.Width/2+1, "the narrow layout is drawn for a phone")
	require.Nil(t, NewBarChart(split.Report{}).Wide)

	r.Detail.Samples = 3
	r.Timeline = &split.Timeline{Start: "2026-01-01T00:00:00.123456789Z", BucketMS: 1,
		Points:  []split.TimelinePoint{{TMS: 0, MiB: 100}, {TMS: 1000, MiB: 4000}, {TMS: 2000, MiB: 3000}},
		Markers: []split.TimelineMarker{{Kind: split.MarkerModelLoad, Line: 5, TMS: ms(100)}, {Kind: split.MarkerContext, Line: 9}},
		PeakMS:  ms(1000), FinalMS: ms(2000)}
	tls := NewTimeline(r)
	for _, tl := range []*Timeline{tls.Wide, tls.Narrow} {
		require.Equal(t, 3, tl.N)
		require.False(t, tl.Merged(), "every sample is a point")
		require.Equal(t, tl.Top, tl.Peak.Y, "the peak is the top of the axis")
		require.Equal(t, "peak 4000.0 MiB", tl.Peak.Label)
		require.Equal(t, tl.Right, tl.Final.X, "the final sample ends the time axis")
		require.Len(t, tl.Markers, 1)
		require.Equal(t, []string{"context (log line 9)"}, tl.Untimed)
		require.Equal(t, "2026-01-01 00:00:00Z", tl.Start, "UTC to the second, as every time on the pages")
		require.True(t, tl.Final.Right, "the final label is drawn left of a point at the right edge")
	}
	require.Equal(t, "", tls.Wide.ID)
	require.Equal(t, "-narrow", tls.Narrow.ID)
	require.Nil(t, NewTimeline(split.Report{}).Wide)
}

// TestTimelineSteps: GTT holds from one sample until the next, so the
// line is drawn as steps (a horizontal run, then a vertical step) however
// dense the samples; the caption tells merged points from all samples.
func TestTimelineSteps(t *testing.T) {
	r := split.Report{PeakGTTMiB: mibp(400)}
	r.Detail.Samples = 3
	r.Timeline = &split.Timeline{BucketMS: 1, Points: []split.TimelinePoint{{TMS: 0, MiB: 100}, {TMS: 1000, MiB: 400}, {TMS: 2000, MiB: 200}}}
	tl := NewTimeline(r).Wide
	pts := strings.Fields(tl.Points)
	require.Len(t, pts, 5, "3 samples, 2 steps")
	xy := func(s string) (string, string) { x, y, _ := strings.Cut(s, ","); return x, y }
	for i := 1; i < len(pts); i += 2 {
		hx, hy := xy(pts[i])
		px, py := xy(pts[i-1])
		nx, ny := xy(pts[i+1])
		require.Equal(t, py, hy, "the value before holds until the next sample (%s)", tl.Points)
		require.Equal(t, nx, hx, "then steps at the next sample's time (%s)", tl.Points)
		require.NotEqual(t, px, hx)
		require.NotEqual(t, hy, ny)
	}
	r.Detail.Samples = 900
	require.True(t, NewTimeline(r).Wide.Merged(), "3 points of 900 samples")
}

// TestBarsUnknownRest: while the log's model load is not folded (an open
// run's first seconds), "not attributed" is unknown, not the whole peak.
func TestBarsUnknownRest(t *testing.T) {
	r := split.Report{PeakGTTMiB: mibp(20497), FinalGTTMiB: mibp(20493)}
	for _, c := range []*BarChart{NewBarChart(r).Wide, NewBarChart(r).Narrow} {
		rest := c.Legend[len(c.Legend)-1]
		require.Equal(t, "unattributed", rest.Key)
		require.True(t, rest.Unknown, "no model load yet: unknown")
		for _, s := range c.Legend {
			require.True(t, s.Unknown, s.Key)
		}
	}
}

func TestBarChartsOneScale(t *testing.T) {
	a, b := NewBarCharts(split.Report{PeakGTTMiB: mibp(4000), ModelGTTMiB: mibp(2000)}, split.Report{PeakGTTMiB: mibp(800), ModelGTTMiB: mibp(0)})
	require.Equal(t, a.Wide.Ticks, b.Wide.Ticks)
	require.Equal(t, a.Narrow.Ticks, b.Narrow.Ticks)
	c := b.Wide
	require.InDelta(t, (c.Right-c.Left)/5, c.Bars[0].Segments[4].W, 0.2, "800 of 4000 MiB")
	require.True(t, c.Bars[0].Segments[1].Unknown, "no packed row")
}

// Every row the charts draw has its look: a fill pattern for a bar
// segment (layout.html's <defs>), a line style for a trend line; and the
// run page lists every row of the GTT and beside it. A row added to
// split.Rows is drawn without a line of Go here, but needs its pattern
// and its style.
func TestEveryRowIsDrawn(t *testing.T) {
	layout, err := templateFS.ReadFile("templates/layout.html")
	require.NoError(t, err)
	for _, row := range split.RowsOf(split.RowPart, split.RowRest) {
		require.True(t, strings.Contains(string(layout), `<pattern id="p-`+row.Key+`"`), "layout.html has no fill pattern p-%s", row.Key)
	}
	for _, row := range trendRows() {
		st, ok := trendStyle[row.Key]
		require.True(t, ok, "no trend style for %s", row.Key)
		require.NotEmpty(t, st.Color, row.Key)
	}
	var labels []string
	for _, r := range splitRows(split.Report{}) {
		labels = append(labels, r.Label)
	}
	for _, row := range split.RowsOf(split.RowTotal, split.RowPart, split.RowRest, split.RowOutside) {
		require.Contains(t, labels, row.Labels.Report)
	}
}

// TestTimelineLabelsOffTheCurve: in both layouts of the recorded runs'
// timelines, no label (a marker's, the peak's, the final sample's) is
// placed on the curve or on another label, by the boxes the layout
// estimates (the browser test measures the drawn ones). The 4B run's
// final label and last context label sat on the curve once.
func TestTimelineLabelsOffTheCurve(t *testing.T) {
	for _, f := range []string{"testdata/runs/4b/events.jsonl", "testdata/runs/27b/events.jsonl", "testdata/controls/4b-ngl0/events.jsonl"} {
		r := replay(t, f)
		tls := NewTimeline(r)
		for _, tl := range []*Timeline{tls.Wide, tls.Narrow} {
			var curve []box
			var pts []Point
			for _, p := range strings.Fields(tl.Points) {
				var pt Point
				_, err := fmt.Sscanf(p, "%f,%f", &pt.X, &pt.Y)
				require.NoError(t, err)
				pts = append(pts, pt)
			}
			for i := 1; i < len(pts); i++ {
				a, b := pts[i-1], pts[i]
				curve = append(curve, box{min(a.X, b.X), min(a.Y, b.Y), max(a.X, b.X), max(a.Y, b.Y)})
			}
			var labels []box
			for _, m := range tl.Markers {
				labels = append(labels, labelBox(m.Label, m.LX, m.LY, m.Anchor))
			}
			for _, s := range []*Spot{tl.Peak, tl.Final} {
				labels = append(labels, labelBox(s.Label, s.LX, s.LY, s.Anchor))
			}
			for i, l := range labels {
				for _, c := range curve {
					require.False(t, l.overlaps(c), "%s%s: label %d %+v on the curve %+v", f, tl.ID, i, l, c)
				}
				for j := i + 1; j < len(labels); j++ {
					require.False(t, l.overlaps(labels[j]), "%s%s: labels %d and %d overlap", f, tl.ID, i, j)
				}
				require.True(t, l.x0 >= 0 && l.x1 <= tl.Width && l.y0 >= 0 && l.y1 <= tl.Height, "%s%s: label %d outside the chart", f, tl.ID, i)
			}
		}
	}
}
