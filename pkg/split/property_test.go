package split

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// propertyLog exercises every kind of record: a probe, a real load, two
// reservations, the echo, the trace with an eviction, a breakdown table.
const propertyLog = verbose + load +
	"load_tensors:         HRX0 model buffer size =     0.00 MiB\n" +
	"llama_context: constructing llama_context\n" +
	"llama_memory_recurrent:       HRX0 RS buffer size =    12.00 MiB\n" +
	"sched_reserve:       HRX0 compute buffer size =    50.00 MiB\n" +
	load +
	"load_tensors:   CPU_Mapped model buffer size =   304.28 MiB\n" +
	"load_tensors:         HRX0 model buffer size =  2059.91 MiB\n" +
	"load_tensors:   HRX0_Split model buffer size =   316.00 MiB\n" +
	"hrx: host-weight pack    name=a type=q4_K bytes=1 packed=1 resident=300.0 MiB\n" +
	"hrx: host-weight pack    name=b type=q4_K bytes=1 packed=2 resident=795.8 MiB\n" +
	"hrx: host-weight evict   name=a bytes=1 packed=1 resident=512.0 MiB\n" +
	"llama_context: constructing llama_context\n" +
	"llama_kv_cache:       HRX0 KV buffer size =    24.00 MiB\n" +
	"llama_memory_recurrent:       HRX0 RS buffer size =    12.00 MiB\n" +
	"llama_context:        CPU  output buffer size =     0.58 MiB\n" +
	"sched_reserve:       HRX0 compute buffer size =    51.00 MiB\n" +
	"sched_reserve: graph splits = 2\n" +
	"sched_reserve:       HRX0 compute buffer size =    43.21 MiB\n" +
	"sched_reserve: graph splits = 2\n" +
	"common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |\n" +
	"common_memory_breakdown_print: |   - HRX0 (8060S)       | 131072 = 120000 + (2454 = 2375 +  36 + 43) + 8618 |\n" +
	"common_memory_breakdown_print: |   - Host               |                    308 =   304 +   0 +   4                |\n" +
	"~llama_context:       HRX0 compute buffer size is  43.2100 MiB, matches expectation of  43.2100 MiB\n"

func propertySamples() []Sample {
	a := func(v string) string { return fdText("amdgpu", "0000:c5:00.0", "30", v) }
	b := fdText("amdgpu", "0000:c5:00.0", "31", "2048 KiB")
	return []Sample{
		sample(1, a("1024 MiB"), a("1024 MiB"), b),
		sample(2, a("3923 MiB"), a("3923 MiB"), b),
		sample(3, a("3700 MiB"), b),
	}
}

func reportJSON(t *testing.T, f *Fold) string {
	t.Helper()
	b, err := JSON(f.Report())
	require.NoError(t, err)
	return string(b)
}

// The fold is a function of the set of lines and samples: shuffled,
// duplicated and persisted-then-restored delivery give the same report.
func TestFoldIsOrderAndDuplicateFree(t *testing.T) {
	t.Parallel()
	lines := strings.Split(propertyLog, "\n")
	type item struct {
		line *Line
		smp  *Sample
	}
	var items []item
	for i, l := range lines {
		items = append(items, item{line: &Line{Stream: "stderr", Seq: uint64(i + 1), Text: l}})
	}
	for _, s := range propertySamples() {
		items = append(items, item{smp: &s})
	}
	apply := func(f *Fold, it item) {
		if it.line != nil {
			f.AddLine(*it.line)
		} else {
			f.AddSample(*it.smp)
		}
	}
	ref := NewFold(Options{})
	for _, it := range items {
		apply(ref, it)
	}
	want := reportJSON(t, ref)
	require.Contains(t, want, `"packed_mib": 795.8`)

	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		shuffled := append([]item(nil), items...)
		// duplicate a random third of the items
		for i := 0; i < len(items)/3; i++ {
			shuffled = append(shuffled, items[rng.IntN(len(items))])
		}
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		f := NewFold(Options{})
		cut := rng.IntN(len(shuffled))
		for _, it := range shuffled[:cut] {
			apply(f, it)
		}
		// persist and restore mid-way, as a restarted aggregator would
		state, err := json.Marshal(f)
		require.NoError(t, err)
		g := NewFold(Options{})
		require.NoError(t, json.Unmarshal(state, g))
		for _, it := range shuffled[cut:] {
			apply(g, it)
		}
		require.Equal(t, want, reportJSON(t, g), "round %d", round)
	}
}

// The block scanner visits only anchor lines; it must give exactly what
// applying every line gives.
func TestReadLogEqualsLineByLine(t *testing.T) {
	t.Parallel()
	log := strings.Repeat("generated token text with no anchors at all\n", 5000) + propertyLog + "tail without newline MiB"
	a := NewFold(Options{})
	n, err := a.ReadLog(strings.NewReader(log), "log")
	require.NoError(t, err)
	b := NewFold(Options{})
	lines := strings.Split(log, "\n")
	for i, l := range lines {
		b.AddLine(Line{Stream: "log", Seq: uint64(i + 1), Text: l})
	}
	require.Equal(t, uint64(len(lines)), n)
	require.Equal(t, reportJSON(t, b), reportJSON(t, a))
}

// A line longer than the read buffer is still seen whole.
func TestReadLogLongLine(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 3*chunkSize) + " load_tensors:         HRX0 model buffer size =  7.00 MiB\n"
	f := NewFold(Options{})
	_, err := f.ReadLog(bytes.NewReader([]byte(verbose+load+long)), "log")
	require.NoError(t, err)
	r := f.Report()
	require.InDelta(t, 7, val(r.ModelGTTMiB), 1e-9)
}

func TestRangeSet(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	var r rangeSet
	seen := map[uint64]bool{}
	for i := 0; i < 5000; i++ {
		v := uint64(rng.IntN(800))
		r.add(v)
		seen[v] = true
	}
	require.Equal(t, uint64(len(seen)), r.count())
	for v := uint64(0); v < 800; v++ {
		require.Equal(t, seen[v], r.has(v), "%d", v)
	}
	for i := 1; i < len(r); i++ {
		require.Less(t, r[i-1][1]+1, r[i][0], "ranges are disjoint and not adjacent")
	}
}

func TestRangeSetAddRange(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < 200; round++ {
		var r rangeSet
		seen := map[uint64]bool{}
		for i := 0; i < 20; i++ {
			lo := uint64(rng.IntN(300))
			hi := lo + uint64(rng.IntN(20))
			if rng.IntN(2) == 0 {
				hi = lo
				r.add(lo)
			} else {
				r.addRange(lo, hi)
			}
			for v := lo; v <= hi; v++ {
				seen[v] = true
			}
		}
		require.Equal(t, uint64(len(seen)), r.count())
		for v := uint64(0); v < 330; v++ {
			require.Equal(t, seen[v], r.has(v), "round %d value %d: %v", round, v, r)
		}
		for i := 1; i < len(r); i++ {
			require.Less(t, r[i-1][1]+1, r[i][0], "disjoint, not adjacent: %v", r)
		}
	}
}
