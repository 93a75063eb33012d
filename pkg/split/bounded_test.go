package split

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
	"github.com/stretchr/testify/require"
)

// maxStateBytes is what a run's persisted fold must stay below whatever the
// log holds: far below a default broker's 1 MiB message limit.
const maxStateBytes = 256 << 10

// stateOf folds lines (numbered from 1 on stream "log") and returns the
// fold and its persisted size.
func stateOf(t *testing.T, lines []string) (*Fold, []byte) {
	t.Helper()
	f := NewFold(Options{})
	for i, l := range lines {
		f.AddLine(Line{Stream: "log", Seq: uint64(i + 1), Text: l})
	}
	b, err := json.Marshal(f)
	require.NoError(t, err)
	return f, b
}

// pathologicalLog is a log a long-running server can produce: many model
// loads, each with its buffers and contexts, a trace line per packed tensor
// with many distinct names and evictions, malformed and summary lines. The
// last load is the one measured; its figures differ from every earlier one.
func pathologicalLog(loads, traceLines, names int) (lines []string, lastModel, traceMax, traceLast float64, maxLine int) {
	rng := rand.New(rand.NewPCG(7, 9))
	lines = append(lines, strings.TrimSuffix(verbose, "\n"))
	for l := 0; l < loads; l++ {
		lines = append(lines,
			strings.TrimSuffix(load, "\n"),
			fmt.Sprintf("load_tensors:         HRX0 model buffer size =  %d.00 MiB", 1000+l),
			"llama_context: constructing llama_context",
			"llama_kv_cache:       HRX0 KV buffer size =    24.00 MiB",
			"sched_reserve:       HRX0 compute buffer size =    51.00 MiB",
			"llama_kv_cache: size =   24.00 MiB (  256 cells,  36 layers,  1/1 seqs)",
			"load_tensors:         HRX0 model buffer size = twelve MiB",
		)
		lastModel = float64(1000 + l)
	}
	for i := 0; i < traceLines; i++ {
		v := float64(rng.IntN(100000)) / 10
		if v > traceMax {
			traceMax, maxLine = v, len(lines)+1
		}
		traceLast = v
		lines = append(lines, fmt.Sprintf("hrx: host-weight pack    name=blk.%d.ffn_up.weight type=q4_K bytes=1 packed=1 resident=%.1f MiB", i%names, v))
	}
	return lines, lastModel, traceMax, traceLast, maxLine
}

// The checkpoint of the bundled runs and of a pathological log stays far
// below the broker's message limit, and the figures are still the
// uncapped ones where the rules need them.
func TestStateIsBounded(t *testing.T) {
	t.Parallel()
	for _, run := range []string{"4b", "27b"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "runs", run, "split.log"))
		require.NoError(t, err)
		f, st := stateOf(t, strings.Split(string(b), "\n"))
		t.Logf("%s run: persisted fold %d bytes", run, len(st))
		require.Less(t, len(st), 16<<10, run)
		require.NotContains(t, f.Report().Flags, FlagStateCapped, run)
	}

	const loads, traceLines, names = 2000, 200000, 5000
	lines, lastModel, traceMax, traceLast, maxLine := pathologicalLog(loads, traceLines, names)
	f, st := stateOf(t, lines)
	t.Logf("pathological log (%d lines, %d loads, %d trace lines, %d names): persisted fold %d bytes", len(lines), loads, traceLines, names, len(st))
	require.Less(t, len(st), maxStateBytes)
	r := f.Report()
	require.Contains(t, r.Flags, FlagStateCapped)
	require.Equal(t, lastModel, val(r.ModelGTTMiB), "the last load is measured")
	require.Equal(t, traceMax, val(r.PackedMiB))
	require.Equal(t, traceLast, val(r.Detail.PackedLastMiB))
	require.Equal(t, uint64(maxLine), r.Detail.PackedPeakSeq)
	require.Equal(t, traceLines, r.Detail.PackedTraceLines)
	require.Equal(t, loads, r.Detail.LinesSkipped, "every malformed line counted")
	// The distinct names are estimated: within 10 % of the truth, and not
	// the naive count of the names kept.
	require.NotNil(t, r.PackedWeights)
	require.InEpsilon(t, names, *r.PackedWeights, 0.10)
	require.NotEqual(t, MaxTraceNames, *r.PackedWeights, "the naive count of kept names")
	joined := strings.Join(r.Detail.Warnings, "\n")
	require.Contains(t, joined, "distinct packed tensor names")
	require.Contains(t, joined, "relevant log lines")
}

// Capped or not, the state is a function of the set of lines: shuffled
// and duplicated delivery, with a persist-and-restore mid-way, gives the
// same persisted state and the same report.
func TestBoundedStateIsOrderFree(t *testing.T) {
	t.Parallel()
	lines, _, _, _, _ := pathologicalLog(450, 6000, 5000)
	ref, refState := stateOf(t, lines)
	want := reportJSON(t, ref)
	require.Contains(t, want, FlagStateCapped)
	rng := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < 5; round++ {
		idx := rng.Perm(len(lines))
		idx = append(idx, idx[:len(idx)/4]...) // duplicates
		f := NewFold(Options{})
		cut := rng.IntN(len(idx))
		for _, i := range idx[:cut] {
			f.AddLine(Line{Stream: "log", Seq: uint64(i + 1), Text: lines[i]})
		}
		b, err := json.Marshal(f)
		require.NoError(t, err)
		g := NewFold(Options{})
		require.NoError(t, json.Unmarshal(b, g))
		for _, i := range idx[cut:] {
			g.AddLine(Line{Stream: "log", Seq: uint64(i + 1), Text: lines[i]})
		}
		got, err := json.Marshal(g)
		require.NoError(t, err)
		require.Equal(t, string(refState), string(got), "round %d", round)
		require.Equal(t, want, reportJSON(t, g), "round %d", round)
	}
}

// oneLoad is a -v log's load of 2375.90 MiB with one context and its KV
// buffer of 36 MiB, line by line.
func oneLoad() []string {
	return []string{
		strings.TrimSuffix(verbose, "\n"),
		strings.TrimSuffix(load, "\n"),
		"load_tensors:         HRX0 model buffer size =  2375.90 MiB",
		"llama_context: constructing llama_context",
		"llama_kv_cache:       HRX0 KV buffer size =    36.00 MiB",
	}
}

// At the cap, superseded lines go first: a long server that re-reserves
// compute buffers and prints memory tables for ever keeps its model load,
// its KV buffers and its last reservation.
func TestCapDropsSupersededFirst(t *testing.T) {
	t.Parallel()
	lines := oneLoad()
	for i := 0; i < 3*MaxRecords; i++ {
		lines = append(lines, fmt.Sprintf("sched_reserve:       HRX0 compute buffer size =    %d.00 MiB", 10+i%7))
	}
	lines = append(lines, "sched_reserve:       HRX0 compute buffer size =    43.00 MiB")
	f, st := stateOf(t, lines)
	require.Less(t, len(st), maxStateBytes)
	r := f.Report()
	require.Contains(t, r.Flags, FlagStateCapped)
	require.Equal(t, 2375.9, val(r.ModelGTTMiB), "the model-load lines are kept")
	require.Equal(t, 36.0, val(r.Detail.KVMiB))
	require.Equal(t, 43.0, val(r.Detail.ComputeOnlyMiB), "the last reservation is kept")
}

func TestHashSetExactThenEstimated(t *testing.T) {
	t.Parallel()
	var s hashSet
	for i := 0; i < 100; i++ {
		s.add(nameHash(fmt.Sprint("t", i%40)), 64)
	}
	n, est := s.distinct(64)
	require.Equal(t, 40, n)
	require.False(t, est)
	for i := 0; i < 20000; i++ {
		s.add(nameHash(fmt.Sprint("t", i)), 64)
	}
	n, est = s.distinct(64)
	require.True(t, est)
	require.InEpsilon(t, 20000, n, 0.35, "k=64 has ~13 %% standard error")
	require.Len(t, s.h, 64)
	require.True(t, slices.IsSorted(s.h))

	b, err := json.Marshal(s)
	require.NoError(t, err)
	var back hashSet
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, s, back)
	require.Error(t, json.Unmarshal([]byte(`"AAAA"`), &back), "not a multiple of 8 bytes")
	require.Error(t, json.Unmarshal([]byte(`"!AAAAAAAAAAEAAAAAAAAAAA"`), &back), "not sorted")
	require.Error(t, json.Unmarshal([]byte(`"*"`), &back), "not base64")
}

// A state written before the fold was bounded (every trace and malformed
// line a record, skipped fds per tick) restores to the same report.
func TestLegacyStateRestores(t *testing.T) {
	t.Parallel()
	lines := strings.Split(propertyLog+"load_tensors:         HRX0 model buffer size = twelve MiB\n", "\n")
	f := NewFold(Options{})
	for i, l := range lines {
		f.AddLine(Line{Stream: "stderr", Seq: uint64(i + 1), Text: l})
	}
	bad := sample(4, fdText("amdgpu", "0000:c5:00.0", "30", "3000 MiB"), "drm-driver:\tamdgpu\ndrm-total-gtt:\tlots\n")
	for _, s := range append(propertySamples(), bad) {
		f.AddSample(s)
	}
	want := reportJSON(t, f)
	require.Contains(t, want, `"packed_weights": 2`)

	// Rewrite the state as the old format had it.
	b, err := json.Marshal(f)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	recs := m["records"].([]any)
	for i, l := range lines {
		r, ok := llamalog.MustParser().Parse(uint64(i+1), llamalog.Payload([]byte(l), new([]byte)))
		if ok && (r.Kind == llamalog.KindTrace || r.Kind == llamalog.KindMalformed) {
			recs = append(recs, map[string]any{"s": "stderr", "seq": r.Seq, "k": r.Kind, "name": r.Name, "mib": r.MiB})
		}
	}
	m["records"] = recs
	delete(m, "trace")
	delete(m, "capped")
	delete(m, "malformed")
	ticks := m["ticks"].(map[string]any)
	require.Equal(t, float64(1), ticks["fds_skipped"])
	delete(ticks, "fds_skipped")
	ticks["skipped"] = map[string]int{"4": 1}
	old, err := json.Marshal(m)
	require.NoError(t, err)

	g := NewFold(Options{})
	require.NoError(t, json.Unmarshal(old, g))
	require.Equal(t, want, reportJSON(t, g))
	again, err := json.Marshal(g)
	require.NoError(t, err)
	require.Equal(t, string(b), string(again), "read into the bounded form")
}

func TestNameHashIsUniform(t *testing.T) {
	t.Parallel()
	// The top bit of the hash of sequential names is set about half the
	// time (a plain FNV-1a of short sequential names is not uniform enough
	// for the estimate).
	n := 0
	for i := 0; i < 10000; i++ {
		if nameHash(fmt.Sprint("blk.", i, ".w"))>>63 == 1 {
			n++
		}
	}
	require.InDelta(t, 5000, n, 300)
	require.Less(t, math.Abs(float64(n)-5000), 300.0)
}

// A kept tick holds nothing of the sample it came from: a decoder may give
// every string of a sample event as a slice of one string, the whole
// event's text, which a served run would otherwise keep for its life.
func TestKeptTickHoldsNoSampleText(t *testing.T) {
	text := "drm-driver:\tamdgpu\ndrm-client-id:\t7\ndrm-pdev:\t0000:c5:00.0\ndrm-total-gtt:\t100 MiB\n" + "card1" + strings.Repeat(" ", 4096)
	card := text[strings.Index(text, "card1"):][:5]
	f := NewFold(Options{})
	f.AddSample(Sample{Seq: 1, Time: time.Unix(10, 0), Procs: []ProcFDs{{PID: 1, FDs: []FDInfo{{FD: 4, Text: text[:strings.Index(text, "card1")]}}}},
		Cards: []CardGTT{{Card: card, UsedBytes: 1 << 20, TotalBytes: 1 << 30}}})
	lo := uintptr(unsafe.Pointer(unsafe.StringData(text)))
	hi := lo + uintptr(len(text))
	inText := func(s string) bool {
		p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		return s != "" && p >= lo && p < hi
	}
	for _, tk := range []*tick{f.st.Ticks.Peak, f.st.Ticks.Final} {
		require.NotNil(t, tk)
		for _, c := range tk.Cards {
			require.False(t, inText(c.Card), "card %q", c.Card)
		}
		for _, c := range tk.Clients {
			require.False(t, inText(c.PDev) || inText(c.ID) || inText(c.Key), "client %+v", c)
		}
	}
}

// A served run's kept records grow by a quarter, not by append's doubling:
// the 4B run keeps 34 records, one past a 33-record block, and append held
// room for 67 (5.4 KiB more an open run).
func TestServedRecordsGrowByAQuarter(t *testing.T) {
	t.Parallel()
	f := NewFold(Options{})
	for i := range 300 {
		f.AddLine(Line{Stream: "stderr", Seq: uint64(i + 1), Text: fmt.Sprintf("load_tensors:        ROCm0 model buffer size = %d.00 MiB", i)})
		n, c := len(f.st.records), cap(f.st.records)
		require.Equal(t, i+1, n)
		require.LessOrEqual(t, c, n+max(n/4, 8), "records %d, room for %d", n, c)
	}
}

// reloadLog is the 4B run's log without its host-weight trace lines (which
// the fold never keeps one by one), n times over: a server that reloads
// its model n times. 3,197 times is the 5,000,000-line log of the 4B run
// repeated.
func reloadLog(t *testing.T, n int) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "testdata", "runs", "4b", "split.log"))
	require.NoError(t, err)
	var once bytes.Buffer
	for _, l := range bytes.SplitAfter(src, []byte("\n")) {
		if !bytes.Contains(l, []byte("resident=")) {
			once.Write(l)
		}
	}
	return bytes.Repeat(once.Bytes(), n)
}

// A run capped by state_capped keeps its live load's lines: a server that
// reloaded its model 3,197 times has the KV + state and compute rows of
// its last load, not 0 (the cap once dropped every buffer line but the
// model-load ones, the live load's with them).
func TestCappedReloadsKeepTheLiveLoad(t *testing.T) {
	t.Parallel()
	one := NewFold(Options{})
	_, err := one.ReadLog(bytes.NewReader(reloadLog(t, 1)), "log")
	require.NoError(t, err)
	want := one.Report()
	require.NotContains(t, want.Flags, FlagStateCapped)

	f := NewFold(Options{})
	_, err = f.ReadLog(bytes.NewReader(reloadLog(t, 3197)), "log")
	require.NoError(t, err)
	st, err := json.Marshal(f)
	require.NoError(t, err)
	require.Less(t, len(st), maxStateBytes)
	r := f.Report()
	require.Contains(t, r.Flags, FlagStateCapped)
	require.Equal(t, val(want.ModelGTTMiB), val(r.ModelGTTMiB))
	require.NotNil(t, r.StateMiB)
	require.NotNil(t, r.ComputeMiB)
	require.Equal(t, val(want.StateMiB), val(r.StateMiB), "the live load's KV buffers are kept")
	require.Equal(t, val(want.ComputeMiB), val(r.ComputeMiB), "the live load's last reservation is kept")
	require.Equal(t, want.Detail.Buffers, shiftLines(r.Detail.Buffers, r.Models[len(r.Models)-1].Line-want.Models[len(want.Models)-1].Line))
	last := r.Models[len(r.Models)-1]
	require.True(t, last.Live)
	require.Equal(t, val(want.StateMiB), val(last.StateMiB))
	for _, m := range r.Models[:len(r.Models)-1] {
		require.False(t, m.Live, "line %d: an earlier load is replaced", m.Line)
	}
}

// shiftLines moves buffer lines back by d lines.
func shiftLines(bs []BufferLine, d uint64) []BufferLine {
	out := slices.Clone(bs)
	for i := range out {
		out[i].Line -= d
	}
	return out
}

// When the cap does drop a live load's buffer lines (a log that prints
// more buffer lines of one kind than the fold keeps), the row they fed is
// unknown, never 0; the rows the kept lines feed stay known.
func TestCappedRowIsUnknownNotZero(t *testing.T) {
	t.Parallel()
	lines := append(oneLoad(), "sched_reserve:       HRX0 compute buffer size =    43.00 MiB")
	for i := 0; i < 2*MaxRecords; i++ {
		// A buffer kind gttsplit does not know, again and again.
		lines = append(lines, fmt.Sprintf("llama_adapter_lora_init:       HRX0 LoRA buffer size =    %d.00 MiB", 1+i%5))
	}
	f, _ := stateOf(t, lines)
	r := f.Report()
	require.Contains(t, r.Flags, FlagStateCapped)
	require.Equal(t, 2375.9, val(r.ModelGTTMiB))
	require.Nil(t, r.StateMiB, "its KV line was dropped: unknown, not 0")
	require.Nil(t, r.Detail.KVMiB)
	require.Nil(t, r.ComputeMiB, "an output buffer line may have gone with it")
	require.Equal(t, 43.0, val(r.Detail.ComputeOnlyMiB), "the reservation is kept")
	require.Len(t, r.Models, 1)
	require.Nil(t, r.Models[0].StateMiB)
	require.Contains(t, strings.Join(r.Detail.Warnings, "\n"), "KV + state is unknown")
}
