package web

import (
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

func TestCharts(t *testing.T) {
	m := func(v float64) *split.MiB { x := split.MiB(v); return &x }
	ms := func(v float64) *split.Millis { x := split.Millis(v); return &x }
	r := split.Report{PeakGTTMiB: m(4000), FinalGTTMiB: m(3000), ModelGTTMiB: m(2000), PackedMiB: m(1000), StateMiB: m(100), ComputeMiB: m(100)}
	c := NewBarChart(r)
	require.Len(t, c.Bars, 2)
	// 4000 MiB spans the whole axis (0..4000): the segments tile it.
	peak := c.Bars[0].Segments
	require.Equal(t, "model", peak[0].Key)
	require.Equal(t, barLeft, peak[0].X)
	require.InDelta(t, (barRight-barLeft)/2, peak[0].W, 0.1)
	last := peak[len(peak)-1]
	require.Equal(t, "unattributed", last.Key)
	require.InDelta(t, 800, last.MiB, 1e-9)
	require.InDelta(t, barRight, last.X+last.W, 0.2)
	require.InDelta(t, 20, last.Share, 1e-9)
	require.Nil(t, NewBarChart(split.Report{}))

	r.Timeline = &split.Timeline{Start: "2026-01-01T00:00:00Z", BucketMS: 1,
		Points:  []split.TimelinePoint{{TMS: 0, MiB: 100}, {TMS: 1000, MiB: 4000}, {TMS: 2000, MiB: 3000}},
		Markers: []split.TimelineMarker{{Kind: split.MarkerModelLoad, Line: 5, TMS: ms(100)}, {Kind: split.MarkerContext, Line: 9}},
		PeakMS:  ms(1000), FinalMS: ms(2000)}
	tl := NewTimeline(r)
	require.Equal(t, 3, tl.N)
	require.Equal(t, tlTop, tl.Peak.Y, "the peak is the top of the axis")
	require.Equal(t, "peak 4000.0 MiB", tl.Peak.Label)
	require.Equal(t, tlRight, tl.Final.X, "the final sample ends the time axis")
	require.Len(t, tl.Markers, 1)
	require.Equal(t, []string{"context (log line 9)"}, tl.Untimed)
	require.Nil(t, NewTimeline(split.Report{}))
}

func TestBarChartsOneScale(t *testing.T) {
	m := func(v float64) *split.MiB { x := split.MiB(v); return &x }
	a, b := NewBarCharts(split.Report{PeakGTTMiB: m(4000), ModelGTTMiB: m(2000)}, split.Report{PeakGTTMiB: m(800), ModelGTTMiB: m(0)})
	require.Equal(t, a.Ticks, b.Ticks)
	require.InDelta(t, (barRight-barLeft)/5, b.Bars[0].Segments[4].W, 0.2, "800 of 4000 MiB")
	require.True(t, b.Bars[0].Segments[1].Unknown, "no packed row")
}
