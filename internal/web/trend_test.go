package web

import (
	"context"
	"errors"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// addFigures adds a closed run whose summary has its figures, as the
// aggregator's run index keeps them.
func (m *memSource) addFigures(r split.Report) {
	m.add(r)
	f := split.FiguresOf(r)
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.sums {
		if m.sums[i].ID == r.Run.ID {
			m.sums[i].Split = &f
		}
	}
}

// atBuild is the 4B run as run id id measured it at build, with its
// packed copy as given.
func atBuild(r split.Report, id, build, started string, packed float64) split.Report {
	r.Run.ID, r.Run.Started, r.Provenance.LlamaBuild = id, started, build
	p := split.MiB(packed)
	r.PackedMiB = &p
	return r
}

// The 4B lane over three builds (the packed copy absent at b9800, back at
// b9866, gone at b9900; one of them stored by an earlier version, without
// its figures in the summary), its control and the 27B lane: the trend
// of the 4B lane draws a line per part with a point per run (its title
// naming the build and commit), lists the runs newest build first with the
// regression marked, and leaves the control out.
func TestTrendPage(t *testing.T) {
	src := &memSource{}
	on := replay(t, "testdata/runs/4b/events.jsonl")
	src.addFigures(atBuild(on, "strix01-20261110T100000-4b", "b9900 (5e6f70819)", "2026-11-10T10:00:00Z", 0))
	src.addFigures(on)
	src.add(atBuild(on, "strix01-20261105T100000-4b", "b9800 (1a2b3c4d5)", "2026-11-05T10:00:00Z", 0)) // no figures in its summary
	src.addFigures(replay(t, "testdata/controls/4b-ngl0/events.jsonl"))
	src.addFigures(replay(t, "testdata/runs/27b/events.jsonl"))
	srv, _ := serve(t, src, Options{Loopback: true})
	q := url.Values{"host": {"strix01"}, "lane": {"gpu0"}, "model": {"Qwen3.5-4B-Q4_K_M.gguf"}}

	page := html.UnescapeString(get(t, srv.URL+"/trend?"+q.Encode(), http.StatusOK))
	require.Contains(t, page, "3 closed runs (1 control run of the lane, offload off, left out) over llama.cpp builds")
	require.Contains(t, page, `<svg id="trend" class="trend"`)
	require.Contains(t, page, `<svg id="trend-narrow" class="trend"`)
	for _, row := range trendRows() {
		require.Contains(t, page, `<g class="trend-line" data-part="`+row.Key+`">`)
	}
	require.Contains(t, page, "<title>packed 795.8 MiB (new ▲) · b9866 (40f58efe1) · commit 40f58efe1a8f4c3e9d2b7a6c5e4f3a2b1c0d9e8f (clean) · run strix01-20261107T140311-4b · 2026-11-07 14:03:09Z</title>")
	require.Contains(t, page, "<title>packed 0.0 MiB (-100.0 % ▼) · b9900 (5e6f70819)")
	require.Contains(t, page, "<title>packed 0.0 MiB · b9800 (1a2b3c4d5)")
	require.Contains(t, page, `<g class="trend-dot marked">`)
	// The table, newest build first, the return of the packed copy marked.
	i9900, i9866, i9800 := strings.Index(page, `<tr data-run="strix01-20261110T100000-4b">`), strings.Index(page, `<tr data-run="strix01-20261107T140311-4b">`), strings.Index(page, `<tr data-run="strix01-20261105T100000-4b">`)
	require.True(t, i9900 > 0 && i9900 < i9866 && i9866 < i9800, "rows newest build first: %d %d %d", i9900, i9866, i9800)
	row := page[i9866 : strings.Index(page[i9866:], "</tr>")+i9866]
	require.Contains(t, row, `<td class="n marked"><b>795.8</b><br><span class="muted">new ▲</span></td>`)
	require.NotContains(t, page, "strix01-20261107T141509-4b-ngl0")
	require.NotContains(t, page, "27B")

	// Every run's page links its lane's trend.
	run := html.UnescapeString(get(t, srv.URL+"/run/strix01-20261107T140311-4b", http.StatusOK))
	require.Contains(t, run, `<a id="trend-link" href="/trend?`+q.Encode()+`">`)

	// Without a lane: the lanes, each a link (the summaries with figures).
	lanes := html.UnescapeString(get(t, srv.URL+"/trend", http.StatusOK))
	require.Contains(t, lanes, `<a href="/trend?`+q.Encode()+`">Qwen3.5-4B-Q4_K_M.gguf</a></td><td class="n">2</td><td>b9900</td>`)
	require.Contains(t, lanes, "Qwen3.5-27B-Q4_K_M-00001-of-00002.gguf")
	require.NotContains(t, lanes, "ngl0")

	// A lane without runs, a bad threshold.
	q.Set("lane", "gpu7")
	require.Contains(t, get(t, srv.URL+"/trend?"+q.Encode(), http.StatusNotFound), "No closed run of host strix01, lane gpu7")
	get(t, srv.URL+"/trend?threshold=x&"+q.Encode(), http.StatusBadRequest)
	q.Set("lane", "gpu0")
	q.Set("threshold", "2000")
	require.NotContains(t, get(t, srv.URL+"/trend?"+q.Encode(), http.StatusOK), "-100.0 % ▼")
}

// The chart's geometry: a column per run in order, a line broken where a
// part is unknown, build labels thinned to fit, every point in the plot.
func TestTrendChart(t *testing.T) {
	m := func(v float64) *split.MiB { x := split.MiB(v); return &x }
	var runs []regress.Run
	for i := range 40 {
		f := split.Figures{Model: "m", Build: "b" + string(rune('1'+i/10)) + string(rune('0'+i%10)) + " (abc)", PeakGTTMiB: m(1000 + float64(i)), ModelGTTMiB: m(500)}
		if i != 7 {
			f.PackedMiB = m(100)
		}
		runs = append(runs, regress.Run{ID: string(rune('A' + i)), Host: "h", Lane: "l", F: f})
	}
	g := regress.NewHistory(runs, regress.Filter{}, 5).Groups[0]
	c := NewTrendChart(g)
	require.NotNil(t, c.Wide)
	require.NotNil(t, c.Narrow)
	lines := map[string]TrendLine{}
	for _, l := range c.Wide.Lines {
		lines[l.Key] = l
	}
	require.Len(t, lines, 3, "peak, model, packed: the parts no run knows are not drawn")
	require.Len(t, lines["packed"].Paths, 2, "broken at the run without it")
	require.Len(t, lines["packed"].Dots, 39)
	require.Len(t, lines["peak"].Dots, 40)
	for _, ch := range []*TrendChart{c.Wide, c.Narrow} {
		for _, l := range ch.Lines {
			for i, d := range l.Dots {
				require.True(t, d.X > ch.Left && d.X < ch.Right && d.Y >= ch.Top && d.Y <= ch.Bottom, "%s dot %d off the plot", l.Key, i)
				if i > 0 {
					require.Greater(t, d.X, l.Dots[i-1].X)
				}
			}
		}
		require.Less(t, len(ch.XLabels), 40, "labels thinned")
		for i := 1; i < len(ch.XLabels); i++ {
			require.GreaterOrEqual(t, ch.XLabels[i].X-ch.XLabels[i-1].X, 55.0, "labels apart")
		}
	}
	require.Equal(t, "b10", c.Wide.XLabels[0].Label)
	require.Nil(t, NewTrendChart(regress.Group{}).Wide)
}

// The trend marks the lane's changes: a line between the columns of the
// two builds (its title names them, the commits to bisect and what
// moved) and, under the chart, the changes newest first with links to
// both runs and their comparison. Other thresholds mark other changes.
func TestTrendMarksLaneChanges(t *testing.T) {
	src := &memSource{}
	on := replay(t, "testdata/runs/4b/events.jsonl")
	// The builds' own commits: the ones their build lines name.
	at := func(id, build, started string, packed float64) split.Report {
		r := atBuild(on, id, build, started, packed)
		r.Provenance.SourceCommit = split.BuildCommit(build)
		return r
	}
	src.addFigures(at("strix01-20261110T100000-4b", "b9900 (5e6f70819)", "2026-11-10T10:00:00Z", 0))
	src.addFigures(on)
	src.add(at("strix01-20261105T100000-4b", "b9800 (1a2b3c4d5)", "2026-11-05T10:00:00Z", 0))
	src.addFigures(replay(t, "testdata/controls/4b-ngl0/events.jsonl"))
	srv, _ := serve(t, src, Options{Loopback: true})
	q := url.Values{"host": {"strix01"}, "lane": {"gpu0"}, "model": {"Qwen3.5-4B-Q4_K_M.gguf"}}
	page := html.UnescapeString(get(t, srv.URL+"/trend?"+q.Encode(), http.StatusOK))

	require.Equal(t, 4, strings.Count(page, `<g class="lane-change">`), "two changes, on the wide and the narrow chart")
	require.Contains(t, page, "<title>b9866 → b9900 (bisect 40f58efe1..5e6f70819): packed 795.8 → 0.0 (-795.8 MiB, -100.0 %)</title>")
	require.Contains(t, page, `<tr data-key="lane-change">`)
	i := strings.Index(page, `<ol id="trend-changes">`)
	require.Positive(t, i)
	table := page[i : i+strings.Index(page[i:], "</ol>\n")]
	newest, oldest := strings.Index(table, "b9866 → b9900"), strings.Index(table, "b9800 → b9866")
	require.True(t, newest > 0 && oldest > newest, "newest first:\n%s", table)
	require.Contains(t, table, `<b>b9800 → b9866</b> · bisect <code style="white-space:nowrap">1a2b3c4d5..40f58efe1</code>`)
	require.Contains(t, table, "<li>packed 0.0 → 795.8 (+795.8 MiB, new)</li>")
	require.Contains(t, table, `<a href="/run/strix01-20261105T100000-4b">strix01-20261105T100000-4b</a> → <a href="/run/strix01-20261107T140311-4b">strix01-20261107T140311-4b</a> · <a href="/compare?a=strix01-20261105T100000-4b&b=strix01-20261107T140311-4b">compare</a>`)
	require.NotContains(t, table, "ngl0", "the controls are not the lane's")

	// The x of each mark lies between its two builds' columns.
	wide := page[strings.Index(page, `<svg id="trend" `):]
	wide = wide[:strings.Index(wide, "</svg>")]
	// Three columns at 181.7, 405 and 628.3: the marks half way (rounded).
	require.Contains(t, wide, `<text x="181.7" y="318" text-anchor="middle">b9800</text>`)
	require.Contains(t, wide, `<text x="628.3" y="318" text-anchor="middle">b9900</text>`)
	require.Contains(t, wide, `<g class="lane-change"><line x1="293.4" x2="293.4" y1="40" y2="300"`)
	require.Contains(t, wide, `<g class="lane-change"><line x1="516.7" x2="516.7" y1="40" y2="300"`)

	// Thresholds that watch none of what moved: no change.
	th, err := regress.ParseThresholds("peak=off,final=off,packed=off,duplicate=off")
	require.NoError(t, err)
	srv, _ = serve(t, src, Options{Loopback: true, Thresholds: th})
	page = get(t, srv.URL+"/trend?"+q.Encode(), http.StatusOK)
	require.NotContains(t, page, `<g class="lane-change">`)
	require.Contains(t, page, `<p id="no-changes">`)
}

// evictedSource holds no figures in its summaries (its run index evicted
// them) and reads them from its store (FigureSource) without the runs'
// reports.
type evictedSource struct {
	*memSource
	figures int // Figures calls
}

func (e *evictedSource) Figures(_ context.Context, id string) (split.Figures, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.figures++
	r, ok := e.runs[id]
	if !ok {
		return split.Figures{}, false, nil
	}
	return split.FiguresOf(r), true, nil
}

func (e *evictedSource) Report(context.Context, string) (split.Report, bool, error) {
	return split.Report{}, false, errors.New("not read: the trend reads figures")
}

// A lane whose runs' figures the source does not hold in memory: the
// trend reads them from the source's store (a small summary each), not
// the runs' reports, and shows every run with its changes.
func TestTrendReadsEvictedFigures(t *testing.T) {
	src := &evictedSource{memSource: &memSource{}}
	on := replay(t, "testdata/runs/4b/events.jsonl")
	src.add(atBuild(on, "strix01-20261110T100000-4b", "b9900 (5e6f70819)", "2026-11-10T10:00:00Z", 0))
	src.add(on)
	src.add(atBuild(on, "strix01-20261105T100000-4b", "b9800 (1a2b3c4d5)", "2026-11-05T10:00:00Z", 0))
	srv, _ := serve(t, src, Options{Loopback: true})
	q := url.Values{"host": {"strix01"}, "lane": {"gpu0"}, "model": {"Qwen3.5-4B-Q4_K_M.gguf"}}
	page := html.UnescapeString(get(t, srv.URL+"/trend?"+q.Encode(), http.StatusOK))
	require.Contains(t, page, "3 closed runs")
	require.Contains(t, page, "<title>packed 795.8 MiB (new ▲) · b9866 (40f58efe1)")
	require.Contains(t, page, `<g class="trend-dot marked">`)
	src.mu.Lock()
	defer src.mu.Unlock()
	require.Equal(t, 3, src.figures)
}
