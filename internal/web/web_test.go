package web

import (
	"bufio"
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// memSource is a table of folded runs (the service's role).
type memSource struct {
	mu    sync.Mutex
	runs  map[string]split.Report
	sums  []Summary
	reads int // Report calls
}

func (m *memSource) Summaries(context.Context) ([]Summary, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Summary(nil), m.sums...), nil
}

func (m *memSource) Report(_ context.Context, id string) (split.Report, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	r, ok := m.runs[id]
	return r, ok, nil
}

func (m *memSource) add(r split.Report) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runs == nil {
		m.runs = map[string]split.Report{}
	}
	m.runs[r.Run.ID] = r
	for i, s := range m.sums {
		if s.ID == r.Run.ID {
			m.sums[i].LastEvent = s.LastEvent.Add(time.Second)
			return
		}
	}
	m.sums = append(m.sums, Summary{ID: r.Run.ID, Host: r.Run.Host, Lane: r.Run.Lane, State: "closed", LastEvent: time.Unix(int64(len(m.sums)), 0)})
}

func (m *memSource) readCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reads
}

// replay folds a recorded stream of one run.
func replay(t *testing.T, path string) split.Report {
	t.Helper()
	return foldStream(t, path, func(events.Decoded) bool { return true })
}

// foldStream folds the events of a recorded stream that keep keeps.
func foldStream(t *testing.T, path string, keep func(events.Decoded) bool) split.Report {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", path))
	require.NoError(t, err)
	defer f.Close()
	fold := split.NewFold(split.Options{})
	r := events.NewReader(f)
	for r.Next() {
		d, err := events.Decode(r.Event())
		require.NoError(t, err)
		if keep(d) {
			fold.Apply(d.Input())
		}
	}
	require.NoError(t, r.Err())
	return fold.Report()
}

func get(t *testing.T, url string, want int) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, want, resp.StatusCode, string(b))
	return string(b)
}

func serve(t *testing.T, src Source, opt Options) (*httptest.Server, *Handler) {
	t.Helper()
	h := New(src, opt, zerolog.Nop())
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { h.Close(); srv.Close() })
	return srv, h
}

func TestPages(t *testing.T) {
	src := &memSource{}
	on := replay(t, "testdata/runs/4b/events.jsonl")
	src.add(on)
	src.add(replay(t, "testdata/runs/27b/events.jsonl"))
	src.add(replay(t, "testdata/controls/4b-ngl0/events.jsonl"))
	srv, _ := serve(t, src, Options{Loopback: true})

	list := get(t, srv.URL+"/", http.StatusOK)
	require.Contains(t, list, `data-run="strix01-20261107T140311-4b"`)
	require.Contains(t, list, "Qwen3.5-4B-Q4_K_M.gguf")
	// Newest first: the control started last.
	require.Less(t, strings.Index(list, `data-run="strix01-20261107T141509-4b-ngl0"`), strings.Index(list, `data-run="strix01-20261107T140311-4b"`))
	f := get(t, srv.URL+"/?model=27B", http.StatusOK)
	require.Contains(t, f, "27B")
	require.NotContains(t, f, `data-run="strix01-20261107T140311-4b"`)
	f = get(t, srv.URL+"/?flag=control", http.StatusOK)
	require.Contains(t, f, `data-run="strix01-20261107T141509-4b-ngl0"`)
	require.NotContains(t, f, `data-run="strix01-20261107T140311-4b"`)
	// The control has no weights in GTT to pack: it is not asked for the
	// host-weight trace.
	require.Contains(t, get(t, srv.URL+"/?flag=no_trace", http.StatusOK), "No run matches the filter (3 in all)")
	require.Contains(t, get(t, srv.URL+"/?host=nohost", http.StatusOK), "No run matches the filter (3 in all)")

	page := get(t, srv.URL+"/run/strix01-20261107T140311-4b", http.StatusOK)
	require.Contains(t, page, `<b id="peak">3925.0 MiB</b>`)
	require.Contains(t, page, `id="peak-marker"`)
	require.Contains(t, page, "peak 3925.0 MiB")
	require.Contains(t, page, "final 3641.2 MiB")
	require.Contains(t, page, `class="seg seg-packed"`)
	require.Contains(t, page, "MiB of GTT")
	require.Contains(t, page, "seconds since")
	require.Contains(t, page, `<g class="marker">`)
	require.Contains(t, page, on.Expected[:40])
	get(t, srv.URL+"/run/nope", http.StatusNotFound)
	// Its live updates are a 404 too, not a stream that never sends.
	require.Contains(t, get(t, srv.URL+"/run/nope/events", http.StatusNotFound), "no such run: nope")

	cmp := get(t, srv.URL+"/compare?a=strix01-20261107T140311-4b&b=strix01-20261107T141509-4b-ngl0", http.StatusOK)
	require.Contains(t, cmp, "weights resident twice: the difference of the peaks is 3171.7 MiB")
	require.Contains(t, cmp, `<td class="n">&#43;3171.7</td>`)
	// A control alone fills in the run it is the control of.
	require.Contains(t, get(t, srv.URL+"/compare?a=strix01-20261107T141509-4b-ngl0", http.StatusOK), "weights resident twice")
	// A run that does not exist is a 404 on the compare page too, as on
	// its own page.
	require.Contains(t, get(t, srv.URL+"/compare?a=strix01-20261107T140311-4b&b=nope", http.StatusNotFound), "No such run: nope")
	require.Contains(t, get(t, srv.URL+"/compare?a=nope", http.StatusNotFound), "No such run: nope")
	require.Contains(t, get(t, srv.URL+"/compare?b=nope", http.StatusNotFound), "No such run: nope")
	get(t, srv.URL+"/compare", http.StatusOK)
}

func TestEventsStreamChanges(t *testing.T) {
	src := &memSource{}
	src.add(replay(t, "testdata/runs/4b/events.jsonl"))
	srv, h := serve(t, src, Options{Loopback: true, Poll: 20 * time.Millisecond})
	resp, err := http.Get(srv.URL + "/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	rd := bufio.NewReader(resp.Body)
	next := sseReader(t, rd)
	first := next()
	require.Contains(t, first, "event: runs\n")
	require.Contains(t, first, "strix01-20261107T140311-4b")
	require.NotContains(t, first, "27b")
	src.add(replay(t, "testdata/runs/27b/events.jsonl"))
	require.Contains(t, next(), "strix01-20261107T141902-27b")
	h.Close() // the server's shutdown ends the stream
	_, err = io.ReadAll(rd)
	require.NoError(t, err)
}

func TestTokenOffLoopback(t *testing.T) {
	src := &memSource{}
	src.add(replay(t, "testdata/runs/4b/events.jsonl"))
	srv, _ := serve(t, src, Options{})
	get(t, srv.URL+"/", http.StatusForbidden)

	srv, _ = serve(t, src, Options{Token: "s3cret"})
	get(t, srv.URL+"/", http.StatusUnauthorized)
	get(t, srv.URL+"/?token=wrong", http.StatusUnauthorized)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/run/strix01-20261107T140311-4b", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// ?token= once sets a cookie and redirects to the page without it.
	jar := &cookieJar{}
	c := &http.Client{Jar: jar}
	resp, err = c.Get(srv.URL + "/?token=s3cret&host=strix01")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "/?host=strix01", resp.Request.URL.RequestURI())
	require.Contains(t, string(b), "strix01-20261107T140311-4b")
	resp, err = c.Get(srv.URL + "/compare")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// cookieJar is the smallest http.CookieJar: one host.
type cookieJar struct {
	mu sync.Mutex
	cs []*http.Cookie
}

func (j *cookieJar) SetCookies(_ *url.URL, cs []*http.Cookie) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.cs = append(j.cs, cs...)
}

func (j *cookieJar) Cookies(*url.URL) []*http.Cookie {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.cs
}

// manyRuns is a source of n runs (the 4B run under other ids), the
// newest last.
func manyRuns(t *testing.T, n int) *memSource {
	t.Helper()
	base := replay(t, "testdata/runs/4b/events.jsonl")
	src := &memSource{}
	for i := range n {
		r := base
		r.Run.ID = fmt.Sprintf("run-%05d", i)
		r.Run.Host = fmt.Sprintf("host%d", i%3)
		src.add(r)
	}
	return src
}

var dataRun = regexp.MustCompile(`data-run="([^"]+)"`)

func runIDs(page string) []string {
	var out []string
	for _, m := range dataRun.FindAllStringSubmatch(page, -1) {
		out = append(out, m[1])
	}
	return out
}

var nextPage = regexp.MustCompile(`<a href="/\?([^"]*)" id="next-page">`)

// TestListIsPaged: the live list shows one page (?limit=, 100 by
// default) after ?after= (the last run of the page before), newest
// activity first, and reads the reports of the shown runs only; the
// pages walk every run once. Before, one GET / read and rendered every
// run (10,000 runs: 7.9 s and 4.6 MB, every second for each open page).
func TestListIsPaged(t *testing.T) {
	src := manyRuns(t, 2500)
	srv, _ := serve(t, src, Options{Loopback: true})

	page := get(t, srv.URL+"/", http.StatusOK)
	ids := runIDs(page)
	require.Len(t, ids, 100)
	require.Equal(t, "run-02499", ids[0], "newest first")
	require.Equal(t, "run-02400", ids[99])
	require.LessOrEqual(t, src.readCount(), 100, "only the page's reports are read")
	require.Contains(t, page, "runs 1–100 of 2500")
	m := nextPage.FindStringSubmatch(page)
	require.NotNil(t, m, "a link to the next page")
	require.Equal(t, "after=run-02400", html.UnescapeString(m[1]))

	// Every run once, in order, through the next links.
	seen := map[string]bool{}
	q := "limit=700"
	pages := 0
	for {
		page := get(t, srv.URL+"/?"+q, http.StatusOK)
		pages++
		for _, id := range runIDs(page) {
			require.False(t, seen[id], "%s twice", id)
			seen[id] = true
		}
		m := nextPage.FindStringSubmatch(page)
		if m == nil {
			break
		}
		q = html.UnescapeString(m[1])
		require.Contains(t, q, "limit=700", "the next page keeps the limit")
	}
	require.Len(t, seen, 2500)
	require.Equal(t, 4, pages)

	// The filter travels with the pages; host is read from the summaries.
	before := src.readCount()
	page = get(t, srv.URL+"/?host=host1&limit=10", http.StatusOK)
	require.Len(t, runIDs(page), 10)
	for _, id := range runIDs(page) {
		var n int
		_, _ = fmt.Sscanf(id, "run-%d", &n)
		require.Equal(t, 1, n%3, id)
	}
	require.LessOrEqual(t, src.readCount()-before, 10)
	require.Contains(t, html.UnescapeString(nextPage.FindStringSubmatch(page)[1]), "host=host1")

	get(t, srv.URL+"/?limit=0", http.StatusBadRequest)
	get(t, srv.URL+"/?limit=1001", http.StatusBadRequest)
	get(t, srv.URL+"/events?limit=x", http.StatusBadRequest)
	require.Contains(t, get(t, srv.URL+"/?after=gone", http.StatusOK), "Run gone is no longer listed")
}

// TestListFilterBudget: a filter only the reports answer (model, issue,
// flag) reads a bounded number of new reports a request; the page says
// where the search stopped, and its next link goes on from there.
func TestListFilterBudget(t *testing.T) {
	src := manyRuns(t, 1500)
	srv, _ := serve(t, src, Options{Loopback: true})
	page := get(t, srv.URL+"/?model=nomatch&limit=50", http.StatusOK)
	require.Empty(t, runIDs(page))
	require.Equal(t, scanBudget(50), src.readCount())
	require.Contains(t, page, "the search stopped there")
	walked := 1
	for m := nextPage.FindStringSubmatch(page); m != nil; m = nextPage.FindStringSubmatch(page) {
		page = get(t, srv.URL+"/?"+html.UnescapeString(m[1]), http.StatusOK)
		walked++
	}
	require.Equal(t, 4, walked, "1500 runs, 400 a request")
	require.Contains(t, page, "0 matching among runs 1201–1500 of 1500")
	// Once read, a run costs nothing until it changes.
	n := src.readCount()
	get(t, srv.URL+"/?model=Qwen&limit=1000", http.StatusOK)
	require.Equal(t, n, src.readCount())
}

// TestRunPageLive: a run's page follows the run (/run/{id}/events), and
// while the log's model load is not folded it says "unknown" where it
// said "not attributed unknown" and drew the whole peak (20497.0 MiB,
// 100 %) as not attributed.
func TestRunPageLive(t *testing.T) {
	const id = "strix01-20261107T141902-27b"
	src := &memSource{}
	src.add(partial(t, "testdata/runs/27b/events.jsonl", 1))
	srv, _ := serve(t, src, Options{Loopback: true, Poll: 20 * time.Millisecond})

	page := get(t, srv.URL+"/run/"+id, http.StatusOK)
	require.Contains(t, page, `<b id="peak">20497.0 MiB</b>`)
	require.Contains(t, page, `<b id="unattributed">unknown</b> (not until the log's model load is folded)`)
	require.Contains(t, page, `<b id="status">in progress</b>`)
	require.NotContains(t, page, "100.0 %")
	require.Regexp(t, `<tr data-key="unattributed">.*<td class="n">unknown</td><td class="n">—</td></tr>`, page)
	require.NotContains(t, page, "not attributed unknown")
	require.Contains(t, page, `new EventSource("/run/`+id+`/events")`)

	resp, err := http.Get(srv.URL + "/run/" + id + "/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	next := sseReader(t, bufio.NewReader(resp.Body))
	first := next()
	require.Contains(t, first, "event: run\n")
	require.Contains(t, first, "in progress")
	src.add(replay(t, "testdata/runs/27b/events.jsonl"))
	second := next()
	require.Contains(t, second, "event: run\n")
	require.Contains(t, second, `<span id="status">complete</span>`)
	require.Contains(t, second, "1909.5 MiB, 9.3 % of the peak")
}

// partial folds a recorded run without its finish and with at most
// logEvents of its log events (an open run whose model load is not
// folded yet).
func partial(t *testing.T, path string, logEvents int) split.Report {
	t.Helper()
	n := 0
	return foldStream(t, path, func(d events.Decoded) bool {
		switch d.Type {
		case events.TypeRunFinished:
			return false
		case events.TypeLogLines:
			n++
			return n <= logEvents
		}
		return true
	})
}

// sseReader returns the next server-sent event of rd at each call.
func sseReader(t *testing.T, rd *bufio.Reader) func() string {
	return func() string {
		var b strings.Builder
		for {
			line, err := rd.ReadString('\n')
			require.NoError(t, err)
			if line == "\n" {
				return b.String()
			}
			b.WriteString(line)
		}
	}
}

// TestPagesOneTimeFormat: every time on the pages is UTC to the second.
func TestPagesOneTimeFormat(t *testing.T) {
	src := &memSource{}
	src.add(replay(t, "testdata/runs/4b/events.jsonl"))
	srv, _ := serve(t, src, Options{Loopback: true})
	page := get(t, srv.URL+"/run/strix01-20261107T140311-4b", http.StatusOK)
	require.NotRegexp(t, `\d\d:\d\d:\d\d\.\d`, page, "no fractions of a second")
	require.Regexp(t, `seconds since \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ<`, page)
	require.Regexp(t, `<th>started, finished</th><td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ, \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ</td>`, page)
	require.Contains(t, page, `toISOString().slice(11, 19)`, "the live label in UTC too")
	require.NotContains(t, page, "toLocaleTimeString")
	require.Contains(t, get(t, srv.URL+"/", http.StatusOK), `toISOString().slice(11, 19)`)
}

// An open run still loading (the 4B run's events up to its model load,
// before the loader's buffer lines and the host-weight trace came) says
// what it has not seen as not seen yet: not "run with
// GGML_HRX_HOST_WEIGHT_TRACE=1" (the collector had set it) nor "the load
// printed no model buffer line (it failed ...)".
func TestOpenRunPageSaysNotSeenYet(t *testing.T) {
	src := &memSource{}
	open := foldStream(t, "testdata/runs/4b/events.jsonl", func(d events.Decoded) bool {
		switch {
		case d.Finished != nil:
			return false
		case d.Lines != nil:
			return d.Lines[len(d.Lines)-1].Seq < 1330 // the real load's model lines are 1335-1337
		}
		return true
	})
	require.True(t, open.Run.Open)
	src.add(open)
	srv, _ := serve(t, src, Options{Loopback: true})
	page := get(t, srv.URL+"/run/"+open.Run.ID, http.StatusOK)
	require.NotContains(t, page, "GGML_HRX_HOST_WEIGHT_TRACE=1")
	require.NotContains(t, page, "it failed")
	require.Contains(t, page, "no host-weight trace line seen yet (the run is still open)")
	require.Contains(t, page, "no model buffer line seen yet (the run is still open)")
}

// unlistingSource leaves open runs out of its summaries (to bound its
// memory) and says so, as the aggregator's run index does.
type unlistingSource struct {
	*memSource
	n   atomic.Int64
	why string
}

func (u *unlistingSource) Unlisted() (int64, string) {
	if n := u.n.Load(); n > 0 {
		return n, u.why
	}
	return 0, ""
}

// TestListSaysWhatItDoesNotList: a source that leaves runs out says how
// many and why, and the list says it plainly above its pager, on every
// page (the live updates replace the same part); once none is left out,
// nothing is said.
func TestListSaysWhatItDoesNotList(t *testing.T) {
	src := &unlistingSource{memSource: manyRuns(t, 150), why: "1234 open runs not listed: the run index keeps open runs' summaries in at most 16 KiB"}
	src.n.Store(1234)
	srv, _ := serve(t, src, Options{Loopback: true, Poll: 10 * time.Millisecond})
	for _, q := range []string{"/", "/?after=run-00100", "/?host=host1"} {
		page := get(t, srv.URL+q, http.StatusOK)
		require.Contains(t, page, `<p class="unlisted" id="unlisted">1234 open runs not listed: the run index keeps open runs&#39; summaries in at most 16 KiB.</p>`, q)
	}
	src.n.Store(0)
	require.Eventually(t, func() bool { return !strings.Contains(get(t, srv.URL+"/", http.StatusOK), `id="unlisted"`) },
		time.Minute, 10*time.Millisecond, "a list that leaves nothing out says nothing")
}
