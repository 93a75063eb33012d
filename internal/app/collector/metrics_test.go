package collector

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/pkg/conf"
)

// TestRunMetricsIntegration runs the 4B log with the broker away and
// http.listen beyond loopback with a token: while the child still runs,
// /metrics (with the token; refused without it) shows the run's events
// built and spooled, the spool's bytes, none published and the broker
// not connected; /healthz needs no token.
func TestRunMetricsIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	url, _ := deadBroker(t)
	cfg := testConfig(t)
	cfg.NATS.URL = url
	cfg.RunID = "metrics-1"
	cfg.ShutdownTimeout = 2 * time.Second
	cfg.HTTP.Listen = "0.0.0.0:0"
	cfg.HTTP.Token = conf.Secret("scrape-token")
	gateFile := filepath.Join(t.TempDir(), "gate")
	argv := childArgv(t, "src="+absPath(t, fixture4B), "print=0:", "gate="+gateFile, "exit=0")

	var logs syncBuffer
	done := make(chan int, 1)
	go func() {
		code, err := Run(testCtx(t), cfg, argv, newTestIO().io(), zerolog.New(&logs))
		if err != nil {
			t.Errorf("run: %v", err)
		}
		done <- code
	}()
	defer func() { _ = os.WriteFile(gateFile, nil, 0o644) }()

	portRE := regexp.MustCompile(`"listen":"[^"]*:([0-9]+)","message":"http: /healthz /metrics"`)
	var port string
	eventually(t, "the http listener's log line", func() bool {
		m := portRE.FindStringSubmatch(logs.String())
		if m != nil {
			port = m[1]
		}
		return m != nil
	})
	base := "http://127.0.0.1:" + port
	get := func(path, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, _ := get("/healthz", "")
	require.Equal(t, http.StatusOK, code)
	code, _ = get("/metrics", "")
	require.Equal(t, http.StatusUnauthorized, code, "/metrics beyond loopback without the token")

	value := func(body, name string) float64 {
		m := regexp.MustCompile(`(?m)^` + name + `\{host="testhost",lane="gpu0"\} (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return -1
		}
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return v
	}
	var body string
	// An event is counted before it is spooled, but a scrape reads the two
	// counters at two moments (the registry gathers them concurrently)
	// while the run goes on: one scrape may read the events before the
	// latest spooled one was counted. A scrape that reads them in order
	// comes soon.
	eventually(t, "the run's events spooled, each counted", func() bool {
		_, body = get("/metrics", "scrape-token")
		spooled := value(body, "gttsplit_collector_events_spooled_total")
		return spooled >= 100 && value(body, "gttsplit_collector_spool_bytes") > 0 &&
			value(body, "gttsplit_collector_events_total") >= spooled
	})
	require.Zero(t, value(body, "gttsplit_collector_events_published_total"))
	require.Zero(t, value(body, "gttsplit_collector_events_dropped_total"))
	require.Zero(t, value(body, "gttsplit_collector_broker_connected"))
	require.Equal(t, float64(cfg.Spool.MaxBytes), value(body, "gttsplit_collector_spool_max_bytes"))

	require.NoError(t, os.WriteFile(gateFile, nil, 0o644))
	require.Equal(t, cli.ExitTempFail, <-done, "events wait in the spool")
	_, err := http.Get(base + "/healthz")
	require.Error(t, err, "the listener closes with the run")
}
