// Package web is the aggregator's live page, served on the same listener
// as /metrics: the runs across hosts and lanes (newest activity first,
// paged, filterable, updated live through server-sent events), a run's
// page with its split as stacked bars and its GTT timeline (updated live
// too), a page comparing two runs, and a lane's trend over llama.cpp
// builds (trend.go). It is read-only. Everything is
// rendered on the server from embedded templates (html/template, SVG for
// the charts): no build step, no CDN, no script beyond a few lines of
// EventSource, so it works offline.
//
// On a loopback listener there is no login. On any other address the pages
// need the token of http.token (see httpguard.Guard); with no token configured they
// are refused.
package web

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/httpguard"
	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/present"
)

//go:embed templates/*.html
var templateFS embed.FS

// Summary is one run as the source lists it.
type Summary struct {
	ID, Host, Lane string
	State          string // open, finished or closed
	LastEvent      time.Time
	// Split is a closed run's figures (nil when the source has none:
	// the trend page then reads its report).
	Split *split.Figures
}

// Source is where the pages read runs from (the aggregator's service).
// Summaries must be cheap (the aggregator answers from its in-memory run
// index); Report may read a run's state from the store, so the pages call
// it only for the runs they show.
type Source interface {
	Summaries(ctx context.Context) ([]Summary, error)
	Report(ctx context.Context, id string) (split.Report, bool, error)
}

// Unlister is a Source that may leave runs out of Summaries (to keep its
// memory bounded): Unlisted says how many, and why in a sentence ("" when
// none). The list says so above its pager.
type Unlister interface {
	Unlisted() (int64, string)
}

// FigureSource is a Source that can read a closed run's figures without
// its report (the aggregator reads the run's summary from the store when
// its run index no longer holds it): the trend page reads those first.
type FigureSource interface {
	Figures(ctx context.Context, id string) (split.Figures, bool, error)
}

// Options configure the pages.
type Options struct {
	// Token is required on a listener that is not loopback ("" refuses
	// the pages there).
	Token string
	// Loopback says the listener is on a loopback address: no login.
	Loopback bool
	// Poll is how often the live list and a live run page look for
	// changes (default 1s).
	Poll time.Duration
	// Now is the clock for "5 min ago" (default time.Now).
	Now func() time.Time
	// PageSize is how many runs a page of the list shows unless ?limit=
	// says otherwise (default 100, at most MaxPageSize).
	PageSize int
	// Thresholds are the lane changes' the trend marks (nil: each row's
	// default; lane_changes.thresholds).
	Thresholds regress.Thresholds
}

// MaxPageSize is the largest ?limit= of the runs list.
const MaxPageSize = 1000

// Handler serves the pages.
type Handler struct {
	src   Source
	opt   Options
	log   zerolog.Logger
	tmpl  *template.Template
	guard httpguard.Guard

	// refresh makes one refresh of the listing at a time; it is held
	// while the source is read and while mu is taken: mu must not be
	// held when refresh is taken.
	refresh sync.Mutex
	mu      sync.Mutex
	cache   map[string]cached // run id → its row, while unchanged
	list    *listing

	done     chan struct{}
	doneOnce sync.Once
}

type cached struct {
	last  time.Time
	state string
	row   Row
}

// listing is every run's summary, newest activity first, as of at.
type listing struct {
	at    time.Time
	sums  []Summary
	pos   map[string]int // run id → index in sums
	hosts []string
	lanes []string
	// unlisted runs the source left out, and why (Unlister).
	unlisted    int64
	unlistedWhy string
}

// Row is one run of the list.
type Row struct {
	ID, Host, Lane, State, Model, Issue string
	Flags                               []string
	Peak, Final                         *split.MiB
	Started                             time.Time
	Ago                                 string
	Complete                            bool
	ControlOf                           string
}

// flagNames are the flags a run can carry, for the list's filter.
var flagNames = slices.Sorted(maps.Keys(split.FlagText))

// New returns the pages' handler.
func New(src Source, opt Options, log zerolog.Logger) *Handler {
	if opt.Poll <= 0 {
		opt.Poll = time.Second
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.PageSize <= 0 {
		opt.PageSize = 100
	}
	opt.PageSize = min(opt.PageSize, MaxPageSize)
	t := template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html"))
	return &Handler{src: src, opt: opt, log: log, tmpl: t, guard: httpguard.Guard{Token: opt.Token, Loopback: opt.Loopback},
		cache: map[string]cached{}, done: make(chan struct{})}
}

// Register adds the pages to mux: / (the runs), /events (the list's live
// updates), /run/{id}, /run/{id}/events (its live updates), /compare and
// /trend.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.Handle("GET /{$}", h.page(h.runs))
	mux.Handle("GET /events", h.page(h.events))
	mux.Handle("GET /run/{id}", h.page(h.run))
	mux.Handle("GET /run/{id}/events", h.page(h.runEvents))
	mux.Handle("GET /compare", h.page(h.compare))
	mux.Handle("GET /trend", h.page(h.trend))
}

// Close ends the live streams (call it when the server shuts down).
func (h *Handler) Close() { h.doneOnce.Do(func() { close(h.done) }) }

// page sets the pages' security headers and puts next behind the guard.
func (h *Handler) page(next func(http.ResponseWriter, *http.Request)) http.Handler {
	g := h.guard.Wrap(http.HandlerFunc(next))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		g.ServeHTTP(w, r)
	})
}

// listing returns every run's summary, newest activity first, read again
// at most once per half poll (every open page shares it).
func (h *Handler) listing(ctx context.Context) (*listing, error) {
	fresh := func() *listing {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.list != nil && h.opt.Now().Sub(h.list.at) < h.opt.Poll/2 {
			return h.list
		}
		return nil
	}
	if l := fresh(); l != nil {
		return l, nil
	}
	h.refresh.Lock()
	defer h.refresh.Unlock()
	if l := fresh(); l != nil {
		return l, nil
	}
	sums, err := h.src.Summaries(ctx)
	if err != nil {
		return nil, err
	}
	sort.Slice(sums, func(i, j int) bool {
		if !sums[i].LastEvent.Equal(sums[j].LastEvent) {
			return sums[i].LastEvent.After(sums[j].LastEvent)
		}
		return sums[i].ID > sums[j].ID
	})
	l := &listing{at: h.opt.Now(), sums: sums, pos: make(map[string]int, len(sums))}
	if u, ok := h.src.(Unlister); ok {
		l.unlisted, l.unlistedWhy = u.Unlisted()
	}
	hosts, lanes := map[string]bool{}, map[string]bool{}
	for i, s := range sums {
		l.pos[s.ID] = i
		hosts[s.Host], lanes[s.Lane] = true, true
	}
	delete(hosts, "")
	delete(lanes, "")
	l.hosts, l.lanes = slices.Sorted(maps.Keys(hosts)), slices.Sorted(maps.Keys(lanes))
	h.mu.Lock()
	defer h.mu.Unlock()
	for id := range h.cache {
		if _, ok := l.pos[id]; !ok {
			delete(h.cache, id)
		}
	}
	h.list = l
	return l, nil
}

// row returns the list's row of s, read from the source only when the run
// changed since it was last read (read says so); ok is false when the
// source has no report for it.
func (h *Handler) row(ctx context.Context, s Summary) (row Row, ok, read bool) {
	h.mu.Lock()
	c, hit := h.cache[s.ID]
	h.mu.Unlock()
	if hit && c.last.Equal(s.LastEvent) && c.state == s.State {
		return c.row, true, false
	}
	rep, found, err := h.src.Report(ctx, s.ID)
	if err != nil || !found {
		return Row{}, false, true
	}
	row = rowOf(s, rep)
	h.mu.Lock()
	h.cache[s.ID] = cached{last: s.LastEvent, state: s.State, row: row}
	h.mu.Unlock()
	return row, true, true
}

func rowOf(s Summary, r split.Report) Row {
	row := Row{ID: s.ID, Host: s.Host, Lane: s.Lane, State: s.State, Model: split.ModelName(r), Issue: r.Run.Issue,
		Flags: r.Flags, Peak: r.PeakGTTMiB, Final: r.FinalGTTMiB, Complete: r.Run.Complete, ControlOf: r.Run.ControlOf}
	if t, err := time.Parse(time.RFC3339Nano, r.Run.Started); err == nil {
		row.Started = t
	} else {
		row.Started = s.LastEvent
	}
	return row
}

// Filter selects runs of the list.
type Filter struct{ Host, Lane, Model, Issue, Flag string }

func filterOf(q url.Values) Filter {
	g := func(k string) string { return strings.TrimSpace(q.Get(k)) }
	return Filter{Host: g("host"), Lane: g("lane"), Model: g("model"), Issue: g("issue"), Flag: g("flag")}
}

// matchSummary is the part of the filter a summary answers (no report
// read).
func (f Filter) matchSummary(s Summary) bool {
	return (f.Host == "" || s.Host == f.Host) && (f.Lane == "" || s.Lane == f.Lane)
}

func (f Filter) match(r Row) bool {
	return (f.Host == "" || r.Host == f.Host) && (f.Lane == "" || r.Lane == f.Lane) &&
		(f.Model == "" || strings.Contains(strings.ToLower(r.Model), strings.ToLower(f.Model))) &&
		(f.Issue == "" || strings.EqualFold(r.Issue, f.Issue)) && (f.Flag == "" || slices.Contains(r.Flags, f.Flag))
}

// Empty says no filter is set.
func (f Filter) Empty() bool { return f == Filter{} }

// values is the filter as query parameters (the empty ones left out).
func (f Filter) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"host": f.Host, "lane": f.Lane, "model": f.Model, "issue": f.Issue, "flag": f.Flag} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// listPage is one page of the runs list.
type listPage struct {
	Title  string
	Filter Filter
	Rows   []Row
	All    int // runs in all
	// Unlisted runs the source left out, and why (Unlister).
	Unlisted    int64
	UnlistedWhy string
	Hosts       []string
	Lanes       []string
	Flags       []string
	Limit       int
	// LimitQuery is ?limit= as given ("" for the default).
	LimitQuery string
	// After is this page's cursor (the run before its first, "" for the
	// first page), Next the next page's ("" on the last page).
	After, Next string
	// Lost is an ?after= run no longer listed (expired): the page starts
	// from the newest run instead.
	Lost string
	// From and To are the positions (1-based, newest first) of the first
	// and last run this page looked at.
	From, To int
	// Partial: the page's report reads ran out before it was full (a
	// filter on model, issue or flag); Next goes on from where it stopped.
	Partial bool
	Live    liveUpdates
}

// liveUpdates is what a page's script needs to follow its stream: the
// element the events replace, the stream's address and the event name.
type liveUpdates struct{ Target, URL, Event string }

// scanBudget bounds the reports one page request reads for a filter that
// needs them (model, issue, flag): the runs already read cost nothing.
func scanBudget(limit int) int { return max(4*limit, 400) }

func limitOf(q url.Values, def int) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxPageSize {
		return 0, fmt.Errorf("limit: a number from 1 to %d", MaxPageSize)
	}
	return n, nil
}

// errBadRequest marks a query the list cannot answer.
var errBadRequest = errors.New("bad request")

// listData is the page of the runs list that q asks for: the runs after
// ?after= (a run id: the last of the page before), newest activity first,
// up to ?limit=, that match the filter. Only the shown runs' reports are
// read (and the runs a model, issue or flag filter looks at, at most
// scanBudget new ones a request).
func (h *Handler) listData(ctx context.Context, q url.Values) (listPage, error) {
	limit, err := limitOf(q, h.opt.PageSize)
	if err != nil {
		return listPage{}, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	l, err := h.listing(ctx)
	if err != nil {
		return listPage{}, err
	}
	f := filterOf(q)
	p := listPage{Title: "gttsplit: runs", Filter: f, All: len(l.sums), Unlisted: l.unlisted, UnlistedWhy: l.unlistedWhy,
		Hosts: l.hosts, Lanes: l.lanes, Flags: flagNames, Limit: limit, LimitQuery: q.Get("limit"), After: q.Get("after")}
	start := 0
	if p.After != "" {
		if i, ok := l.pos[p.After]; ok {
			start = i + 1
		} else {
			p.Lost, p.After = p.After, ""
		}
	}
	budget := scanBudget(limit)
	i := start
	for ; i < len(l.sums) && len(p.Rows) < limit && budget > 0; i++ {
		s := l.sums[i]
		if !f.matchSummary(s) {
			continue
		}
		row, ok, read := h.row(ctx, s)
		if read {
			budget--
		}
		if ok && f.match(row) {
			p.Rows = append(p.Rows, row)
		}
	}
	if i > start {
		p.From, p.To = start+1, i
	}
	if i < len(l.sums) && i > start {
		p.Next = l.sums[i-1].ID
		p.Partial = len(p.Rows) < limit
	}
	now := h.opt.Now()
	for k := range p.Rows {
		p.Rows[k].Ago = since(now, p.Rows[k].Started)
	}
	return p, nil
}

// PageQuery is the query string of the page of the list after after
// ("" for the first), with this page's filter and limit.
func (p listPage) PageQuery(after string) template.URL {
	v := p.Filter.values()
	if after != "" {
		v.Set("after", after)
	}
	if p.LimitQuery != "" {
		v.Set("limit", p.LimitQuery)
	}
	return template.URL(v.Encode()) // url.Values.Encode escapes every value
}

func (h *Handler) runs(w http.ResponseWriter, r *http.Request) {
	p, err := h.listData(r.Context(), r.URL.Query())
	if err != nil {
		httpError(w, err)
		return
	}
	p.Live = liveUpdates{Target: "list", URL: "/events?" + r.URL.RawQuery, Event: "runs"}
	h.render(w, "runs.html", p)
}

func httpError(w http.ResponseWriter, err error) {
	if errors.Is(err, errBadRequest) {
		http.Error(w, strings.TrimPrefix(err.Error(), errBadRequest.Error()+": "), http.StatusBadRequest)
		return
	}
	http.Error(w, err.Error(), http.StatusServiceUnavailable)
}

// events streams the page of the list that the query asks for as
// server-sent events: one "runs" event at once, then one whenever it
// changes.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if _, err := limitOf(q, h.opt.PageSize); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.stream(w, r, "runs", func(ctx context.Context) (string, bool) {
		p, err := h.listData(ctx, q)
		if err != nil {
			return "", false
		}
		return h.fragment("list", p)
	})
}

// runEvents streams a run's page (below its title) as server-sent events:
// one "run" event at once, then one whenever the run changes (its report
// is read again only when its summary moved). A run the source does not
// have is a 404, as its page is, not a stream that never sends.
func (h *Handler) runEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, ok := h.runReport(w, r, id); !ok {
		return
	}
	var lastKey, last string
	h.stream(w, r, "run", func(ctx context.Context) (string, bool) {
		key := ""
		if l, err := h.listing(ctx); err == nil {
			if i, ok := l.pos[id]; ok {
				key = l.sums[i].State + " " + l.sums[i].LastEvent.String()
			}
		}
		if key != "" && key == lastKey {
			return last, last != ""
		}
		rep, ok, err := h.src.Report(ctx, id)
		if err != nil || !ok {
			return "", false
		}
		html, ok := h.fragment("runbody", h.runData(id, rep))
		if ok {
			lastKey, last = key, html
		}
		return html, ok
	})
}

// stream writes next's HTML as a server-sent event named name at once
// and then every poll when it changed, until the client goes or Close.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, name string, next func(context.Context) (string, bool)) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming not supported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	var last string
	tick := time.NewTicker(h.opt.Poll)
	defer tick.Stop()
	for {
		if html, ok := next(r.Context()); ok && html != last {
			last = html
			if err := writeEvent(w, name, html); err != nil {
				return
			}
			fl.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-h.done:
			return
		case <-tick.C:
		}
	}
}

// fragment renders a template into a string.
func (h *Handler) fragment(name string, data any) (string, bool) {
	var b bytes.Buffer
	if err := h.tmpl.ExecuteTemplate(&b, name, data); err != nil {
		h.log.Error().Err(err).Str("template", name).Msg("fragment not rendered")
		return "", false
	}
	return b.String(), true
}

func writeEvent(w io.Writer, name, data string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "event: %s\n", name)
	for line := range strings.SplitSeq(data, "\n") {
		fmt.Fprintf(&b, "data: %s\n", line)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

type runPage struct {
	Title    string
	ID       string
	R        split.Report
	Model    string
	Bars     Charts[BarChart]
	Timeline Charts[Timeline]
	Live     liveUpdates
	// DeviceBars is a bar per card of the device table (nil charts: none).
	DeviceBars Charts[DeviceChart]
}

func (h *Handler) runData(id string, rep split.Report) runPage {
	return runPage{Title: "gttsplit: run " + id, ID: id, R: rep, Model: split.ModelName(rep), Bars: NewBarChart(rep), Timeline: NewTimeline(rep), DeviceBars: NewDeviceChart(rep),
		Live: liveUpdates{Target: "run", URL: "/run/" + url.PathEscape(id) + "/events", Event: "run"}}
}

func (h *Handler) run(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if rep, ok := h.runReport(w, r, id); ok {
		h.render(w, "run.html", h.runData(id, rep))
	}
}

// runReport reads run id's report for its page or its stream; when there
// is none it answers 404 (503 when the source failed) and returns false.
func (h *Handler) runReport(w http.ResponseWriter, r *http.Request, id string) (split.Report, bool) {
	rep, ok, err := h.src.Report(r.Context(), id)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return split.Report{}, false
	case !ok:
		http.Error(w, "no such run: "+id, http.StatusNotFound)
		return split.Report{}, false
	}
	return rep, true
}

type comparePage struct {
	Title  string
	A, B   string
	IDs    []string // the newest runs, offered as choices
	C      *present.Comparison
	BarsA  Charts[BarChart]
	BarsB  Charts[BarChart]
	RA, RB split.Report
	// Missing is a run the query names that does not exist (a 404).
	Missing string
}

// compareChoices is how many of the newest runs the compare form offers.
const compareChoices = 200

func (h *Handler) compare(w http.ResponseWriter, r *http.Request) {
	l, err := h.listing(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	q := r.URL.Query()
	p := comparePage{Title: "gttsplit: compare", A: strings.TrimSpace(q.Get("a")), B: strings.TrimSpace(q.Get("b"))}
	for _, s := range l.sums[:min(len(l.sums), compareChoices)] {
		p.IDs = append(p.IDs, s.ID)
	}
	var ra, rb split.Report
	// report reads a run the query names; a run that does not exist is a
	// 404, as /run/{id} answers.
	report := func(id string) (split.Report, bool) {
		rep, ok, err := h.src.Report(r.Context(), id)
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return rep, false
		case !ok:
			p.Missing = id
			h.renderStatus(w, http.StatusNotFound, "compare.html", p)
			return rep, false
		}
		return rep, true
	}
	if p.A != "" {
		var ok bool
		if ra, ok = report(p.A); !ok {
			return
		}
		// A control names its run: compare?a=CONTROL fills in b.
		if p.B == "" && ra.Run.ControlOf != "" {
			p.A, p.B = ra.Run.ControlOf, p.A
			rb = ra
			if ra, ok = report(p.A); !ok {
				return
			}
		} else if p.B != "" {
			if rb, ok = report(p.B); !ok {
				return
			}
		}
	} else if p.B != "" {
		if _, ok := report(p.B); !ok {
			return
		}
	}
	if p.A != "" && p.B != "" {
		c := present.Compare(ra, rb, p.A, p.B)
		p.C, p.RA, p.RB = &c, ra, rb
		p.BarsA, p.BarsB = NewBarCharts(ra, rb)
		p.Title = "gttsplit: compare " + p.A + " and " + p.B
	}
	h.render(w, "compare.html", p)
}

func (h *Handler) render(w http.ResponseWriter, name string, data any) {
	h.renderStatus(w, http.StatusOK, name, data)
}

func (h *Handler) renderStatus(w http.ResponseWriter, code int, name string, data any) {
	var b bytes.Buffer
	if err := h.tmpl.ExecuteTemplate(&b, name, data); err != nil {
		h.log.Error().Err(err).Str("template", name).Msg("page not rendered")
		http.Error(w, "page not rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

var funcs = template.FuncMap{
	"mib": func(v *split.MiB) string {
		if v == nil {
			return "unknown"
		}
		return fmt.Sprintf("%.1f", float64(*v))
	},
	"mibv": func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"f1":   func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"pct": func(v *split.Pct) string {
		if v == nil {
			return "unknown"
		}
		return fmt.Sprintf("%.1f %%", float64(*v))
	},
	"diff": func(v *split.MiB) string {
		if v == nil {
			return "—"
		}
		return fmt.Sprintf("%+.1f", float64(*v))
	},
	"flagText": split.FlagWords,
	"rows":     splitRows,
	"trendq":   TrendQuery,
	"dot":      func(l TrendLine, x, y float64) trendMark { return markOf(l, x, y, false) },
	"dotAt":    func(l TrendLine, d TrendDot) trendMark { return markOf(l, d.X, d.Y, d.Marked) },
	"add":      func(a, b float64) float64 { return a + b },
	"sub":      func(a, b float64) float64 { return a - b },
	"mul":      func(a, b float64) float64 { return a * b },
	"itof":     func(i int) float64 { return float64(i) },
	"time":     pageTime,
	"utc": func(s string) string {
		if s == "" {
			return "unknown"
		}
		return utcSecond(s)
	},
	// mibu is a figure with its unit, or "unknown".
	"mibu": func(v *split.MiB) string {
		if v == nil {
			return "unknown"
		}
		return fmt.Sprintf("%.1f MiB", float64(*v))
	},
	"q": func(k, v string) template.URL { return template.URL(k + "=" + url.QueryEscape(v)) },
	"deref": func(b *bool) string {
		switch {
		case b == nil:
			return "unknown"
		case *b:
			return "dirty"
		}
		return "clean"
	},
	"exit": func(r split.Report) string {
		switch {
		case r.Run.Signal != "":
			return "signal " + r.Run.Signal
		case r.Run.ExitCode != nil:
			return fmt.Sprint(*r.Run.ExitCode)
		}
		return "unknown"
	},
}
