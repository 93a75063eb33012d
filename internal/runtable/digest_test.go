package runtable_test

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/perftest"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// A run's fingerprints are exact up to DigestExact events; past that the
// filter takes them all and never misses one it took, and says it took
// one it did not about as often as DigestFalseRate says. They are stored
// and read back as they were, in at most ~22 KiB of JSON however many
// events the run had.
func TestDigests(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var ds runtable.Digests
	var taken []uint64
	add := func(n int) {
		for range n {
			fp := rng.Uint64()
			ds.Add(fp)
			taken = append(taken, fp)
		}
	}
	roundTrip := func() {
		b, err := json.Marshal(&ds)
		require.NoError(t, err)
		require.LessOrEqual(t, len(b), 22*1024, "bounded")
		var back runtable.Digests
		require.NoError(t, json.Unmarshal(b, &back))
		again, err := json.Marshal(&back)
		require.NoError(t, err)
		require.Equal(t, string(b), string(again))
		ds = back
	}
	add(runtable.DigestExact)
	require.True(t, ds.Exact())
	roundTrip()
	for range 100_000 {
		require.False(t, ds.Has(rng.Uint64()), "exact: no event it did not take")
	}
	add(1)
	require.False(t, ds.Exact(), "past DigestExact: the filter")
	for _, n := range []int{10_000, 36_000} {
		add(n - len(taken))
		roundTrip()
		require.Equal(t, uint64(n), ds.Len())
		for _, fp := range taken {
			require.True(t, ds.Has(fp), "never misses an event it took")
		}
		const probes = 200_000
		hits := 0
		for range probes {
			if ds.Has(rng.Uint64()) {
				hits++
			}
		}
		got, want := float64(hits)/probes, runtable.DigestFalseRate(uint64(n))
		t.Logf("%d events: %.4f of the events it did not take said taken (the filter's rate %.4f)", n, got, want)
		require.InDelta(t, want, got, want*0.1+0.001)
	}
	require.Zero(t, runtable.DigestFalseRate(runtable.DigestExact))

	for _, bad := range []string{`{"n":1,"exact":"AAA"}`, `{"n":0,"exact":"AAAAAAAAAAA="}`, `{"n":9,"filter":"AAA="}`,
		`{"n":2,"exact":"AAAAAAAAAAIAAAAAAAAAAQ=="}`, `[]`} {
		require.Error(t, json.Unmarshal([]byte(bad), new(runtable.Digests)), bad)
	}
}

// A run keeps a fingerprint of each event it folds from its first on,
// and its stored state carries them, the compact record too; a state
// without them (an earlier version's) loads with none, and a state is
// given none later.
func TestStateKeepsDigests(t *testing.T) {
	t.Parallel()
	opts := rt.FoldOptions(t)
	fx := rt.Load(t, fixture4B, opts)
	st := runtable.NewRunState(fx.Origin, opts)
	require.NotNil(t, st.Digests)
	for _, w := range fx.Wires {
		st.Digests.Add(runtable.Fingerprint(w.Data))
	}
	st.Closed = true
	for _, s := range []*runtable.RunState{st, st.Compacted()} {
		b, err := runtable.MarshalState(s)
		require.NoError(t, err)
		back, err := runtable.UnmarshalState(b, opts)
		require.NoError(t, err)
		require.Equal(t, uint64(len(fx.Wires)), back.Digests.Len())
		for _, w := range fx.Wires {
			require.True(t, back.Digests.Has(runtable.Fingerprint(w.Data)))
		}
		require.False(t, back.Digests.Has(runtable.Fingerprint(append([]byte(" "), fx.Wires[0].Data...))), "one byte more is another event")
	}
	old, err := runtable.UnmarshalState([]byte(`{"v":2,"origin":{"run_id":"r"},"closed":true}`), opts)
	require.NoError(t, err)
	require.Nil(t, old.Digests, "an earlier version's state")
}

// TestDigestsCost says what a run's fingerprints cost in the state
// bucket: the compact record of the 4B run (25 events) with and without
// them, and the fingerprints of runs of 2,048 and 36,000 events (an hour
// sampled every 100 ms).
func TestDigestsCost(t *testing.T) {
	t.Parallel()
	opts := rt.FoldOptions(t)
	fx := rt.Load(t, fixture4B, opts)
	st := closedState(t, fx)
	st.Digests = &runtable.Digests{}
	for _, w := range fx.Wires {
		st.Digests.Add(runtable.Fingerprint(w.Data))
	}
	with, err := runtable.MarshalState(st.Compacted())
	require.NoError(t, err)
	st.Digests = nil
	without, err := runtable.MarshalState(st.Compacted())
	require.NoError(t, err)
	t.Logf("4B run (%d events): compact record %d bytes with its fingerprints, %d without (+%d)", len(fx.Wires), len(with), len(without), len(with)-len(without))
	require.Less(t, len(with)-len(without), 12*len(fx.Wires)+40)
	for _, n := range []int{2048, 36_000} {
		var ds runtable.Digests
		for i := range n {
			ds.Add(uint64(i) * 0x9e3779b97f4a7c15)
		}
		b, err := json.Marshal(&ds)
		require.NoError(t, err)
		t.Logf("%d events: fingerprints %d bytes of JSON", n, len(b))
		require.Less(t, len(b), 22*1024)
	}
}

// BenchmarkFingerprint: what the fingerprints cost the fold. A round
// folds the 4B run's events into a fresh run as a partition does
// (decoding each through the line filter), once without and once with
// taking each event's fingerprint into the run's set, in turn (the order
// alternating); x/baseline is the time without over the time with (1: the
// fingerprints cost nothing).
func BenchmarkFingerprint(b *testing.B) {
	opts := rt.FoldOptions(b)
	fx := rt.Load(b, fixture4B, opts)
	parser := opts.Parser
	if parser == nil {
		parser = llamalog.MustParser()
	}
	var size int64
	for _, w := range fx.Wires {
		size += int64(len(w.Data))
	}
	fold := func(digest bool) time.Duration {
		t0 := time.Now()
		st := runtable.NewRunState(fx.Origin, opts)
		for _, w := range fx.Wires {
			d, err := events.DecodeFiltered(w.Data, parser.NewLineFilter())
			if err != nil {
				b.Fatal(err)
			}
			if runtable.ApplyTo(st, d) && digest {
				st.Digests.Add(runtable.Fingerprint(w.Data))
			}
		}
		return time.Since(t0)
	}
	b.SetBytes(size)
	var pairs perftest.Pairs
	i := 0
	for b.Loop() {
		var with, without time.Duration
		if i++; i%2 == 0 {
			with, without = fold(true), fold(false)
		} else {
			without, with = fold(false), fold(true)
		}
		pairs.Add(with, without)
	}
	pairs.Report(b)
	b.ReportMetric(perftest.Load1(), "load1")
}
