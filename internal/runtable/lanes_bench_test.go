package runtable

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// benchSummaries are n closed runs' summary keys as the watch reads them,
// over lanes lanes: with the 4B run's figures, and as before they had
// them (the baseline).
func benchSummaries(b *testing.B, n, lanes int) (plain, withFigures [][]byte) {
	b.Helper()
	f := benchFigures()
	t0 := time.Date(2026, 11, 7, 14, 0, 0, 0, time.UTC)
	for i := range n {
		s := RunSummary{ID: fmt.Sprintf("strix%02d-20261107T%06d-4b", i%lanes, i), Host: fmt.Sprintf("strix%02d", i%lanes), Lane: "gpu0",
			State: "closed", LastEvent: t0.Add(time.Duration(i) * time.Second), ClosedAt: t0.Add(time.Duration(i) * time.Second)}
		p, err := json.Marshal(s)
		if err != nil {
			b.Fatal(err)
		}
		s.Split = &f
		w, err := json.Marshal(s)
		if err != nil {
			b.Fatal(err)
		}
		plain, withFigures = append(plain, p), append(withFigures, w)
	}
	return plain, withFigures
}

// benchFigures are the 4B run's figures.
func benchFigures() split.Figures {
	m := func(v float64) *split.MiB { x := split.MiB(v); return &x }
	return split.Figures{Model: "Qwen3.5-4B-Q4_K_M.gguf", Build: "b9866 (40f58efe1)", Commit: "40f58efe1a8f4c3e9d2b7a6c5e4f3a2b1c0d9e8f",
		Started: "2026-11-07T14:03:09.204815377Z", Complete: true, PeakGTTMiB: m(3925), FinalGTTMiB: m(3641.25), ModelGTTMiB: m(2375.91),
		PackedMiB: m(795.8), StateMiB: m(36), ComputeMiB: m(43.21), UnattributedMiB: m(674.08), UnattributedPct: m(17.17), DuplicatePct: m(33.49)}
}

// fill reads the summaries into a new index as its watch does (decode,
// then put).
func fill(b *testing.B, sums [][]byte) *Index {
	ix := newIndex()
	for _, v := range sums {
		var s RunSummary
		if err := json.Unmarshal(v, &s); err != nil {
			b.Fatal(err)
		}
		ix.put(summaryKey(s.ID), s)
	}
	return ix
}

// BenchmarkLaneGauges measures what the lane gauges cost every aggregator
// when a run closes: reading the closed run's summary into the index (the
// watch decodes it and files it under its lane) with the figures, against
// the summary as it was before (ns/close-baseline); the index's heap per
// run with and without the figures; and a scrape of 200 lanes' gauges
// against a scrape of the other metrics alone.
//
//	go test ./internal/runtable -run '^$' -bench LaneGauges
func BenchmarkLaneGauges(b *testing.B) {
	const n, lanes = 20_000, 200
	plain, withFig := benchSummaries(b, n, lanes)
	// The two alternate, close by close, so both see the same load.
	var tPlain, tFig time.Duration
	read := func(ix *Index, v []byte) time.Duration {
		t := time.Now()
		var s RunSummary
		if err := json.Unmarshal(v, &s); err != nil {
			b.Fatal(err)
		}
		ix.put(summaryKey(s.ID), s)
		return time.Since(t)
	}
	for b.Loop() {
		ixPlain, ixFig := newIndex(), newIndex()
		for i := range plain {
			tPlain += read(ixPlain, plain[i])
			tFig += read(ixFig, withFig[i])
		}
	}
	closes := float64(b.N * n)
	b.ReportMetric(float64(tFig.Nanoseconds())/closes, "ns/close")
	b.ReportMetric(float64(tPlain.Nanoseconds())/closes, "ns/close-baseline")
	b.ReportMetric(float64(tFig)/float64(tPlain), "x-baseline")

	heap := func(sums [][]byte) (float64, *Index) {
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		ix := fill(b, sums)
		runtime.GC()
		runtime.ReadMemStats(&m1)
		return float64(m1.HeapAlloc-m0.HeapAlloc) / n, ix
	}
	hp, keep1 := heap(plain)
	hf, keep2 := heap(withFig)
	b.ReportMetric(hf, "B/run")
	b.ReportMetric(hp, "B/run-baseline")

	m := NewMetrics()
	scrape := func() time.Duration {
		const scrapes = 50
		t := time.Now()
		for range scrapes {
			if _, err := m.Registry.Gather(); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t) / scrapes
	}
	base := scrape()
	m.lanes.ix.Store(keep2)
	with := scrape()
	b.ReportMetric(float64(with.Microseconds()), "µs/scrape")
	b.ReportMetric(float64(base.Microseconds()), "µs/scrape-baseline")
	runtime.KeepAlive(keep1)
}
