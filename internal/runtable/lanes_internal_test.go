package runtable

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/split"
)

func laneSum(id, host, lane, model string, closed time.Time, peak float64) RunSummary {
	p, d := split.MiB(peak), split.Pct(33.49)
	return RunSummary{ID: id, Host: host, Lane: lane, State: "closed", ClosedAt: closed,
		Split: &split.Figures{Model: model, PeakGTTMiB: &p, DuplicatePct: &d}}
}

func lastOf(ix *Index) map[LaneKey]string {
	ls, _ := ix.LaneSplits(0)
	out := map[LaneKey]string{}
	for _, l := range ls {
		out[l.LaneKey] = l.RunID
	}
	return out
}

// The last closed split of each lane follows the index: the newest close
// wins, an open run, a control and a summary without figures are no
// lane's split, a deleted or re-opened last run hands the lane to the one
// before, and a lane with no run left goes.
func TestLaneSplitsFollowTheIndex(t *testing.T) {
	t0 := time.Date(2026, 11, 7, 14, 0, 0, 0, time.UTC)
	ix := newIndex()
	put := func(s RunSummary) { ix.put(summaryKey(s.ID), s) }
	a := LaneKey{"strix01", "gpu0", "4b.gguf"}
	b := LaneKey{"strix01", "gpu1", "27b.gguf"}

	put(laneSum("r1", "strix01", "gpu0", "4b.gguf", t0, 3129.2))
	put(laneSum("r3", "strix01", "gpu0", "4b.gguf", t0.Add(2*time.Hour), 3925))
	put(laneSum("r2", "strix01", "gpu0", "4b.gguf", t0.Add(time.Hour), 3500)) // closed before r3: not the last
	put(laneSum("s1", "strix01", "gpu1", "27b.gguf", t0, 20497))
	ctl := laneSum("c1", "strix01", "gpu0", "4b.gguf", t0.Add(3*time.Hour), 753.3)
	ctl.Split.ControlOf = "r3"
	put(ctl)
	put(RunSummary{ID: "o1", Host: "strix01", Lane: "gpu0", State: "open", LastEvent: t0.Add(4 * time.Hour)})
	old := laneSum("e1", "strix01", "gpu0", "4b.gguf", t0.Add(5*time.Hour), 1)
	old.Split = nil // written by an earlier version
	put(old)
	require.Equal(t, map[LaneKey]string{a: "r3", b: "s1"}, lastOf(ix))

	// Re-opened by a late event: its summary is open again.
	r3open := RunSummary{ID: "r3", Host: "strix01", Lane: "gpu0", State: "open"}
	put(r3open)
	require.Equal(t, "r2", lastOf(ix)[a])
	put(laneSum("r3", "strix01", "gpu0", "4b.gguf", t0.Add(6*time.Hour), 3925))
	require.Equal(t, "r3", lastOf(ix)[a])

	// Compacted: the same split, rewritten.
	put(laneSum("r3", "strix01", "gpu0", "4b.gguf", t0.Add(6*time.Hour), 3925))
	require.Equal(t, "r3", lastOf(ix)[a])

	// Deleted (store.retention, or another aggregator's janitor).
	ix.del(summaryKey("r3"))
	require.Equal(t, "r2", lastOf(ix)[a])
	ix.del(summaryKey("s1"))
	_, n := ix.LaneSplits(0)
	require.Equal(t, 1, n, "lane gpu1 went away with its last run")
	ix.del(summaryKey("r1"))
	ix.del(summaryKey("r2"))
	require.Empty(t, lastOf(ix))
	require.Empty(t, ix.runLane)
}

// lanePoints gathers the lane metrics of m: "name{label values}" → value.
func lanePoints(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "gttsplit_lane") {
			continue
		}
		for _, mm := range mf.GetMetric() {
			var ls []string
			for _, l := range mm.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = mm.GetGauge().GetValue()
		}
	}
	return out
}

// The gauges of the lanes, as a scrape reads them: one series per known
// part, the shares as fractions, the time the split was written; at most
// the newest MaxLaneGauges lanes, all of them counted.
func TestLaneGaugesScrape(t *testing.T) {
	t0 := time.Date(2026, 11, 7, 14, 0, 0, 0, time.UTC)
	ix := newIndex()
	s := laneSum("r1", "strix01", "gpu0", "4b.gguf", t0, 3925)
	ix.put(summaryKey(s.ID), s)
	m := NewMetrics()
	require.Equal(t, map[string]float64{"gttsplit_lanes{}": 0}, lanePoints(t, m), "no index yet: nothing but the count")
	m.lanes.ix.Store(ix)
	require.Equal(t, map[string]float64{
		"gttsplit_lanes{}": 1,
		"gttsplit_lane_split_mib{host=strix01,lane=gpu0,model=4b.gguf,part=peak}":         3925,
		"gttsplit_lane_split_ratio{host=strix01,lane=gpu0,model=4b.gguf,ratio=duplicate}": 0.3349,
		"gttsplit_lane_split_timestamp_seconds{host=strix01,lane=gpu0,model=4b.gguf}":     float64(t0.Unix()),
	}, lanePoints(t, m))

	for i := range MaxLaneGauges + 5 {
		s := laneSum(fmt.Sprintf("x%05d", i), "h", fmt.Sprintf("l%05d", i), "m", t0.Add(time.Duration(i)*time.Second), 1)
		ix.put(summaryKey(s.ID), s)
	}
	ls, n := ix.LaneSplits(MaxLaneGauges)
	require.Equal(t, MaxLaneGauges+6, n)
	require.Len(t, ls, MaxLaneGauges)
	require.Equal(t, fmt.Sprintf("x%05d", MaxLaneGauges+4), ls[0].RunID, "the newest first")
	pts := lanePoints(t, m)
	require.Equal(t, float64(MaxLaneGauges+6), pts["gttsplit_lanes{}"])
	require.Len(t, pts, 1+3*MaxLaneGauges, "the count, and peak, duplicate and time of each lane exported")
}

// Every row with a gauge is exported, as a MiB part or a ratio by its
// unit, under its gauge label: a row added to split.Rows needs no line
// here.
func TestLaneGaugesOfEveryRow(t *testing.T) {
	s := laneSum("r1", "h", "l", "m", time.Unix(1, 0), 1)
	f := split.Figures{Model: "m"}
	want := map[string]float64{"gttsplit_lanes{}": 1, "gttsplit_lane_split_timestamp_seconds{host=h,lane=l,model=m}": 1}
	for i, row := range split.Rows {
		if row.Gauge == "" {
			continue
		}
		v := split.MiB(10 + i)
		b, err := json.Marshal(map[string]any{row.JSON: v})
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &f), row.Key)
		if row.Unit == split.UnitPct {
			want["gttsplit_lane_split_ratio{host=h,lane=l,model=m,ratio="+row.Gauge+"}"] = float64(v) / 100
		} else {
			want["gttsplit_lane_split_mib{host=h,lane=l,model=m,part="+row.Gauge+"}"] = float64(v)
		}
	}
	s.Split = &f
	ix := newIndex()
	ix.put(summaryKey(s.ID), s)
	m := NewMetrics()
	m.lanes.ix.Store(ix)
	require.Equal(t, want, lanePoints(t, m))
}
