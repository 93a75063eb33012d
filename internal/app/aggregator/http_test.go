package aggregator

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// TestHTTPTokenOffLoopbackIntegration: on a non-loopback listener every
// path but /healthz and /readyz needs http.token: the page, its live
// streams, /runs, /runs/{id} (full splits with command lines) and
// /metrics (unless http.metrics_public). Before, /runs, /runs/{id} and
// /metrics answered anyone. The profiles (http.pprof) are off unless
// asked for, and need the token there too.
func TestHTTPTokenOffLoopbackIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	run := fx.Origin.RunID
	guarded := []string{"/runs", "/runs/" + run, "/metrics", "/partitions", "/", "/events", "/run/" + run, "/run/" + run + "/events", "/compare"}
	open := []string{"/healthz", "/readyz"}

	serveOn := func(t *testing.T, mutate func(*config.Aggregator)) string {
		cfg := testConfig(t, b.url)
		cfg.HTTP.Listen = "0.0.0.0:0" // not loopback: the token applies
		mutate(&cfg)
		s := startServe(t, cfg, ServeOptions{})
		_, port, err := net.SplitHostPort(s.http)
		require.NoError(t, err)
		return "127.0.0.1:" + port
	}
	status := func(t *testing.T, addr, path, token string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		c := &http.Client{Timeout: waitFor, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK && resp.Header.Get("Content-Type") == "text/event-stream" {
			return resp.StatusCode // a live stream: its first event is enough
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}

	t.Run("token", func(t *testing.T) {
		addr := serveOn(t, func(c *config.Aggregator) { c.HTTP.Token = "s3cret" })
		b.publish(t, fx.Wires...)
		eventually(t, "the run is listed", func() bool { return status(t, addr, "/runs/"+run, "s3cret") == http.StatusOK })
		for _, p := range open {
			require.Equal(t, http.StatusOK, status(t, addr, p, ""), p)
		}
		for _, p := range guarded {
			require.Equal(t, http.StatusUnauthorized, status(t, addr, p, ""), "%s without the token", p)
			require.Equal(t, http.StatusUnauthorized, status(t, addr, p, "wrong"), "%s with a wrong token", p)
			require.Equal(t, http.StatusOK, status(t, addr, p, "s3cret"), "%s with the token", p)
		}
		require.Equal(t, http.StatusSeeOther, status(t, addr, "/runs?token=s3cret", ""), "?token= sets the cookie and drops itself")
		require.Equal(t, http.StatusNotFound, status(t, addr, "/debug/pprof/heap", "s3cret"), "no profiles unless http.pprof")
	})
	t.Run("no token", func(t *testing.T) {
		addr := serveOn(t, func(*config.Aggregator) {})
		for _, p := range open {
			require.Equal(t, http.StatusOK, status(t, addr, p, ""), p)
		}
		for _, p := range guarded {
			require.Equal(t, http.StatusForbidden, status(t, addr, p, ""), "%s is refused with no http.token", p)
		}
	})
	t.Run("metrics public", func(t *testing.T) {
		addr := serveOn(t, func(c *config.Aggregator) { c.HTTP.Token, c.HTTP.MetricsPublic = "s3cret", true })
		require.Equal(t, http.StatusOK, status(t, addr, "/metrics", ""))
		require.Equal(t, http.StatusUnauthorized, status(t, addr, "/runs", ""))
	})
	// http.pprof serves the profiles behind the token, metrics_public or
	// not; on loopback to anyone.
	t.Run("profiles", func(t *testing.T) {
		addr := serveOn(t, func(c *config.Aggregator) { c.HTTP.Token, c.HTTP.MetricsPublic, c.HTTP.Pprof = "s3cret", true, true })
		for _, p := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine", "/debug/pprof/cmdline"} {
			require.Equal(t, http.StatusUnauthorized, status(t, addr, p, ""), "%s without the token", p)
			require.Equal(t, http.StatusOK, status(t, addr, p, "s3cret"), "%s with the token", p)
		}
		cfg := testConfig(t, b.url)
		cfg.HTTP.Listen, cfg.HTTP.Pprof = "127.0.0.1:0", true
		s := startServe(t, cfg, ServeOptions{})
		require.Equal(t, http.StatusOK, status(t, s.http, "/debug/pprof/heap", ""), "open on loopback")
	})
}

// TestRunsSayWhatTheyDoNotListIntegration: with more runs open than the
// run index may list in its share of the memory limit (memory_limit_mib 2:
// 128 KiB of summaries, ~330 runs; 800 open), /runs answers the runs it
// lists and says in X-Unlisted-Runs how many open runs it does not (listed
// + not listed = open), and in X-Unlisted-Why why; the live page says the
// same above its pager.
func TestRunsSayWhatTheyDoNotListIntegration(t *testing.T) {
	skipShort(t)
	const open = 800
	s, c := serveStarts(t, "unlisted", open, 0)
	var listed int
	var unlisted int64
	var why string
	eventually(t, "/runs lists or counts every open run", func() bool {
		resp, err := c.Get("http://" + s.http + "/runs?limit=10000")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var list []runtable.RunSummary
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
		listed, why = len(list), resp.Header.Get("X-Unlisted-Why")
		unlisted, _ = strconv.ParseInt(resp.Header.Get("X-Unlisted-Runs"), 10, 64)
		return listed+int(unlisted) == open && unlisted > 0
	})
	t.Logf("/runs: %d listed, %d not listed: %s", listed, unlisted, why)
	require.Less(t, listed, open/2)
	require.Contains(t, why, fmt.Sprintf("%d open runs not listed", unlisted))
	require.Contains(t, why, "memory_limit_mib")
	require.Contains(t, httpGet(t, s.http, "/", http.StatusOK), `id="unlisted">`+fmt.Sprintf("%d open runs not listed", unlisted))
}

// More closed runs than the run index holds the summaries of (memory_limit_mib
// 2: 128 KiB, ~90 summaries with their figures): /runs still lists every
// run with its figures (the evicted ones' summaries read from the state
// bucket) and says in X-Evicted-Runs how many summaries it does not hold
// in memory, in X-Evicted-Why why; the trend page shows every run of the
// lane, evicted or not.
func TestRunsListEvictedClosedRunsIntegration(t *testing.T) {
	skipShort(t)
	const closed = 240
	// Runs of a start each, closed by the idle timeout.
	s, c := serveStarts(t, "evicted", closed, time.Second)
	var list []runtable.RunSummary
	var evicted int64
	var why string
	eventually(t, "/runs lists every run closed, some evicted", func() bool {
		resp, err := c.Get("http://" + s.http + "/runs?limit=10000")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		list = nil
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
		why = resp.Header.Get("X-Evicted-Why")
		evicted, _ = strconv.ParseInt(resp.Header.Get("X-Evicted-Runs"), 10, 64)
		n := 0
		for _, r := range list {
			if r.State == "closed" {
				n++
			}
		}
		return n == closed && evicted > 0
	})
	t.Logf("/runs: %d closed runs listed, %d of their summaries not held in memory: %s", len(list), evicted, why)
	require.Contains(t, why, fmt.Sprintf("%d closed runs' summaries not held in memory", evicted))
	require.Contains(t, why, "memory_limit_mib")
	for _, r := range list {
		require.NotNil(t, r.Split, "run %s listed without its figures", r.ID)
	}
	q := url.Values{"host": {list[0].Host}, "lane": {list[0].Lane}, "model": {list[0].Split.Model}}
	require.Contains(t, httpGet(t, s.http, "/trend?"+q.Encode(), http.StatusOK), fmt.Sprintf("%d closed runs", closed))
}

// serveStarts starts serve with memory_limit_mib 2 (a runs' bound of 1
// MiB) and the idle timeout idle (0: the default), publishes n runs of the 4B run's start
// each (run ids prefix-NNNN), waits until every event is acknowledged, and
// returns the server and a client for its HTTP listener.
func serveStarts(t *testing.T, prefix string, n int, idle time.Duration) (*served, *http.Client) {
	t.Helper()
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	cfg := testConfig(t, b.url)
	cfg.HTTP.Listen, cfg.MemoryLimitMiB = "127.0.0.1:0", 2
	if idle > 0 {
		cfg.IdleTimeout = idle
	}
	s := startServe(t, cfg, ServeOptions{})
	var wires []events.Wire
	for i := range n {
		w, err := rt.Rewrite(fx.Decoded[0], events.Origin{RunID: fmt.Sprintf("%s-%04d", prefix, i), Host: fx.Origin.Host, Lane: fx.Origin.Lane})
		require.NoError(t, err)
		wires = append(wires, w)
	}
	b.publish(t, wires...)
	b.waitAcked(t, cfg.Consumer.Fleet.Group)
	return s, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: waitFor}
}

// TestReadyzNamesWhatItCatchesUpOn: /readyz's status is readiness's
// alone; what the table catches up on without being unready (pulls
// waiting for the partition furthest behind) is a line after "ready",
// or follows the reasons of a 503.
func TestReadyzNamesWhatItCatchesUpOn(t *testing.T) {
	t.Parallel()
	const paced = "catching up in stream order: pulls of 2 partitions wait"
	for _, c := range []struct {
		ok         bool
		why, paced string
		code       int
		body       string
	}{
		{true, "", "", http.StatusOK, "ready\n"},
		{true, "", paced, http.StatusOK, "ready\n" + paced + "\n"},
		{false, "shedding: 3 open runs", "", http.StatusServiceUnavailable, "shedding: 3 open runs"},
		{false, "shedding: 3 open runs", paced, http.StatusServiceUnavailable, "shedding: 3 open runs; " + paced},
	} {
		code, body := readyzPage(c.ok, c.why, c.paced)
		require.Equal(t, c.code, code, "%+v", c)
		require.Equal(t, c.body, body, "%+v", c)
	}
}
