package runtable

import (
	"math"
	"sort"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// The lane gauges: /metrics exports the last closed split of each host,
// lane and model file. Every aggregator watches every run's summary (the
// run index), and a closed run's summary holds its figures, so every
// aggregator of a fleet exports every lane from the same summaries,
// whichever aggregator folded its runs: a restarted aggregator exports
// them again as soon as it read the index. A lane's gauges go when its
// last run with figures leaves the store (store.retention), and at most
// MaxLaneGauges lanes are exported (the newest).

// MaxLaneGauges bounds the lanes the gauges export: the lanes whose last
// split is the newest. gttsplit_lanes counts them all.
const MaxLaneGauges = 5000

// LaneKey names a lane's splits: the host, the lane and the model file.
type LaneKey struct{ Host, Lane, Model string }

// LaneSplit is the last closed split of a lane.
type LaneSplit struct {
	LaneKey
	RunID    string
	ClosedAt time.Time
	F        split.Figures
}

// lanes keeps, for each lane, its closed runs whose summary has figures
// (controls left out: a run with offload off is not the lane's split) and
// the newest of them. Index.mu guards it.
type lanes struct {
	byLane  map[LaneKey]*laneRuns
	runLane map[string]LaneKey // run id → its lane
}

type laneRuns struct {
	runs map[string]struct{}
	last string // the run closed last
}

func newLanes() lanes {
	return lanes{byLane: map[LaneKey]*laneRuns{}, runLane: map[string]LaneKey{}}
}

// laneOf is the lane whose split s is, if it is one.
func laneOf(s RunSummary) (LaneKey, bool) {
	if s.State != "closed" || s.Split == nil || s.Split.ControlOf != "" {
		return LaneKey{}, false
	}
	return LaneKey{s.Host, s.Lane, s.Split.Model}, true
}

// newer says a's split is a lane's later one: closed later, or at the
// same time with the larger run id.
func newer(a, b RunSummary) bool {
	if !a.ClosedAt.Equal(b.ClosedAt) {
		return a.ClosedAt.After(b.ClosedAt)
	}
	return a.ID > b.ID
}

// relane files run id under the lane of its summary in m (none when it
// was deleted or is no lane's split); old is its summary before, if had.
func (l *lanes) relane(m map[string]RunSummary, id string, old RunSummary, had bool) {
	cur, present := m[id]
	var k LaneKey
	in := false
	if present {
		k, in = laneOf(cur)
	}
	if was, ok := l.runLane[id]; ok && (!in || was != k) {
		l.leave(m, was, id)
	}
	if !in {
		return
	}
	lr := l.byLane[k]
	if lr == nil {
		lr = &laneRuns{runs: map[string]struct{}{}}
		l.byLane[k] = lr
	}
	lr.runs[id] = struct{}{}
	l.runLane[id] = k
	switch {
	case lr.last == "":
		lr.last = id
	case lr.last == id:
		// Its close time went back: another run may be the last now.
		if had && cur.ClosedAt.Before(old.ClosedAt) {
			lr.last = lr.newest(m)
		}
	case newer(cur, m[lr.last]):
		lr.last = id
	}
}

// leave takes run id out of lane k.
func (l *lanes) leave(m map[string]RunSummary, k LaneKey, id string) {
	delete(l.runLane, id)
	lr := l.byLane[k]
	if lr == nil {
		return
	}
	delete(lr.runs, id)
	switch {
	case len(lr.runs) == 0:
		delete(l.byLane, k)
	case lr.last == id:
		lr.last = lr.newest(m)
	}
}

func (lr *laneRuns) newest(m map[string]RunSummary) string {
	best := ""
	for id := range lr.runs {
		if best == "" || newer(m[id], m[best]) {
			best = id
		}
	}
	return best
}

// LaneSplits returns the last closed split of each lane, the newest first,
// at most limit of them (0: all), and how many lanes there are.
func (ix *Index) LaneSplits(limit int) ([]LaneSplit, int) {
	ix.mu.RLock()
	out := make([]LaneSplit, 0, len(ix.byLane))
	for k, lr := range ix.byLane {
		s := ix.m[lr.last]
		out = append(out, LaneSplit{LaneKey: k, RunID: s.ID, ClosedAt: s.ClosedAt, F: *s.Split})
	}
	ix.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].ClosedAt.Equal(out[j].ClosedAt) {
			return out[i].ClosedAt.After(out[j].ClosedAt)
		}
		return out[i].RunID > out[j].RunID
	})
	n := len(out)
	if limit > 0 && n > limit {
		out = out[:limit]
	}
	return out, n
}

// laneGauges is the collector of the lane gauges: it reads the index at
// each scrape.
type laneGauges struct {
	ix                   atomic.Pointer[Index]
	mib, ratio, ts, nLan *prometheus.Desc
}

func newLaneGauges() *laneGauges {
	return &laneGauges{
		mib: prometheus.NewDesc("gttsplit_lane_split_mib",
			"The last closed split of each host, lane and model file, by part (peak, final, model, packed, state, compute, unattributed), in MiB; a part the split does not know is left out. Control runs (offload off) are not a lane's split.",
			[]string{"host", "lane", "model", "part"}, nil),
		ratio: prometheus.NewDesc("gttsplit_lane_split_ratio",
			"The last closed split's shares as fractions from 0 to 1 (0.10 is 10 %): duplicate (packed / model buffer) and unattributed (not attributed / peak).",
			[]string{"host", "lane", "model", "ratio"}, nil),
		ts: prometheus.NewDesc("gttsplit_lane_split_timestamp_seconds",
			"When the last closed split of each host, lane and model file was written (Unix seconds): every aggregator exports every lane, take the newest with max by or topk.",
			[]string{"host", "lane", "model"}, nil),
		nLan: prometheus.NewDesc("gttsplit_lanes",
			"Hosts, lanes and model files with a closed split in the store; the lane gauges export the newest 5,000.", nil, nil),
	}
}

// Describe is prometheus.Collector's.
func (g *laneGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.mib
	ch <- g.ratio
	ch <- g.ts
	ch <- g.nLan
}

// Collect is prometheus.Collector's.
func (g *laneGauges) Collect(ch chan<- prometheus.Metric) {
	ix := g.ix.Load()
	if ix == nil {
		ch <- prometheus.MustNewConstMetric(g.nLan, prometheus.GaugeValue, 0)
		return
	}
	ls, n := ix.LaneSplits(MaxLaneGauges)
	ch <- prometheus.MustNewConstMetric(g.nLan, prometheus.GaugeValue, float64(n))
	for _, l := range ls {
		for _, row := range split.Rows {
			v := row.OfFigures(l.F)
			switch {
			case v == nil || row.Gauge == "":
			case row.Unit == split.UnitPct:
				// The share's two decimals of a percent: four of a fraction.
				f := math.Round(float64(*v)*100) / 10000
				ch <- prometheus.MustNewConstMetric(g.ratio, prometheus.GaugeValue, f, l.Host, l.Lane, l.Model, row.Gauge)
			default:
				ch <- prometheus.MustNewConstMetric(g.mib, prometheus.GaugeValue, float64(*v), l.Host, l.Lane, l.Model, row.Gauge)
			}
		}
		ch <- prometheus.MustNewConstMetric(g.ts, prometheus.GaugeValue, float64(l.ClosedAt.UnixNano())/1e9, l.Host, l.Lane, l.Model)
	}
}
