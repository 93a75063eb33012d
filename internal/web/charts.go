package web

import (
	"fmt"
	"math"
	"time"
	"unicode/utf8"

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
	// LX, LY and Anchor place the label (see placeLabels): off the curve,
	// the marks and the other labels.
	LX, LY float64
	Anchor string
}

// Spot is a marked sample (peak, final).
type Spot struct {
	X, Y  float64
	MiB   float64
	TSec  float64
	Label string
	// LX, LY and Anchor place the label (see placeLabels); Right says it
	// is drawn to the left of the point (Anchor "end").
	LX, LY float64
	Anchor string
	Right  bool
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
	curve := curvePoints(tl, x, y)
	var pts []byte
	for i, p := range curve {
		if i > 0 {
			pts = append(pts, ' ')
		}
		pts = fmt.Appendf(pts, "%.1f,%.1f", p.X, p.Y)
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
		c.Markers = append(c.Markers, MarkerLine{X: mx, Label: label, Title: fmt.Sprintf("%s at %.2f s", title, float64(*m.TMS)/1000)})
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
	placeLabels(c, curve)
	return c
}

// curvePoints is the step line's vertices: GTT holds from one sample
// until the next, so before each sample's point comes the last value at
// this sample's time.
func curvePoints(tl *split.Timeline, x, y func(float64) float64) []Point {
	var out []Point
	for i, p := range tl.Points {
		px := x(float64(p.TMS))
		if i > 0 {
			out = append(out, Point{px, y(float64(tl.Points[i-1].MiB))})
		}
		out = append(out, Point{px, y(float64(p.MiB))})
	}
	return out
}

// A label's extent is estimated from its length: labelCharW a character
// (12 px text, a wide sans-serif's digits), labelAscent above the
// baseline and labelDescent below; labelGap is the room kept around it.
const (
	labelCharW   = 7.5
	labelAscent  = 10.0
	labelDescent = 3.0
	labelGap     = 2.0
)

// box is an extent in the chart's coordinates.
type box struct{ x0, y0, x1, y1 float64 }

func (b box) overlaps(o box) bool {
	return b.x0 < o.x1+labelGap && o.x0 < b.x1+labelGap && b.y0 < o.y1+labelGap && o.y0 < b.y1+labelGap
}

// labelBox is the extent of text drawn at (x, y) with anchor.
func labelBox(text string, x, y float64, anchor string) box {
	w := float64(utf8.RuneCountInString(text)) * labelCharW
	if anchor == "end" {
		x -= w
	}
	return box{x, y - labelAscent, x + w, y + labelDescent}
}

// spotAt is a label position: its baseline's start (or end) and anchor.
type spotAt struct {
	x, y   float64
	anchor string
}

// placeLabels puts the peak's, the final sample's and the markers'
// labels where they cross neither the curve nor a mark nor another label
// and stay in the chart: the peak's above its point, the final's below
// it (else beside, above, further off, or flush with the plot's right
// edge), a marker's beside its line from the top of the plot down; each
// the first of its candidates that is clear, on the side away from the
// right edge first, the first candidate when none is.
func placeLabels(c *Timeline, curve []Point) {
	var taken []box
	for i := 1; i < len(curve); i++ {
		a, b := curve[i-1], curve[i]
		taken = append(taken, box{math.Min(a.X, b.X), math.Min(a.Y, b.Y), math.Max(a.X, b.X), math.Max(a.Y, b.Y)})
	}
	for _, s := range []*Spot{c.Peak, c.Final} {
		if s != nil {
			taken = append(taken, box{s.X - 7, s.Y - 7, s.X + 7, s.Y + 7}) // the mark
		}
	}
	// The markers' dashed lines are kept clear of too, but a label may
	// cross one when nothing else is clear.
	var lines []box
	for _, m := range c.Markers {
		lines = append(lines, box{m.X, c.Top, m.X, c.Bottom})
	}
	clear := func(b box, obstacles ...[]box) bool {
		if b.x0 < 0 || b.x1 > c.Width || b.y0 < 0 || b.y1 > c.Height {
			return false
		}
		for _, os := range obstacles {
			for _, o := range os {
				if b.overlaps(o) {
					return false
				}
			}
		}
		return true
	}
	pick := func(text string, cands []spotAt) spotAt {
		for _, strict := range []bool{true, false} {
			for _, p := range cands {
				b := labelBox(text, p.x, p.y, p.anchor)
				if (strict && clear(b, taken, lines)) || (!strict && clear(b, taken)) {
					taken = append(taken, b)
					return p
				}
			}
		}
		taken = append(taken, labelBox(text, cands[0].x, cands[0].y, cands[0].anchor))
		return cands[0]
	}
	// sides orders a right and a left candidate, the left first when the
	// point is near the right edge.
	sides := func(right bool, r, l spotAt) []spotAt {
		if right {
			return []spotAt{l, r}
		}
		return []spotAt{r, l}
	}
	place := func(s *Spot, dys []float64) {
		if s == nil {
			return
		}
		var cands []spotAt
		for _, dy := range dys {
			cands = append(cands, sides(s.Right, spotAt{s.X + 8, s.Y + dy, "start"}, spotAt{s.X - 8, s.Y + dy, "end"})...)
			// Flush with the plot's right edge: clear of a curve that
			// climbs to the point from the left.
			cands = append(cands, spotAt{c.Right, s.Y + dy, "end"})
		}
		p := pick(s.Label, cands)
		s.LX, s.LY, s.Anchor = p.x, p.y, p.anchor
		s.Right = p.anchor == "end"
	}
	// Further off the point when nothing near is clear: down the plot in
	// steps of a line.
	further := func(first ...float64) []float64 {
		for dy := 48.0; dy < c.Bottom-c.Top; dy += 14 {
			first = append(first, dy)
		}
		return first
	}
	place(c.Peak, further(-12, 4, 22, -26, 36))
	place(c.Final, further(20, -12, 4, 34, -26, -40, -48))
	for i := range c.Markers {
		m := &c.Markers[i]
		right := m.X > c.Right-40
		var cands []spotAt
		for y := c.Top + 12; y <= c.Bottom-4; y += 13 {
			cands = append(cands, sides(right, spotAt{m.X + 3, y, "start"}, spotAt{m.X - 3, y, "end"})...)
		}
		p := pick(m.Label, cands)
		m.LX, m.LY, m.Anchor = p.x, p.y, p.anchor
	}
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
