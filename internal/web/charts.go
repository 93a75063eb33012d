package web

import (
	"fmt"
	"math"
	"time"

	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/present"
)

// The charts are computed here as plain geometry and drawn as SVG by the
// templates: no script, no library, the same picture offline and in a
// screenshot. Each part of the split has a fill that differs in lightness
// and in pattern (see the <defs> of layout.html), so the charts stay
// readable printed in grey.

// Segment is one part of a stacked bar.
type Segment struct {
	Key, Label string
	MiB        float64
	X, W       float64 // in the bar chart's coordinates
	Share      float64 // of the bar's total, in %
	// Unknown: the row is unknown. A known row is drawn to scale and an
	// unknown one as 0, except "not attributed" while the rows it is the
	// rest of are unknown: it keeps the rest of the bar, drawn as unknown
	// (dashed, unfilled), and no share.
	Unknown bool
}

// Bar is the split at the peak or at the final sample.
type Bar struct {
	Name     string // "peak" or "final"
	TotalMiB float64
	Y        float64
	Segments []Segment
}

// Tick is one labelled axis tick.
type Tick struct {
	Pos   float64
	Label string
}

// BarChart is the stacked bars of a split.
type BarChart struct {
	Width, Height float64
	Left, Right   float64 // plot area x range
	BarHeight     float64
	Bars          []Bar
	Ticks         []Tick
	AxisY         float64
	Legend        []Segment // one per part, with the peak's figures
}

// Charts are one chart in two layouts: Wide for a screen at least 700 CSS
// pixels wide, Narrow (half as wide) under it, as layout.html's media
// query shows them. Both draw their labels at 12 user units (its svg
// text), so neither is scaled down to an unreadable font: the wide one is
// shown where it fits at about its own size, the narrow one on a phone.
type Charts[T any] struct{ Wide, Narrow *T }

// barGeom is the layout of a bar chart.
type barGeom struct {
	w, left, right float64
	ticks          int
}

var (
	wideBars   = barGeom{w: 760, left: 60, right: 660, ticks: 5}
	narrowBars = barGeom{w: 360, left: 44, right: 262, ticks: 4}
)

const barH = 34.0

// NewBarChart lays out the split at peak and at final; nil when the peak
// is unknown.
func NewBarChart(r split.Report) Charts[BarChart] {
	return Charts[BarChart]{newBarChart(r, 0, wideBars), newBarChart(r, 0, narrowBars)}
}

// NewBarCharts lays out two splits on one scale (the compare page).
func NewBarCharts(a, b split.Report) (Charts[BarChart], Charts[BarChart]) {
	top := math.Max(barTotal(a), barTotal(b))
	return Charts[BarChart]{newBarChart(a, top, wideBars), newBarChart(a, top, narrowBars)},
		Charts[BarChart]{newBarChart(b, top, wideBars), newBarChart(b, top, narrowBars)}
}

func barTotal(r split.Report) float64 {
	_, _, pt, ft, _ := present.BarParts(r)
	return math.Max(pt, ft)
}

func newBarChart(r split.Report, scaleTo float64, g barGeom) *BarChart {
	peak, final, pt, ft, ok := present.BarParts(r)
	if !ok {
		return nil
	}
	maxT := math.Max(math.Max(pt, ft), scaleTo)
	if maxT <= 0 {
		return nil
	}
	ticks, top := niceTicks(maxT, g.ticks)
	scale := (g.right - g.left) / top
	c := &BarChart{Width: g.w, Left: g.left, Right: g.right, BarHeight: barH}
	lay := func(name string, parts []present.BarPart, total, shown float64, y float64) Bar {
		b := Bar{Name: name, TotalMiB: shown, Y: y}
		x := g.left
		for _, p := range parts {
			w := r1(p.MiB * scale)
			share := 0.0
			if total > 0 {
				share = p.MiB / total * 100
			}
			b.Segments = append(b.Segments, Segment{Key: p.Key, Label: p.Label, MiB: p.MiB, X: x, W: w, Share: share, Unknown: p.Unknown})
			x = r1(x + w)
		}
		return b
	}
	y := 10.0
	c.Bars = append(c.Bars, lay("peak", peak, pt, float64(*r.PeakGTTMiB), y))
	if r.FinalGTTMiB != nil {
		y += barH + 14
		c.Bars = append(c.Bars, lay("final", final, ft, float64(*r.FinalGTTMiB), y))
	}
	c.AxisY = y + barH + 6
	for _, t := range ticks {
		c.Ticks = append(c.Ticks, Tick{Pos: r1(g.left + t*scale), Label: fmt.Sprintf("%g", t)})
	}
	c.Legend = c.Bars[0].Segments
	c.Height = c.AxisY + 40
	return c
}

// SplitRow is one row of a split as the run page's table of rows shows it.
type SplitRow struct {
	Label string
	MiB   *split.MiB
}

// splitRows are the rows of the run page's table: the process's GTT, its
// parts, not attributed and what is outside it (split.Rows of those
// kinds), each named as the report names it.
func splitRows(r split.Report) []SplitRow {
	var out []SplitRow
	for _, row := range split.RowsOf(split.RowTotal, split.RowPart, split.RowRest, split.RowOutside) {
		label := row.Labels.Report
		if n := row.Note(r); n != "" {
			label += " (" + n + ")"
		}
		out = append(out, SplitRow{Label: label, MiB: row.Of(r)})
	}
	return out
}

// Point is one point of a polyline.
type Point struct{ X, Y float64 }

// MarkerLine is a load or context marker on the timeline.
type MarkerLine struct {
	X     float64
	Label string
	Title string
	Row   int // label row, so close markers do not overlap
}

// Spot is a marked sample (peak, final).
type Spot struct {
	X, Y  float64
	MiB   float64
	TSec  float64
	Label string
	Right bool // label to the left of the point (near the right edge)
}

// Timeline is the GTT timeline chart.
type Timeline struct {
	// ID tells the layouts' elements apart ("" for the wide one,
	// "-narrow"), so element ids stay unique on the page.
	ID                       string
	Width, Height            float64
	Left, Right, Top, Bottom float64
	// Points is the step line's points attribute: GTT holds from one
	// sample until the next, so each sample is a horizontal run ending in
	// a vertical step.
	Points         string
	Area           string // the filled area under it
	N              int    // samples drawn
	Samples        int    // samples in the run (more than N when buckets merged them)
	XTicks, YTicks []Tick
	Markers        []MarkerLine
	Untimed        []string // markers without a time (a saved log)
	Peak, Final    *Spot
	Start          string // the time 0 of the axis, UTC to the second
	BucketMS       float64
}

// Merged says whether the timeline shows fewer points than samples.
func (t *Timeline) Merged() bool { return t.N < t.Samples }

// tlGeom is the layout of a timeline.
type tlGeom struct {
	id                       string
	w, h                     float64
	left, right, top, bottom float64
	xTicks, yTicks           int
	labelW                   float64 // room a peak or final label needs
}

var (
	wideTimeline   = tlGeom{w: 760, h: 320, left: 70, right: 740, top: 44, bottom: 270, xTicks: 6, yTicks: 5, labelW: 140}
	narrowTimeline = tlGeom{id: "-narrow", w: 360, h: 290, left: 48, right: 348, top: 44, bottom: 240, xTicks: 4, yTicks: 4, labelW: 112}
)

const markerLabelRows = 2

// NewTimeline lays out the timeline of r; nil when r has none.
func NewTimeline(r split.Report) Charts[Timeline] {
	return Charts[Timeline]{newTimeline(r, wideTimeline), newTimeline(r, narrowTimeline)}
}

func newTimeline(r split.Report, g tlGeom) *Timeline {
	tl := r.Timeline
	if tl == nil || len(tl.Points) == 0 {
		return nil
	}
	maxT, maxM := 0.0, 0.0
	for _, p := range tl.Points {
		maxT = math.Max(maxT, float64(p.TMS))
		maxM = math.Max(maxM, float64(p.MiB))
	}
	for _, m := range tl.Markers {
		if m.TMS != nil {
			maxT = math.Max(maxT, float64(*m.TMS))
		}
	}
	if r.PeakGTTMiB != nil {
		maxM = math.Max(maxM, float64(*r.PeakGTTMiB))
	}
	if maxT <= 0 {
		maxT = 1000
	}
	if maxM <= 0 {
		maxM = 1
	}
	xt, xTop := niceTicks(maxT/1000, g.xTicks)
	yt, yTop := niceTicks(maxM, g.yTicks)
	x := func(ms float64) float64 { return r1(g.left + ms/1000/xTop*(g.right-g.left)) }
	y := func(mib float64) float64 { return r1(g.bottom - mib/yTop*(g.bottom-g.top)) }
	c := &Timeline{ID: g.id, Width: g.w, Height: g.h, Left: g.left, Right: g.right, Top: g.top, Bottom: g.bottom,
		N: len(tl.Points), Samples: max(r.Detail.Samples, len(tl.Points)), Start: utcSecond(tl.Start), BucketMS: float64(tl.BucketMS)}
	var pts []byte
	for i, p := range tl.Points {
		px, py := x(float64(p.TMS)), y(float64(p.MiB))
		if i > 0 {
			// The step: the last value held until this sample's time.
			pts = fmt.Appendf(pts, " %.1f,%.1f ", px, y(float64(tl.Points[i-1].MiB)))
		}
		pts = fmt.Appendf(pts, "%.1f,%.1f", px, py)
	}
	first, last := tl.Points[0], tl.Points[len(tl.Points)-1]
	c.Points = string(pts)
	c.Area = fmt.Sprintf("%.1f,%.1f %s %.1f,%.1f", x(float64(first.TMS)), g.bottom, pts, x(float64(last.TMS)), g.bottom)
	for _, t := range xt {
		c.XTicks = append(c.XTicks, Tick{Pos: x(t * 1000), Label: fmt.Sprintf("%g", t)})
	}
	for _, t := range yt {
		c.YTicks = append(c.YTicks, Tick{Pos: y(t), Label: fmt.Sprintf("%g", t)})
	}
	lastX := map[int]float64{}
	for _, m := range tl.Markers {
		label := "load"
		what := "model load"
		if m.Kind == split.MarkerContext {
			label, what = "ctx", "context"
		}
		title := fmt.Sprintf("%s (log line %d)", what, m.Line)
		if m.TMS == nil {
			c.Untimed = append(c.Untimed, title)
			continue
		}
		mx := x(float64(*m.TMS))
		row := 0
		for row < markerLabelRows-1 {
			if lx, ok := lastX[row]; !ok || mx-lx > 40 {
				break
			}
			row++
		}
		lastX[row] = mx
		c.Markers = append(c.Markers, MarkerLine{X: mx, Label: label, Title: fmt.Sprintf("%s at %.2f s", title, float64(*m.TMS)/1000), Row: row})
	}
	spot := func(ms *split.Millis, v *split.MiB, name string) *Spot {
		if ms == nil || v == nil {
			return nil
		}
		s := &Spot{X: x(float64(*ms)), Y: y(float64(*v)), MiB: float64(*v), TSec: float64(*ms) / 1000}
		s.Label = fmt.Sprintf("%s %.1f MiB", name, s.MiB)
		s.Right = s.X > g.right-g.labelW
		return s
	}
	c.Peak = spot(tl.PeakMS, r.PeakGTTMiB, "peak")
	c.Final = spot(tl.FinalMS, r.FinalGTTMiB, "final")
	return c
}

// utcSecond writes an RFC 3339 time as the page writes every time: UTC,
// to the second ("2026-11-07 14:03:11Z"); anything else as it is.
func utcSecond(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return pageTime(t)
}

// pageTime is the one format of a time on the pages.
func pageTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// niceTicks returns ticks 0, step, ... covering max with about n steps
// of 1, 2 or 5 × 10^k, and the last tick.
func niceTicks(max float64, n int) ([]float64, float64) {
	if max <= 0 {
		return []float64{0, 1}, 1
	}
	raw := max / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	top := 0.0
	for i := 0; ; i++ {
		v := float64(i) * step
		out = append(out, round(v))
		top = v
		if v >= max {
			break
		}
	}
	return out, top
}

func round(v float64) float64 { return math.Round(v*1e6) / 1e6 }

// r1 rounds a coordinate to a tenth of a pixel.
func r1(v float64) float64 { return math.Round(v*10) / 10 }

// since formats how long ago t was, for the runs list.
func since(now time.Time, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d min ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h ago", int(d.Hours()))
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}
