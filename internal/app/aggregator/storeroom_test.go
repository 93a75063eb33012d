package aggregator

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
)

// The embedded server's own store (the fault as found: the events stream
// filled the embedded store's disk with nothing said): serve watches it
// against embedded.max_store (and its disk's room), as
// gttsplit_store_used_ratio{store="server"}, and says once at WARN that it
// nears its limit, not at every watch.
func TestServeEmbeddedStoreRoomIntegration(t *testing.T) {
	skipShort(t)
	const maxStore = 8 << 20
	cfg := testConfig(t, "")
	cfg.Embedded.Listen = "127.0.0.1:0"
	cfg.Embedded.MaxStore = maxStore
	cfg.HTTP.Listen = "127.0.0.1:0"
	var logs sinktest.Buffer // serve logs to it while the test reads it
	log := zerolog.New(zerolog.MultiLevelWriter(&logs, zerolog.NewTestWriter(t))).Level(zerolog.InfoLevel)
	s := startServeLog(t, cfg, ServeOptions{}, log)

	ratio := func() (server, stream float64) {
		page := httpGet(t, s.http, "/metrics", http.StatusOK)
		server, _ = strconv.ParseFloat(metricValue(page, `gttsplit_store_used_ratio{store="server"}`), 64)
		b, _ := strconv.ParseFloat(metricValue(page, "gttsplit_stream_bytes"), 64)
		return server, b / maxStore
	}
	eventually(t, "the embedded store watched", func() bool {
		return strings.Contains(httpGet(t, s.http, "/metrics", http.StatusOK), `gttsplit_store_used_ratio{store="server"}`)
	})
	first, _ := ratio()
	require.Less(t, first, 0.8, "nothing published yet")

	b := &rt.Broker{URL: s.url}
	b.NC, b.JS = connectJS(t, s.url)
	st, err := b.JS.Stream(testCtx(t), cfg.NATS.Stream)
	require.NoError(t, err)
	// Runs of 335 kB (4 % of the store) until the events alone fill 80 %.
	runs := genRuns(t, 40, loadFixture(t, fixture4B))
	next := 0
	for ; ; next++ {
		info, err := st.Info(testCtx(t))
		require.NoError(t, err)
		if float64(info.State.Bytes) >= 0.8*maxStore {
			break
		}
		require.Less(t, next, len(runs), "the runs did not fill the store")
		b.Publish(t, runs[next].Wires...)
	}
	eventually(t, "the store said near its limit", func() bool {
		server, stream := ratio()
		return server >= 0.8 && server >= stream && strings.Contains(logs.String(), "nears its limit")
	})
	said, _ := ratio()
	out := logs.String()
	require.Contains(t, out, `"store":"server"`)
	require.Contains(t, out, "embedded.max_store")

	// One more run: a later watch sees it, and says nothing again.
	b.Publish(t, runs[next].Wires...)
	eventually(t, "a later watch", func() bool { r, _ := ratio(); return r > said })
	require.Equal(t, 1, strings.Count(logs.String(), "nears its limit"), "said once, not at every watch:\n%s", logs.String())
	r, _ := ratio()
	require.Less(t, r, 1.0, fmt.Sprintf("the store has room left: %.2f", r))
}
