package web

import (
	"cmp"
	"context"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// The trend page, /trend?host=&lane=&model=: the closed runs of one host,
// lane and model file over llama.cpp builds, each part of their split a
// line (the build and commit of each point in its title), and the
// history's table with the changes beyond the threshold marked; the lane
// changes (regress.NewChanges: a row moving beyond its own threshold from
// one build to the next) are marked on the chart between their two builds
// and listed under it, with the commits to bisect and links to both runs
// and their comparison. Without a lane it lists the lanes. It reads the figures the run index keeps of
// each closed run; a run whose figures the source does not hold in memory
// is read from the store (FigureSource: its summary, at most
// figuresBudget a request), a run an earlier version summarised without
// them from its report (at most scanBudget of them a request).

// trendRows are the rows a trend draws (split.Row.Trend): the peak and
// the rows it splits into (the final is in the table).
func trendRows() []split.Row {
	var out []split.Row
	for _, row := range split.Rows {
		if row.Trend {
			out = append(out, row)
		}
	}
	return out
}

// trendStyle is how each row's line is drawn, by its key: colours that
// differ in lightness, dashes and point shapes, so a grey print tells them
// apart (TestEveryRowIsDrawn: every row of trendRows has one).
var trendStyle = map[string]struct{ Color, Dash, Shape string }{
	"peak":         {"#111111", "", "circle"},
	"model":        {"#1d2f4f", "", "square"},
	"packed":       {"#8a3b0e", "7 4", "diamond"},
	"state":        {"#1f4d24", "2 3", "triangle"},
	"compute":      {"#4a4a7a", "8 3 2 3", "square"},
	"unattributed": {"#7a7a7a", "12 5", "circle"},
}

// TrendChart is the parts of a lane's splits over its runs, in build
// order, one column per run.
type TrendChart struct {
	ID                       string // "" or "-narrow": unique element ids
	Width, Height            float64
	Left, Right, Top, Bottom float64
	YTicks                   []Tick
	XLabels                  []TrendLabel
	Lines                    []TrendLine
	// Changes mark the lane changes between their two builds' columns.
	Changes []TrendChangeMark
}

// TrendChangeMark is a lane change on the chart: a line between the
// columns of its two builds; Title says the builds, the commits to bisect
// and the rows that moved.
type TrendChangeMark struct {
	X     float64
	Title string
}

// TrendLabel is a column's label under the axis (the build), shown for
// as many columns as fit.
type TrendLabel struct {
	X     float64
	Label string
}

// TrendLine is one part over the runs: its polylines (broken where the
// part is unknown) and a point per run that knows it.
type TrendLine struct {
	Key, Label  string
	Color, Dash string
	Shape       string
	Paths       []string
	Dots        []TrendDot
}

// TrendDot is one run's figure of a part; Title says the run, its build
// and commit, the figure and its change.
type TrendDot struct {
	X, Y   float64
	Title  string
	Marked bool
}

var (
	wideTrend   = tlGeom{w: 760, h: 360, left: 70, right: 740, top: 40, bottom: 300, yTicks: 5}
	narrowTrend = tlGeom{id: "-narrow", w: 360, h: 320, left: 48, right: 348, top: 40, bottom: 260, yTicks: 4}
)

// NewTrendChart lays out a history group's parts in both layouts, with
// the group's lane changes marked; nil charts when no run knows any part.
func NewTrendChart(g regress.Group, changes ...regress.LaneChange) Charts[TrendChart] {
	return Charts[TrendChart]{newTrendChart(g, wideTrend, changes), newTrendChart(g, narrowTrend, changes)}
}

func newTrendChart(g regress.Group, geo tlGeom, changes []regress.LaneChange) *TrendChart {
	maxM := 0.0
	for _, r := range g.Rows {
		for _, row := range trendRows() {
			if v := row.OfFigures(r.Figures); v != nil {
				maxM = math.Max(maxM, float64(*v))
			}
		}
	}
	if len(g.Rows) == 0 || maxM <= 0 {
		return nil
	}
	yt, yTop := niceTicks(maxM, geo.yTicks)
	n := len(g.Rows)
	// Columns: evenly spaced, half a step in from each side.
	step := (geo.right - geo.left) / float64(n)
	x := func(i int) float64 { return r1(geo.left + step*(float64(i)+0.5)) }
	y := func(mib float64) float64 { return r1(geo.bottom - mib/yTop*(geo.bottom-geo.top)) }
	c := &TrendChart{ID: geo.id, Width: geo.w, Height: geo.h, Left: geo.left, Right: geo.right, Top: geo.top, Bottom: geo.bottom}
	for _, t := range yt {
		c.YTicks = append(c.YTicks, Tick{Pos: y(t), Label: fmt.Sprintf("%g", t)})
	}
	// A label every k columns, so they keep about 56 units apart.
	every := max(1, int(math.Ceil(56/step)))
	for i, r := range g.Rows {
		if i%every == 0 {
			c.XLabels = append(c.XLabels, TrendLabel{X: x(i), Label: buildLabel(r)})
		}
	}
	for _, row := range trendRows() {
		st := trendStyle[row.Key]
		line := TrendLine{Key: row.Key, Label: row.Labels.History, Color: st.Color, Dash: st.Dash, Shape: st.Shape}
		var path []string
		flush := func() {
			if len(path) > 0 {
				line.Paths = append(line.Paths, strings.Join(path, " "))
			}
			path = nil
		}
		for i, r := range g.Rows {
			v := row.OfFigures(r.Figures)
			if v == nil {
				flush()
				continue
			}
			px, py := x(i), y(float64(*v))
			path = append(path, fmt.Sprintf("%.1f,%.1f", px, py))
			d := TrendDot{X: px, Y: py, Title: dotTitle(r, row, *v)}
			if ch, ok := r.Changes[row.Key]; ok {
				d.Marked = ch.Marked
			}
			line.Dots = append(line.Dots, d)
		}
		flush()
		if len(line.Dots) > 0 {
			c.Lines = append(c.Lines, line)
		}
	}
	col := make(map[string]int, n)
	for i, r := range g.Rows {
		col[r.RunID] = i
	}
	for _, ch := range changes {
		a, okA := col[ch.Before.RunID]
		b, okB := col[ch.After.RunID]
		if okA && okB {
			c.Changes = append(c.Changes, TrendChangeMark{X: r1((x(a) + x(b)) / 2), Title: ch.Title()})
		}
	}
	return c
}

func buildLabel(r regress.Row) string {
	if r.BuildNumber != nil {
		return "b" + strconv.FormatInt(*r.BuildNumber, 10)
	}
	return "?"
}

// dotTitle is a point's hover text: "packed 795.8 MiB (new ▲) · b9866
// (40f58efe1) · commit 40f58efe1a8f… (clean) · run … · 2026-11-07
// 14:03:09Z".
func dotTitle(r regress.Row, row split.Row, v split.MiB) string {
	s := fmt.Sprintf("%s %.1f MiB", row.Labels.History, float64(v))
	if ch, ok := r.Changes[row.Key]; ok {
		s += " (" + regress.ChangeText(ch) + ")"
	}
	f := r.Figures
	s += " · " + cmp.Or(f.Build, "build unknown")
	tree := "tree unknown"
	if f.Dirty != nil {
		tree = map[bool]string{true: "dirty", false: "clean"}[*f.Dirty]
	}
	return s + " · commit " + cmp.Or(f.Commit, "unknown") + " (" + tree + ") · run " + r.RunID + " · " + regress.StartedText(f.Started)
}

// trendMark is a point's shape where the template draws it.
type trendMark struct {
	X, Y               float64
	Shape, Color, Fill string
}

// markOf is the point of line l at x, y: filled when marked.
func markOf(l TrendLine, x, y float64, marked bool) trendMark {
	fill := "#fff"
	if marked {
		fill = l.Color
	}
	return trendMark{X: x, Y: y, Shape: l.Shape, Color: l.Color, Fill: fill}
}

// trendLane is one lane of the trend page's list.
type trendLane struct {
	Host, Lane, Model string
	Runs              int
	Last              string // the newest build
	Query             template.URL
}

// trendCell is one part of a row of the trend's table.
type trendCell struct {
	Value, Change string
	Marked        bool
}

// trendRow is one run of the trend's table.
type trendRow struct {
	ID, Build, Commit, Started string
	Incomplete                 bool
	Cells                      []trendCell
}

// trendChange is a lane change in the trend's list of them.
type trendChange struct {
	Builds, Range string
	Rows          []string
	Before, After string // run ids
	Compare       template.URL
}

type trendPage struct {
	Title             string
	Host, Lane, Model string
	Threshold         string
	// Changes are the lane's changes, the newest first; ChangeThresholds
	// their thresholds in words.
	Changes          []trendChange
	ChangeThresholds string
	// Lanes is the list of lanes (no lane asked for, or one without runs).
	Lanes []trendLane
	// Missing: the lane asked for has no closed run.
	Missing bool
	Heads   []string // the table's columns of figures (regress.Columns)
	Rows    []trendRow
	Chart   Charts[TrendChart]
	Legend  []TrendLine
	// Unread counts the lane's runs stored without figures and not read
	// (past the request's budget); Controls its control runs, left out.
	Unread, Controls int
	// Counts says how many runs the trend shows and leaves out.
	Counts string
}

func (h *Handler) trend(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := trendPage{Title: "gttsplit: trend", Host: q.Get("host"), Lane: q.Get("lane"), Model: q.Get("model"), Threshold: cmp.Or(q.Get("threshold"), fmt.Sprint(regress.DefaultThresholdPct))}
	thr, err := regress.ParsePct(p.Threshold)
	if err != nil {
		http.Error(w, "threshold: "+err.Error(), http.StatusBadRequest)
		return
	}
	l, err := h.listing(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if !q.Has("host") && !q.Has("lane") && !q.Has("model") {
		p.Lanes = trendLanes(l)
		h.render(w, "trend.html", p)
		return
	}
	runs, unread := h.trendRuns(r.Context(), l, func(s Summary) bool { return s.Host == p.Host && s.Lane == p.Lane })
	p.Unread = unread
	var mine []regress.Run
	for _, run := range runs {
		switch {
		case run.F.Model != p.Model:
		case run.F.ControlOf != "":
			p.Controls++
		default:
			mine = append(mine, run)
		}
	}
	hist := regress.NewHistory(mine, regress.Filter{}, thr)
	if len(hist.Groups) == 0 {
		p.Missing, p.Lanes = true, trendLanes(l)
		h.renderStatus(w, http.StatusNotFound, "trend.html", p)
		return
	}
	g := hist.Groups[0]
	th := h.opt.Thresholds
	if th == nil {
		th = regress.DefaultThresholds()
	}
	var changes []regress.LaneChange
	if lanes := regress.NewChanges(mine, regress.Filter{}, th).Lanes; len(lanes) > 0 {
		changes = lanes[0].Changes
	}
	p.ChangeThresholds = th.Text()
	for _, ch := range changes {
		tc := trendChange{Builds: ch.Before.Name() + " → " + ch.After.Name(), Before: ch.Before.RunID, After: ch.After.RunID,
			Compare: template.URL(url.Values{"a": {ch.Before.RunID}, "b": {ch.After.RunID}}.Encode())}
		if ch.Range != "" {
			tc.Range = regress.ShortCommit(ch.Before.Commit) + ".." + regress.ShortCommit(ch.After.Commit)
		}
		for _, rc := range ch.Rows {
			tc.Rows = append(tc.Rows, rc.Text())
		}
		p.Changes = append(p.Changes, tc)
	}
	p.Title = "gttsplit: trend of " + g.Title()
	p.Counts = regress.Count(len(g.Rows), "closed run", "closed runs")
	if p.Controls > 0 {
		p.Counts += " (" + regress.Count(p.Controls, "control run", "control runs") + " of the lane, offload off, left out)"
	}
	p.Chart = NewTrendChart(g, changes...)
	if p.Chart.Wide != nil {
		p.Legend = p.Chart.Wide.Lines
	}
	cols := regress.Columns()
	for _, col := range cols {
		p.Heads = append(p.Heads, col.Labels.History)
	}
	for _, row := range g.Rows {
		tr := trendRow{ID: row.RunID, Build: buildLabel(row), Commit: regress.ShortCommit(row.Figures.Commit), Started: regress.StartedText(row.Figures.Started),
			Incomplete: !row.Figures.Complete}
		for _, col := range cols {
			c := trendCell{Value: figureCell(col, row.Figures)}
			if ch, ok := row.Changes[col.Key]; ok {
				c.Change, c.Marked = regress.ChangeText(ch), ch.Marked
			}
			tr.Cells = append(tr.Cells, c)
		}
		p.Rows = append(p.Rows, tr)
	}
	slices.Reverse(p.Rows) // the newest build first in the table
	h.render(w, "trend.html", p)
}

// figureCell is a row's figure in f as the trend's table shows it: one
// decimal, with " %" for a share; "unknown" for none.
func figureCell(row split.Row, f split.Figures) string {
	v := row.OfFigures(f)
	switch {
	case v == nil:
		return "unknown"
	case row.Unit == split.UnitPct:
		return fmt.Sprintf("%.1f %%", float64(*v))
	}
	return fmt.Sprintf("%.1f", float64(*v))
}

// trendRuns returns the closed runs keep selects with their figures: from
// their summaries; else from the source's Figures (a FigureSource: the
// summary in the store, at most figuresBudget reads); else (a summary an
// earlier version wrote) from their report, at most scanBudget reads;
// unread counts the rest.
func (h *Handler) trendRuns(ctx context.Context, l *listing, keep func(Summary) bool) (runs []regress.Run, unread int) {
	budget, figBudget := scanBudget(0), figuresBudget
	fs, _ := h.src.(FigureSource)
	for _, s := range l.sums {
		switch {
		case s.State != "closed" || !keep(s):
			continue
		case s.Split != nil:
			runs = append(runs, regress.Run{ID: s.ID, Host: s.Host, Lane: s.Lane, F: *s.Split})
			continue
		case fs != nil && figBudget > 0:
			figBudget--
			if f, ok, err := fs.Figures(ctx, s.ID); err == nil && ok {
				runs = append(runs, regress.Run{ID: s.ID, Host: s.Host, Lane: s.Lane, F: f})
				continue
			}
		}
		if budget == 0 {
			unread++
			continue
		}
		budget--
		if rep, ok, err := h.src.Report(ctx, s.ID); err == nil && ok {
			runs = append(runs, regress.RunOf(regress.Input{Report: rep}))
		}
	}
	return runs, unread
}

// figuresBudget bounds the figures a trend reads from the source's store
// a request (FigureSource: a run's small summary each).
const figuresBudget = 4000

// trendLanes lists the lanes whose closed runs' summaries have figures
// (controls left out), by host, lane and model.
func trendLanes(l *listing) []trendLane {
	type key struct{ host, lane, model string }
	byKey := map[key]*trendLane{}
	last := map[key]int64{}
	for _, s := range l.sums {
		if s.State != "closed" || s.Split == nil || s.Split.ControlOf != "" {
			continue
		}
		k := key{s.Host, s.Lane, s.Split.Model}
		tl := byKey[k]
		if tl == nil {
			v := url.Values{"host": {s.Host}, "lane": {s.Lane}, "model": {s.Split.Model}}
			tl = &trendLane{Host: s.Host, Lane: s.Lane, Model: s.Split.Model, Query: template.URL(v.Encode())}
			byKey[k] = tl
		}
		tl.Runs++
		if n, ok := split.BuildNumber(s.Split.Build); ok && n >= last[k] {
			last[k], tl.Last = n, "b"+strconv.FormatInt(n, 10)
		}
	}
	out := make([]trendLane, 0, len(byKey))
	for _, tl := range byKey {
		out = append(out, *tl)
	}
	slices.SortFunc(out, func(a, b trendLane) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.Lane, b.Lane), cmp.Compare(a.Model, b.Model))
	})
	return out
}

// TrendQuery is the trend page's query of a run's host, lane and model.
func TrendQuery(r split.Report) template.URL {
	v := url.Values{"host": {r.Run.Host}, "lane": {r.Run.Lane}, "model": {split.ModelName(r)}}
	return template.URL(v.Encode())
}
