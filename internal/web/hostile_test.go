package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every field a collector (or whoever holds a host's credential) puts
// into a run reaches the pages escaped: a run whose id, host, lane, command,
// issue, control, model file, build, commit and collector version each
// hold markup renders none of it raw, on the list, the run's page, the
// comparison and the trend.
func TestHostileFieldsEscaped(t *testing.T) {
	const evil = `"><script>alert(1)</script><img src=x onerror=alert(2)>`
	r := replay(t, "testdata/runs/4b/events.jsonl")
	r.Run.ID = "r" + evil
	r.Run.Host = "h" + evil
	r.Run.Lane = "l" + evil
	r.Run.Command = "llama-cli " + evil
	r.Run.Issue = "o/r#1" + evil
	r.Run.ControlOf = "c" + evil
	r.Provenance.LlamaBuild = "b" + evil
	r.Provenance.SourceCommit = "s" + evil
	r.Provenance.CollectorVersion = "v" + evil
	require.NotEmpty(t, r.Models)
	r.Models[0].File = "m" + evil + ".gguf"
	src := &memSource{}
	src.add(r)
	srv, _ := serve(t, src, Options{Loopback: true})

	id := url.PathEscape(r.Run.ID)
	qid := url.QueryEscape(r.Run.ID)
	q := url.Values{"host": {r.Run.Host}, "lane": {r.Run.Lane}, "model": {r.Models[0].File}}
	pages := map[string]string{
		"list":    get(t, srv.URL+"/", http.StatusOK),
		"run":     get(t, srv.URL+"/run/"+id, http.StatusOK),
		"compare": get(t, srv.URL+"/compare?a="+qid+"&b="+qid, http.StatusOK),
		"trend":   get(t, srv.URL+"/trend?"+q.Encode(), http.StatusNotFound), // no closed run in the index: the filter is echoed
		"lanes":   get(t, srv.URL+"/trend", http.StatusOK),
	}
	for name, body := range pages {
		for _, raw := range []string{"<script>alert(1)", "<img src=x", "onerror=alert(2)>", `"><script`} {
			require.NotContains(t, body, raw, "%s page: %q rendered raw", name, raw)
		}
	}
	require.Contains(t, pages["run"], "&lt;script&gt;alert(1)&lt;/script&gt;", "the fields are shown, escaped")
	require.True(t, strings.Contains(pages["list"], "&lt;script&gt;") || strings.Contains(pages["list"], "&#34;&gt;&lt;script"))
}
