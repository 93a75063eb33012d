package runtable_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
)

const (
	model4B  = "Qwen3.5-4B-Q4_K_M.gguf"
	model27B = "Qwen3.5-27B-Q4_K_M-00001-of-00002.gguf"
)

// A table folds the 27B run, then an hour later the 4B run and, a minute
// after it, the 4B run's control: each lane exports its last split (the
// control, closed last, is not the lane's split). The same aggregator
// restarted exports the same gauges as soon as it started, before it
// folded anything; store.retention then drops the lane whose run expired
// (the 27B one) and keeps the other.
func TestLaneGaugesIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	opts := rt.FoldOptions(t)
	fx4, fx27 := rt.Load(t, fixture4B, opts), rt.Load(t, fixture27B, opts)
	ctl := rt.Load(t, filepath.Join(filepath.Dir(fixture4B), "..", "..", "controls", "4b-ngl0", "events.jsonl"), opts)
	b := rt.StartBroker(t)
	const group = "lanes"
	clk := newFakeClock()
	t0 := clk.now()
	cfg := tableConfig{idle: time.Hour, now: clk.now}
	r := startTable(t, b.URL, group, cfg)
	r.waitOwns(r.parts)

	b.Publish(t, fx27.Wires...)
	rt.Eventually(t, "the 27B split", func() bool { n, _ := r.closes.count(); return n == 1 })
	clk.advance(time.Hour)
	b.Publish(t, fx4.Wires...)
	rt.Eventually(t, "the 4B split", func() bool { n, _ := r.closes.count(); return n == 2 })
	clk.advance(time.Minute)
	b.Publish(t, ctl.Wires...)
	rt.Eventually(t, "the control's split", func() bool { n, _ := r.closes.count(); return n == 3 })
	b.WaitAcked(t, group)

	both := func(m *runtable.Metrics) bool {
		return counter(t, m, "gttsplit_lanes") == 2 &&
			counter(t, m, "gttsplit_lane_split_mib", "strix01", "gpu0", model4B, "peak") == 3925
	}
	rt.Eventually(t, "the gauges of both lanes", func() bool { return both(r.m) })
	check := func(m *runtable.Metrics) {
		t.Helper()
		for _, c := range []struct {
			name   string
			labels []string
			want   float64
		}{
			{"gttsplit_lane_split_mib", []string{"strix01", "gpu0", model4B, "packed"}, 795.8},
			{"gttsplit_lane_split_mib", []string{"strix01", "gpu0", model4B, "final"}, 3641.25},
			{"gttsplit_lane_split_mib", []string{"strix01", "gpu0", model4B, "unattributed"}, 674.08},
			{"gttsplit_lane_split_ratio", []string{"strix01", "gpu0", model4B, "duplicate"}, 0.3349},
			{"gttsplit_lane_split_ratio", []string{"strix01", "gpu0", model4B, "unattributed"}, 0.1717},
			{"gttsplit_lane_split_timestamp_seconds", []string{"strix01", "gpu0", model4B}, float64(t0.Add(time.Hour).Unix())},
			{"gttsplit_lane_split_mib", []string{"strix01", "gpu1", model27B, "peak"}, 20497},
			{"gttsplit_lane_split_mib", []string{"strix01", "gpu1", model27B, "packed"}, 2631.3},
			{"gttsplit_lane_split_ratio", []string{"strix01", "gpu1", model27B, "duplicate"}, 0.1674},
			{"gttsplit_lane_split_timestamp_seconds", []string{"strix01", "gpu1", model27B}, float64(t0.Unix())},
		} {
			require.Equal(t, c.want, counter(t, m, c.name, c.labels...), "%s%v", c.name, c.labels)
		}
	}
	check(r.m)

	// Restarted: the gauges are there once it started, from the index.
	r.stop()
	r2 := startTable(t, b.URL, group, cfg)
	require.True(t, both(r2.m), "the restarted table exports the lanes at once")
	check(r2.m)
	n, _ := r2.closes.count()
	require.Zero(t, n, "nothing was folded again")

	// The 27B run closed 61 minutes ago, the 4B run 1: a retention of 30
	// minutes deletes the first, and its lane goes.
	r2.waitOwns(r2.parts)
	require.Equal(t, 1, r2.tbl.Expire(rt.Ctx(t), 30*time.Minute))
	rt.Eventually(t, "the 27B lane gone", func() bool { return counter(t, r2.m, "gttsplit_lanes") == 1 })
	require.Zero(t, counter(t, r2.m, "gttsplit_lane_split_mib", "strix01", "gpu1", model27B, "peak"))
	require.Equal(t, 3925.0, counter(t, r2.m, "gttsplit_lane_split_mib", "strix01", "gpu0", model4B, "peak"))
}
