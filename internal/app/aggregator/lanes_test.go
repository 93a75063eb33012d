package aggregator

import (
	"bufio"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/runtable"
)

// scrapeLanes reads the lane gauges of /metrics at addr: each series'
// text (name{labels}) and value.
func scrapeLanes(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "gttsplit_lane") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		require.NoError(t, err, l)
		out[l[:i]] = v
	}
	require.NoError(t, sc.Err())
	return out
}

// TestServeLaneGaugesIntegration: a real serve folds the 4B and 27B runs
// and the 4B run's control; its /metrics exports the last split of each
// lane (not the control's), with ten series a lane. When another
// aggregator's janitor deletes the 27B run (store.retention), its lane's
// gauges go; a serve started again on the store exports the lane left at
// once.
func TestServeLaneGaugesIntegration(t *testing.T) {
	skipShort(t)
	fx4, fx27 := loadFixture(t, fixture4B), loadFixture(t, fixture27B)
	ctl := loadFixture(t, filepath.Join(filepath.Dir(fixture4B), "..", "..", "controls", "4b-ngl0", "events.jsonl"))
	b := startBroker(t)
	cfg := testConfig(t, b.url)
	cfg.HTTP.Listen = "127.0.0.1:0"
	s := startServe(t, cfg, ServeOptions{})
	b.publish(t, fx4.Wires...)
	b.publish(t, fx27.Wires...)
	b.publish(t, ctl.Wires...)
	eventually(t, "3 splits", func() bool { n, _ := s.closes.count(); return n == 3 })

	const (
		gpu0 = `host="strix01",lane="gpu0",model="Qwen3.5-4B-Q4_K_M.gguf"`
		gpu1 = `host="strix01",lane="gpu1",model="Qwen3.5-27B-Q4_K_M-00001-of-00002.gguf"`
	)
	var got map[string]float64
	eventually(t, "both lanes' gauges", func() bool { got = scrapeLanes(t, s.http); return got["gttsplit_lanes"] == 2 })
	want4B := map[string]float64{
		"gttsplit_lane_split_mib{" + gpu0 + `,part="peak"}`:            3925,
		"gttsplit_lane_split_mib{" + gpu0 + `,part="final"}`:           3641.25,
		"gttsplit_lane_split_mib{" + gpu0 + `,part="model"}`:           2375.91,
		"gttsplit_lane_split_mib{" + gpu0 + `,part="packed"}`:          795.8,
		"gttsplit_lane_split_mib{" + gpu0 + `,part="state"}`:           36,
		"gttsplit_lane_split_mib{" + gpu0 + `,part="compute"}`:         43.21,
		"gttsplit_lane_split_mib{" + gpu0 + `,part="unattributed"}`:    674.08,
		"gttsplit_lane_split_ratio{" + gpu0 + `,ratio="duplicate"}`:    0.3349,
		"gttsplit_lane_split_ratio{" + gpu0 + `,ratio="unattributed"}`: 0.1717,
	}
	for k, v := range want4B {
		require.Equal(t, v, got[k], k)
	}
	require.Equal(t, 0.1674, got["gttsplit_lane_split_ratio{"+gpu1+`,ratio="duplicate"}`])
	require.Equal(t, 20497.0, got["gttsplit_lane_split_mib{"+gpu1+`,part="peak"}`])
	require.Positive(t, got["gttsplit_lane_split_timestamp_seconds{"+gpu0+"}"])
	require.Len(t, got, 1+2*10, "the count and ten series a lane")

	// Another aggregator's janitor deletes the 27B run (as Table.Expire
	// does: its state and summary keys).
	kv, err := b.js.KeyValue(testCtx(t), runtable.Bucket)
	require.NoError(t, err)
	for _, k := range []string{"run." + fx27.Origin.RunID, "sum.run." + fx27.Origin.RunID} {
		require.NoError(t, kv.Purge(testCtx(t), k), k)
	}
	eventually(t, "the 27B lane gone", func() bool { got = scrapeLanes(t, s.http); return got["gttsplit_lanes"] == 1 })
	require.Len(t, got, 1+10)
	for k, v := range want4B {
		require.Equal(t, v, got[k], k)
	}
	_, err = kv.Get(testCtx(t), "sum.run."+fx4.Origin.RunID)
	require.NotErrorIs(t, err, jetstream.ErrKeyNotFound)

	// Started again: the lane's gauges are there as soon as it serves.
	require.NoError(t, s.stop(t))
	s2 := startServe(t, cfg, ServeOptions{})
	got = scrapeLanes(t, s2.http)
	require.Len(t, got, 1+10)
	for k, v := range want4B {
		require.Equal(t, v, got[k], k)
	}
}
