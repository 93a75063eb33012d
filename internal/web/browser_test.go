package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/app/aggregator"
	"github.com/gttsplit/gttsplit/internal/app/collector"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// Run ids of the recorded runs in testdata.
const (
	run4B   = "strix01-20261107T140311-4b"
	run27B  = "strix01-20261107T141902-27b"
	runCtl  = "strix01-20261107T141509-4b-ngl0"
	run9800 = "strix01-20261105T140311-4b" // the 4B run at b9800 (earlierBuild)
	repoTop = "../.."
)

// browser returns the path of a Chromium (or Chrome) to drive, or skips
// the test saying why; under CI=true a missing browser fails it (.ci/run
// installs Debian's chromium).
func browser(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GTTSPLIT_BROWSER"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium or Chrome on PATH (apt-get install chromium, or set GTTSPLIT_BROWSER)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; under CI=true the browser tests must run")
	}
	t.Skip(msg)
	return ""
}

// pipeline is a real `aggregator serve` (embedded NATS, HTTP on a free
// port) that recorded runs are published to as `collector replay` does.
type pipeline struct {
	base   string // http://host:port
	nats   string
	mu     sync.Mutex
	closed map[string]bool
	cancel context.CancelFunc
	done   chan error
}

func startPipeline(t *testing.T) *pipeline {
	t.Helper()
	cfg := config.DefaultAggregator()
	cfg.Embedded.Listen = "127.0.0.1:0"
	cfg.Embedded.Store = t.TempDir()
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.ShutdownTimeout = 20 * time.Second
	p := &pipeline{closed: map[string]bool{}, done: make(chan error, 1)}
	ready, httpReady := make(chan string, 1), make(chan string, 1)
	opt := aggregator.ServeOptions{
		Ready:     func(u string) { ready <- u },
		HTTPReady: func(a string) { httpReady <- a },
		OnClose: func(id string, _ split.Report) {
			p.mu.Lock()
			p.closed[id] = true
			p.mu.Unlock()
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	go func() { p.done <- aggregator.Serve(ctx, cfg, opt, log) }()
	for p.base == "" || p.nats == "" {
		select {
		case a := <-httpReady:
			p.base = "http://" + a
		case u := <-ready:
			p.nats = u
		case err := <-p.done:
			t.Fatalf("serve: %v", err)
		case <-time.After(60 * time.Second):
			t.Fatal("serve did not become ready")
		}
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-p.done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Error("serve did not stop")
		}
	})
	return p
}

// replay publishes recorded streams with the collector's replay.
func (p *pipeline) replay(t *testing.T, files ...string) {
	t.Helper()
	cc := config.DefaultCollector()
	cc.NATS.URL = p.nats
	cc.Spool.Dir = t.TempDir()
	for i, f := range files {
		if !filepath.IsAbs(f) {
			files[i] = filepath.Join(repoTop, f)
		}
	}
	_, err := collector.Replay(context.Background(), cc, files, collector.IO{}, zerolog.Nop())
	require.NoError(t, err)
}

// waitListed waits until the aggregator serves a run (open or not).
func (p *pipeline) waitListed(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(p.base + "/runs/" + id)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s not served after 60s", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// splitStream writes the first n events of a recorded stream and the
// rest to two files (a run published in two goes: open, then finished).
func splitStream(t *testing.T, rel string, n int) (head, tail string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoTop, rel))
	require.NoError(t, err)
	lines := strings.SplitAfter(string(b), "\n")
	require.Greater(t, len(lines), n)
	dir := t.TempDir()
	head, tail = filepath.Join(dir, "head.jsonl"), filepath.Join(dir, "tail.jsonl")
	require.NoError(t, os.WriteFile(head, []byte(strings.Join(lines[:n], "")), 0o644))
	require.NoError(t, os.WriteFile(tail, []byte(strings.Join(lines[n:], "")), 0o644))
	return head, tail
}

// earlierBuild writes the 4B run as the same command measured two days
// before at build b9800, whose backend kept no packed copy: the build line,
// the run id and every resident= of the host-weight trace rewritten (0.0
// MiB). The peak, from the samples, stays.
func earlierBuild(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoTop, "testdata/runs/4b/events.jsonl"))
	require.NoError(t, err)
	s := strings.NewReplacer("build 9866 (40f58efe1)", "build 9800 (1a2b3c4d5)", run4B, run9800).Replace(string(b))
	s = regexp.MustCompile(`resident=\d+\.\d+ MiB`).ReplaceAllString(s, "resident=0.0 MiB")
	path := filepath.Join(t.TempDir(), "b9800.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(s), 0o644))
	return path
}

// waitBody waits until GET url answers 200 with want in its body.
func (p *pipeline) waitBody(t *testing.T, url, want string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(b), want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no %s after 60s", url, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *pipeline) waitClosed(t *testing.T, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		p.mu.Lock()
		n := 0
		for _, id := range ids {
			if p.closed[id] {
				n++
			}
		}
		p.mu.Unlock()
		if n == len(ids) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs %v not all closed after 60s", ids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// minFontJS is the smallest label of the charts on screen, in CSS
// pixels: each visible SVG text's font size times its chart's scale.
const minFontJS = `(() => {
  let min = 1e9, n = 0;
  for (const el of document.querySelectorAll("svg.bars text, svg.timeline text, svg.trend text")) {
    if (el.getClientRects().length === 0) continue; // a hidden layout
    const m = el.getScreenCTM();
    if (!m) continue;
    min = Math.min(min, parseFloat(getComputedStyle(el).fontSize) * m.a);
    n++;
  }
  return n > 0 ? min : -1;
})()`

// labelsOffCurveJS lists, for the timeline svg of id, each label (of a
// marker, the peak, the final sample) that crosses the GTT curve, a mark
// or another label, or leaves the chart, as the browser lays them out
// (their boxes in the chart's coordinates).
func labelsOffCurveJS(id string) string {
	return `(() => {
  const svg = document.getElementById("` + id + `");
  const pts = svg.querySelector("polyline.gtt-line").getAttribute("points").trim().split(/\s+/).map(p => p.split(",").map(Number));
  const texts = [...svg.querySelectorAll("g.marker text, g.peak text, g.final text")];
  const marks = [...svg.querySelectorAll("g.peak use, g.final use")].map(u => u.getBBox());
  const view = svg.viewBox.baseVal;
  const hit = (a, b) => a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
  const bad = [];
  const boxes = texts.map(t => t.getBBox());
  texts.forEach((t, i) => {
    const b = boxes[i];
    for (let k = 1; k < pts.length; k++) {
      const [x0, y0] = pts[k-1], [x1, y1] = pts[k];
      if (hit(b, {x: Math.min(x0, x1), y: Math.min(y0, y1), width: Math.abs(x1 - x0), height: Math.abs(y1 - y0)})) { bad.push(t.textContent + ": on the curve"); break; }
    }
    for (const m of marks) if (hit(b, m)) bad.push(t.textContent + ": on a mark");
    boxes.forEach((o, j) => { if (j > i && hit(b, o)) bad.push(t.textContent + ": on " + texts[j].textContent); });
    if (b.x < 0 || b.y < 0 || b.x + b.width > view.width || b.y + b.height > view.height) bad.push(t.textContent + ": outside the chart");
  });
  return bad;
})()`
}

// oneLineJS lists the cells of the runs list that should hold one line (a
// run id, a model file, a start time) but take more, or whose title is
// not their whole text.
const oneLineJS = `(() => {
  const bad = [];
  for (const row of document.querySelectorAll("tr.run")) {
    for (const sel of ["td.c-run a.cut", "td.c-model .cut", "td.c-started .cut", "td.c-host .cut", "td.c-lane .cut", "td.c-issue .cut"]) {
      const el = row.querySelector(sel);
      if (!el || el.textContent.trim() === "") continue;
      const lines = el.getBoundingClientRect().height / parseFloat(getComputedStyle(el).lineHeight || "20");
      if (el.getClientRects().length !== 1 || el.getBoundingClientRect().height > 1.8 * parseFloat(getComputedStyle(el).fontSize)) bad.push(row.dataset.run + " " + sel + ": " + lines.toFixed(1) + " lines");
      const whole = sel.startsWith("td.c-started") ? el.firstChild.textContent.trim() : el.textContent.trim();
      if (!el.title.startsWith(whole)) bad.push(row.dataset.run + " " + sel + ": title " + JSON.stringify(el.title) + " is not " + JSON.stringify(whole));
    }
  }
  return bad;
})()`

// TestBrowserPages drives headless Chromium against a real aggregator fed
// by the collector's replay of the recorded runs: the runs list shows the
// reference runs, one page at a time (?limit=, a next link); the 4B run's
// page its 3925.0 MiB peak and the timeline's peak marker; a run's page
// follows the run while it is published (unknown rows until the log's
// model load, then its split, without a reload); a run published while
// the list is open appears without a reload; at 390 px the list shows
// peak, final and flags first with nothing behind a sideways scroll, and
// the charts' labels keep a readable size; and the compare page shows the
// difference of a run and its control. Screenshots go to the test's temp
// dir (or GTTSPLIT_SCREENSHOTS); their paths are logged.
func TestBrowserPages(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser and the whole pipeline")
	}
	exe := browser(t)
	p := startPipeline(t)
	// The 27B run is published in two goes: its first 20 events (samples
	// and log lines, no model buffer line yet), then the rest.
	// The 4B run first, so the 27B run's activity is the newest.
	head27, tail27 := splitStream(t, "testdata/runs/27b/events.jsonl", 20)
	p.replay(t, "testdata/runs/4b/events.jsonl")
	p.waitClosed(t, run4B)
	p.replay(t, head27)
	p.waitListed(t, run27B)

	// Chromium now and then dies at start on a loaded machine (crashpad,
	// no stack mapping): a start is tried three times, each with a fresh
	// profile, and every failure is logged.
	var bctx context.Context
	for attempt := 1; ; attempt++ {
		opts := []chromedp.ExecAllocatorOption{
			chromedp.ExecPath(exe),
			chromedp.UserDataDir(t.TempDir()),
			chromedp.Flag("headless", true),
			chromedp.Flag("no-sandbox", true),
			chromedp.Flag("disable-gpu", true),
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("no-first-run", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.WindowSize(1100, 1300),
		}
		actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancelB := chromedp.NewContext(actx)
		// The first call starts the browser, on a context without a timeout
		// (a timeout there would stop the browser); each step below has its own.
		err := chromedp.Do(ctx, chromedp.Navigate("about:blank"))
		if err == nil {
			t.Cleanup(cancelA)
			t.Cleanup(cancelB)
			bctx = ctx
			break
		}
		cancelB()
		cancelA()
		if attempt == 3 {
			require.NoError(t, err, "chromium did not start in 3 attempts")
		}
		t.Logf("chromium did not start (attempt %d of 3): %v", attempt, err)
	}
	step := func() context.Context {
		ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	shots := os.Getenv("GTTSPLIT_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(shots, 0o755))
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			b, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			path := filepath.Join(shots, name+".png")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				return err
			}
			t.Logf("screenshot: %s", path)
			fmt.Fprintf(os.Stderr, "screenshot: %s\n", path)
			return nil
		})
	}
	// elementShot saves a picture of one element, at twice the scale, to
	// look at its details.
	elementShot := func(sel, name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			b, err := chromedp.ScreenshotScale(chromedp.CSS(sel), 2)(ctx, tg)
			if err != nil {
				return err
			}
			path := filepath.Join(shots, name+".png")
			t.Logf("screenshot: %s", path)
			return os.WriteFile(path, b, 0o644)
		})
	}
	row := func(id string) chromedp.CSS { return chromedp.CSS(`tr[data-run="` + id + `"]`) }
	text := func(ctx context.Context, sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err, sel)
		return s
	}
	eval := func(ctx context.Context, js string) float64 {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[float64](js))
		require.NoError(t, err, js)
		return v
	}
	waitFor := func(ctx context.Context, js string) {
		t.Helper()
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(50*time.Second)))
		require.NoError(t, err, "waiting for %s", js)
	}

	// The runs list: both reference runs (the 27B still open).
	ctx := step()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(p.base+"/"),
		chromedp.WaitVisible(row(run4B)),
		chromedp.WaitVisible(row(run27B)),
		shot("runs"),
	))
	list := text(ctx, "#runs")
	require.Contains(t, list, "3925.0")
	require.Contains(t, list, "20497.0")
	strs := func(ctx context.Context, js string) []string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](js))
		require.NoError(t, err, js)
		return v
	}
	// At 1100 px a run is one line but for its flags: its id, model file
	// and start are cut where the column is narrow, whole on hover; the
	// list fits the window.
	require.Empty(t, strs(ctx, oneLineJS), "cells of more than one line at 1100 px")
	require.LessOrEqual(t, eval(ctx, `document.documentElement.scrollWidth`), eval(ctx, `window.innerWidth`), "a sideways scroll at 1100 px")

	// One run a page: the next link walks them, newest activity first.
	ctx = step()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(p.base+"/?limit=1"), chromedp.WaitVisible(row(run27B))))
	require.Equal(t, 1.0, eval(ctx, `document.querySelectorAll("tr.run").length`))
	require.Contains(t, text(ctx, "#pager"), "runs 1–1 of 2")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#next-page")), chromedp.WaitVisible(row(run4B)), shot("runs-page-2")))
	require.Equal(t, 1.0, eval(ctx, `document.querySelectorAll("tr.run").length`))
	require.Contains(t, text(ctx, "#pager"), "runs 2–2 of 2")
	require.Equal(t, 0.0, eval(ctx, `document.querySelectorAll("#next-page").length`), "the last page")

	// The 4B run's page: the peak, the timeline's peak marker, and labels
	// the size they are drawn at.
	ctx = step()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(p.base+"/run/"+run4B),
		chromedp.WaitVisible(chromedp.CSS("#peak-marker")),
		shot("run-4b"),
	))
	require.Equal(t, "3925.0 MiB", text(ctx, "#peak"))
	marker, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS("#peak-marker text"))) // SVG: no innerText
	require.NoError(t, err)
	require.Equal(t, "peak 3925.0 MiB", marker)
	font := eval(ctx, minFontJS)
	t.Logf("smallest chart label at 1100 px: %.1f px", font)
	require.GreaterOrEqual(t, font, 11.0, "chart labels at 1100 px")
	// The timeline's labels (final, ctx, load, peak) are off the curve,
	// the marks and each other; the caption's legend draws the peak and
	// final marks with the symbols the chart draws.
	require.Empty(t, strs(ctx, labelsOffCurveJS("timeline")), "timeline labels at 1100 px")
	require.NoError(t, chromedp.Do(ctx, elementShot("#timeline", "timeline-4b")))
	require.Equal(t, []string{"#m-peak", "#m-final"}, strs(ctx, `[...document.querySelectorAll("#timeline-caption svg.mark use")].map(u => u.getAttribute("href"))`))
	require.Equal(t, []string{"#m-peak", "#m-final"}, strs(ctx, `[...document.querySelectorAll("#peak-marker use, #final-marker use")].map(u => u.getAttribute("href"))`))
	require.NotContains(t, text(ctx, "#timeline-caption"), "○", "the caption's peak mark is the drawn one, not a character")

	// A run's page follows the run: the open 27B run's rows are unknown
	// until its log's model load is folded, then its split is there,
	// without a reload.
	ctx = step()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(p.base+"/run/"+run27B),
		chromedp.WaitVisible(chromedp.CSS("#status")),
		shot("run-27b-open"),
	))
	require.Equal(t, "in progress", text(ctx, "#status"))
	require.Equal(t, "unknown", text(ctx, "#unattributed"))
	require.Equal(t, "20497.0 MiB", text(ctx, "#peak"))
	require.NotContains(t, text(ctx, "table.legend"), "100.0 %")
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`window.gttsplitNoReload = true`))
	require.NoError(t, err)
	p.replay(t, tail27)
	waitFor(ctx, `document.getElementById("status").textContent === "complete"`)
	require.NoError(t, chromedp.Do(ctx, shot("run-27b-live")))
	require.Empty(t, strs(ctx, labelsOffCurveJS("timeline")), "the 27B run's timeline labels")
	require.NoError(t, chromedp.Do(ctx, elementShot("#timeline", "timeline-27b")))
	require.Equal(t, "1909.5 MiB, 9.3 % of the peak", text(ctx, "#unattributed"))
	kept, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.gttsplitNoReload === true`))
	require.NoError(t, err)
	require.True(t, kept, "the run's page was reloaded")
	require.Contains(t, text(ctx, "#live"), "updated ")
	require.Regexp(t, `updated \d\d:\d\d:\d\dZ\)$`, text(ctx, "#live"), "UTC, 24 hours")

	// A run published while the list is open appears without a reload: a
	// value set on the page is still there when the row is.
	ctx = step()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(p.base+"/"),
		chromedp.WaitVisible(row(run4B)),
	))
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`window.gttsplitNoReload = true`))
	require.NoError(t, err)
	p.replay(t, "testdata/controls/4b-ngl0/events.jsonl")
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(row(runCtl)), shot("runs-live")))
	kept, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`window.gttsplitNoReload === true`))
	require.NoError(t, err)
	require.True(t, kept, "the page was reloaded")

	// At 390 px (a phone): no sideways scroll; each run's peak, final and
	// flags come right after its id; the charts' labels stay readable. (A
	// mobile viewport widens itself to what overflows, so the page is held
	// to the device's 390 px, not to innerWidth.)
	const phone = 390.0
	// readableAt390 checks the page at 390 px: no sideways scroll, and
	// chart labels of 10 px or more (they were about 5 px once).
	readableAt390 := func(ctx context.Context, what string) {
		t.Helper()
		require.LessOrEqual(t, eval(ctx, `document.documentElement.scrollWidth`), phone, "%s: a sideways scroll at 390 px", what)
		font := eval(ctx, minFontJS)
		t.Logf("smallest %s label at 390 px: %.1f px", what, font)
		require.GreaterOrEqual(t, font, 10.0, "%s labels at 390 px", what)
	}
	ctx = step()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.EmulateViewport(390, 844, chromedp.EmulatePortrait, chromedp.EmulateMobile),
		chromedp.Navigate(p.base+"/"),
		chromedp.WaitVisible(row(run4B)),
		shot("runs-390"),
	))
	require.LessOrEqual(t, eval(ctx, `document.documentElement.scrollWidth`), phone, "a sideways scroll at 390 px")
	cell := func(c string) string {
		return `document.querySelector('tr[data-run="` + run4B + `"] td.` + c + `').getBoundingClientRect()`
	}
	for _, c := range []string{"c-peak", "c-final", "c-flags"} {
		require.LessOrEqual(t, eval(ctx, cell(c)+`.right`), phone, "%s off screen", c)
		require.Greater(t, eval(ctx, cell(c)+`.width`), 0.0, "%s hidden", c)
		require.Less(t, eval(ctx, cell(c)+`.top`), eval(ctx, cell("c-host")+`.top`), "%s after the host", c)
	}
	require.Contains(t, text(ctx, `tr[data-run="`+run4B+`"] td.c-peak`), "3925.0")
	require.Empty(t, strs(ctx, oneLineJS), "cells of more than one line at 390 px")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(p.base+"/run/"+run4B),
		chromedp.WaitVisible(chromedp.CSS("#peak-marker-narrow")),
		shot("run-4b-390"),
	))
	readableAt390(ctx, "run page chart")
	require.Empty(t, strs(ctx, labelsOffCurveJS("timeline-narrow")), "timeline labels at 390 px")
	require.NoError(t, chromedp.Do(ctx, elementShot("#timeline-narrow", "timeline-4b-390")))
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1100, 1300)))

	// The compare page: the difference of the peaks and the verdict.
	ctx = step()
	q := url.Values{"a": {run4B}, "b": {runCtl}}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(p.base+"/compare?"+q.Encode()),
		chromedp.WaitVisible(chromedp.CSS("#verdict")),
		shot("compare"),
	))
	require.Equal(t, "weights resident twice: the difference of the peaks is 3171.7 MiB ≈ model buffer + packed copy (2375.9 + 795.8 = 3171.7 MiB)", text(ctx, "#verdict"))
	f := strings.Fields(text(ctx, `#compare tr[data-key="peak_gtt_mib"]`))
	require.GreaterOrEqual(t, len(f), 3)
	require.Equal(t, []string{"3925.0", "753.3", "+3171.7"}, f[len(f)-3:])

	// The trend of the 4B lane, from its run's page: the 4B run and the
	// same command at an earlier build without the packed copy, published
	// now; the newest build first in the table, the packed copy's return
	// marked, each point titled with its build and commit; the control is
	// not in it. At 390 px its narrow chart, readable, no sideways scroll.
	p.replay(t, earlierBuild(t))
	p.waitClosed(t, run9800)
	trendQ := url.Values{"host": {"strix01"}, "lane": {"gpu0"}, "model": {"Qwen3.5-4B-Q4_K_M.gguf"}}
	trend := p.base + "/trend?" + trendQ.Encode()
	p.waitBody(t, trend, run9800) // its summary reaches the run index
	ctx = step()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(p.base+"/run/"+run4B),
		chromedp.WaitVisible(chromedp.CSS("#trend-link")),
	))
	// The run page's link leads to this trend; followed by navigating to
	// its href (a click's coordinates can miss on a slow machine while the
	// page lays out, and a missed click waits out the step).
	href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#trend-link").href`))
	require.NoError(t, err)
	linked, err := url.Parse(href)
	require.NoError(t, err)
	require.Equal(t, "/trend", linked.Path)
	require.Equal(t, trendQ, linked.Query())
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(href),
		chromedp.WaitVisible(chromedp.CSS("#trend")),
		shot("trend"),
	))
	require.Contains(t, text(ctx, "h1"), "Trend of strix01 · gpu0 · Qwen3.5-4B-Q4_K_M.gguf")
	order, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#trend-rows tr[data-run]")].map(r => r.dataset.run)`))
	require.NoError(t, err)
	require.Equal(t, []string{run4B, run9800}, order)
	require.Equal(t, "795.8\nnew ▲", strings.TrimSpace(text(ctx, `tr[data-run="`+run4B+`"] td.marked`)))
	titles, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#trend g[data-part=packed] title")].map(e => e.textContent)`))
	require.NoError(t, err)
	require.Len(t, titles, 2)
	require.True(t, strings.HasPrefix(titles[0], "packed 0.0 MiB · b9800 (1a2b3c4d5) · commit 40f58efe1a8f"), titles[0])
	require.True(t, strings.HasPrefix(titles[1], "packed 795.8 MiB (new ▲) · b9866 (40f58efe1) · commit 40f58efe1a8f"), titles[1])
	require.Equal(t, 0.0, eval(ctx, `document.querySelectorAll('tr[data-run="`+runCtl+`"]').length`), "the control is not in the trend")
	// The packed copy's return is a lane change: marked between the two
	// builds on the chart, listed under it with both runs and their
	// comparison.
	require.Equal(t, 1.0, eval(ctx, `document.querySelectorAll("#trend g.lane-change").length`))
	mark := eval(ctx, `document.querySelector("#trend g.lane-change line").getBoundingClientRect().x`)
	dots, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`[...document.querySelectorAll("#trend g[data-part=packed] g.trend-dot")].map(e => e.getBoundingClientRect().x)`))
	require.NoError(t, err)
	require.Len(t, dots, 2)
	require.True(t, dots[0] < mark && mark < dots[1], "the mark between b9800 (%v) and b9866 (%v): %v", dots[0], dots[1], mark)
	require.Contains(t, text(ctx, "#trend-changes"), "b9800 → b9866")
	require.Contains(t, text(ctx, "#trend-changes"), "packed 0.0 → 795.8 (+795.8 MiB, new)")
	require.Equal(t, 3.0, eval(ctx, `document.querySelectorAll("#trend-changes a").length`), "both runs and their comparison")
	font = eval(ctx, minFontJS)
	require.GreaterOrEqual(t, font, 11.0, "trend labels at 1100 px")
	// The table fits 1100 px: no sideways scroll, the duplicate column
	// shown; the run id whole on hover.
	require.LessOrEqual(t, eval(ctx, `document.querySelector(".trend-rows").scrollWidth`), eval(ctx, `document.querySelector(".trend-rows").clientWidth`), "the trend table scrolls sideways at 1100 px")
	require.Equal(t, []string{run4B, run9800}, strs(ctx, `[...document.querySelectorAll("#trend-rows td.c-run a")].map(a => a.title)`))
	require.NoError(t, chromedp.Do(ctx,
		chromedp.EmulateViewport(390, 844, chromedp.EmulatePortrait, chromedp.EmulateMobile),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS("#trend-narrow")),
		shot("trend-390"),
	))
	readableAt390(ctx, "trend chart")
	require.LessOrEqual(t, eval(ctx, `document.documentElement.scrollWidth`), 390.0, "a sideways scroll of the trend at 390 px")
}
