// Package web is the aggregator's live page, served on the same listener
// as /metrics: the runs across hosts and lanes (newest first, filterable,
// updated live through server-sent events), a run's page with its split
// as stacked bars and its GTT timeline, and a page comparing two runs. It
// is read-only. Everything is rendered on the server from embedded
// templates (html/template, SVG for the charts): no build step, no CDN, no
// script beyond a few lines of EventSource, so it works offline.
//
// On a loopback listener there is no login. On any other address the pages
// need the token of http.token (see Guard); with no token configured they
// are refused.
package web

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/pkg/split"
)

//go:embed templates/*.html
var templateFS embed.FS

// Summary is one run as the source lists it.
type Summary struct {
	ID, Host, Lane string
	State          string // open, finished or closed
	LastEvent      time.Time
}

// Source is where the pages read runs from (the aggregator's service).
type Source interface {
	Summaries(ctx context.Context) ([]Summary, error)
	Report(ctx context.Context, id string) (split.Report, bool, error)
}

// Options configure the pages.
type Options struct {
	// Token is required on a listener that is not loopback ("" refuses
	// the pages there).
	Token string
	// Loopback says the listener is on a loopback address: no login.
	Loopback bool
	// Poll is how often the live list looks for changes (default 1s).
	Poll time.Duration
	// Now is the clock for "5 min ago" (default time.Now).
	Now func() time.Time
}

// Handler serves the pages.
type Handler struct {
	src  Source
	opt  Options
	log  zerolog.Logger
	tmpl *template.Template

	mu     sync.Mutex
	cache  map[string]cached // run id → its report, while unchanged
	listAt time.Time
	list   []Row

	done     chan struct{}
	doneOnce sync.Once
}

type cached struct {
	last  time.Time
	state string
	row   Row
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

// New returns the pages' handler.
func New(src Source, opt Options, log zerolog.Logger) *Handler {
	if opt.Poll <= 0 {
		opt.Poll = time.Second
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	t := template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html"))
	return &Handler{src: src, opt: opt, log: log, tmpl: t, cache: map[string]cached{}, done: make(chan struct{})}
}

// Register adds the pages to mux: / (the runs), /run/{id}, /compare and
// /events (the live list).
func (h *Handler) Register(mux *http.ServeMux) {
	mux.Handle("GET /{$}", h.auth(h.runs))
	mux.Handle("GET /run/{id}", h.auth(h.run))
	mux.Handle("GET /compare", h.auth(h.compare))
	mux.Handle("GET /events", h.auth(h.events))
}

// Close ends the live streams (call it when the server shuts down).
func (h *Handler) Close() { h.doneOnce.Do(func() { close(h.done) }) }

func (h *Handler) auth(next func(http.ResponseWriter, *http.Request)) http.Handler {
	g := Guard{Token: h.opt.Token, Loopback: h.opt.Loopback}.Wrap(http.HandlerFunc(next))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		g.ServeHTTP(w, r)
	})
}

// rows returns every run, newest first, refreshed at most once per poll.
func (h *Handler) rows(ctx context.Context) ([]Row, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.opt.Now()
	if h.list != nil && now.Sub(h.listAt) < h.opt.Poll/2 {
		return h.list, nil
	}
	sums, err := h.src.Summaries(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Row, 0, len(sums))
	seen := map[string]bool{}
	for _, s := range sums {
		seen[s.ID] = true
		c, ok := h.cache[s.ID]
		if !ok || !c.last.Equal(s.LastEvent) || c.state != s.State {
			rep, found, err := h.src.Report(ctx, s.ID)
			if err != nil || !found {
				continue
			}
			c = cached{last: s.LastEvent, state: s.State, row: rowOf(s, rep)}
			h.cache[s.ID] = c
		}
		row := c.row
		row.Ago = since(now, row.Started)
		out = append(out, row)
	}
	for id := range h.cache {
		if !seen[id] {
			delete(h.cache, id)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Started.Equal(out[j].Started) {
			return out[i].Started.After(out[j].Started)
		}
		return out[i].ID > out[j].ID
	})
	h.list, h.listAt = out, now
	return out, nil
}

func rowOf(s Summary, r split.Report) Row {
	row := Row{ID: s.ID, Host: s.Host, Lane: s.Lane, State: s.State, Model: ModelName(r), Issue: r.Run.Issue,
		Flags: r.Flags, Peak: r.PeakGTTMiB, Final: r.FinalGTTMiB, Complete: r.Run.Complete, ControlOf: r.Run.ControlOf}
	if t, err := time.Parse(time.RFC3339Nano, r.Run.Started); err == nil {
		row.Started = t
	} else {
		row.Started = s.LastEvent
	}
	return row
}

// ModelName is the model file a run measured: its main load's file, else
// the command's -m/--model argument, as a base name.
func ModelName(r split.Report) string {
	for _, m := range r.Models {
		if m.File != "" && (m.Role == "main" || m.Role == "model") {
			return path.Base(m.File)
		}
	}
	f := strings.Fields(r.Run.Command)
	for i, a := range f {
		switch {
		case (a == "-m" || a == "--model") && i+1 < len(f):
			return path.Base(f[i+1])
		case strings.HasPrefix(a, "--model="):
			return path.Base(strings.TrimPrefix(a, "--model="))
		}
	}
	return ""
}

// Filter selects runs of the list.
type Filter struct{ Host, Lane, Model, Issue, Flag string }

func filterOf(q url.Values) Filter {
	g := func(k string) string { return strings.TrimSpace(q.Get(k)) }
	return Filter{Host: g("host"), Lane: g("lane"), Model: g("model"), Issue: g("issue"), Flag: g("flag")}
}

func (f Filter) match(r Row) bool {
	return (f.Host == "" || r.Host == f.Host) && (f.Lane == "" || r.Lane == f.Lane) &&
		(f.Model == "" || strings.Contains(strings.ToLower(r.Model), strings.ToLower(f.Model))) &&
		(f.Issue == "" || r.Issue == f.Issue) && (f.Flag == "" || slices.Contains(r.Flags, f.Flag))
}

// Query is the filter as a query string ("" when empty).
func (f Filter) Query() string {
	v := url.Values{}
	for k, s := range map[string]string{"host": f.Host, "lane": f.Lane, "model": f.Model, "issue": f.Issue, "flag": f.Flag} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v.Encode()
}

type listPage struct {
	Title  string
	Filter Filter
	Rows   []Row
	All    int
	Hosts  []string
	Lanes  []string
	Issues []string
	Flags  []string
}

func distinct(rows []Row, f func(Row) []string) []string {
	set := map[string]bool{}
	for _, r := range rows {
		for _, s := range f(r) {
			if s != "" {
				set[s] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func (h *Handler) listData(ctx context.Context, q url.Values) (listPage, error) {
	all, err := h.rows(ctx)
	if err != nil {
		return listPage{}, err
	}
	f := filterOf(q)
	p := listPage{Title: "gttsplit: runs", Filter: f, All: len(all)}
	for _, r := range all {
		if f.match(r) {
			p.Rows = append(p.Rows, r)
		}
	}
	p.Hosts = distinct(all, func(r Row) []string { return []string{r.Host} })
	p.Lanes = distinct(all, func(r Row) []string { return []string{r.Lane} })
	p.Issues = distinct(all, func(r Row) []string { return []string{r.Issue} })
	p.Flags = distinct(all, func(r Row) []string { return r.Flags })
	return p, nil
}

func (h *Handler) runs(w http.ResponseWriter, r *http.Request) {
	p, err := h.listData(r.Context(), r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	h.render(w, "runs.html", p)
}

// events streams the rows of the filtered list as server-sent events: one
// "runs" event at once, then one whenever the rows change.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming not supported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	q := r.URL.Query()
	var last string
	tick := time.NewTicker(h.opt.Poll)
	defer tick.Stop()
	for {
		p, err := h.listData(r.Context(), q)
		if err == nil {
			var b bytes.Buffer
			if err := h.tmpl.ExecuteTemplate(&b, "rows", p); err == nil && b.String() != last {
				last = b.String()
				if err := writeEvent(w, "runs", last); err != nil {
					return
				}
				fl.Flush()
			}
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
	R        split.Report
	Model    string
	Bars     *BarChart
	Timeline *Timeline
	Complete bool
}

func (h *Handler) run(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	rep, ok, err := h.src.Report(r.Context(), id)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	case !ok:
		http.Error(w, "no such run: "+id, http.StatusNotFound)
		return
	}
	h.render(w, "run.html", runPage{Title: "gttsplit: run " + id, R: rep, Model: ModelName(rep), Bars: NewBarChart(rep), Timeline: NewTimeline(rep)})
}

type comparePage struct {
	Title      string
	A, B       string
	IDs        []string
	C          *split.Comparison
	BarsA      *BarChart
	BarsB      *BarChart
	RA, RB     split.Report
	Missing    string
	Controlled map[string]string
}

func (h *Handler) compare(w http.ResponseWriter, r *http.Request) {
	all, err := h.rows(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	p := comparePage{Title: "gttsplit: compare", A: r.URL.Query().Get("a"), B: r.URL.Query().Get("b")}
	for _, row := range all {
		p.IDs = append(p.IDs, row.ID)
	}
	// A control names its run: compare?a=CONTROL fills in b.
	if p.A != "" && p.B == "" {
		for _, row := range all {
			if row.ID == p.A && row.ControlOf != "" {
				p.A, p.B = row.ControlOf, row.ID
			}
		}
	}
	if p.A != "" && p.B != "" {
		ra, oka, erra := h.src.Report(r.Context(), p.A)
		rb, okb, errb := h.src.Report(r.Context(), p.B)
		switch {
		case erra != nil || errb != nil:
			http.Error(w, fmt.Sprint(erra, errb), http.StatusServiceUnavailable)
			return
		case !oka:
			p.Missing = p.A
		case !okb:
			p.Missing = p.B
		default:
			c := split.Compare(ra, rb, p.A, p.B)
			p.C, p.RA, p.RB = &c, ra, rb
			p.BarsA, p.BarsB = NewBarCharts(ra, rb)
			p.Title = "gttsplit: compare " + p.A + " and " + p.B
		}
	}
	h.render(w, "compare.html", p)
}

func (h *Handler) render(w http.ResponseWriter, name string, data any) {
	var b bytes.Buffer
	if err := h.tmpl.ExecuteTemplate(&b, name, data); err != nil {
		h.log.Error().Err(err).Str("template", name).Msg("page not rendered")
		http.Error(w, "page not rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
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
	"flagText": func(f string) string { return split.FlagText[f] },
	"add":      func(a, b float64) float64 { return a + b },
	"sub":      func(a, b float64) float64 { return a - b },
	"mul":      func(a, b float64) float64 { return a * b },
	"itof":     func(i int) float64 { return float64(i) },
	"time": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
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
