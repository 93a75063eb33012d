package web

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// memSource is a table of folded runs (the service's role).
type memSource struct {
	mu   sync.Mutex
	runs map[string]split.Report
	sums []Summary
}

func (m *memSource) Summaries(context.Context) ([]Summary, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Summary(nil), m.sums...), nil
}

func (m *memSource) Report(_ context.Context, id string) (split.Report, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
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
	m.sums = append(m.sums, Summary{ID: r.Run.ID, Host: r.Run.Host, Lane: r.Run.Lane, State: "closed", LastEvent: time.Unix(int64(len(m.sums)), 0)})
}

// replay folds a recorded stream of one run.
func replay(t *testing.T, path string) split.Report {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", path))
	require.NoError(t, err)
	defer f.Close()
	fold := split.NewFold(split.Options{})
	r := events.NewReader(f)
	for r.Next() {
		d, err := events.Decode(r.Event())
		require.NoError(t, err)
		fold.Apply(d.Input())
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
	f = get(t, srv.URL+"/?flag=no_trace", http.StatusOK)
	require.Contains(t, f, `data-run="strix01-20261107T141509-4b-ngl0"`)
	require.NotContains(t, f, `data-run="strix01-20261107T140311-4b"`)
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

	cmp := get(t, srv.URL+"/compare?a=strix01-20261107T140311-4b&b=strix01-20261107T141509-4b-ngl0", http.StatusOK)
	require.Contains(t, cmp, "weights resident twice: the difference of the peaks is 3171.7 MiB")
	require.Contains(t, cmp, `<td class="n">&#43;3171.7</td>`)
	// A control alone fills in the run it is the control of.
	require.Contains(t, get(t, srv.URL+"/compare?a=strix01-20261107T141509-4b-ngl0", http.StatusOK), "weights resident twice")
	require.Contains(t, get(t, srv.URL+"/compare?a=strix01-20261107T140311-4b&b=nope", http.StatusOK), "No such run: nope")
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
	next := func() string {
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
