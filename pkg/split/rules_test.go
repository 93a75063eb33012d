package split

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// foldLog applies a log given as text (lines numbered from 1) and samples.
func foldLog(t *testing.T, log string, samples ...Sample) Report {
	t.Helper()
	f := NewFold(Options{})
	for i, l := range strings.Split(log, "\n") {
		f.AddLine(Line{Stream: "log", Seq: uint64(i + 1), Text: l})
	}
	for _, s := range samples {
		f.AddSample(s)
	}
	return f.Report()
}

func val(m *MiB) float64 {
	if m == nil {
		return -1
	}
	return round2(float64(*m))
}

const verbose = "0.00.100.000 D create_tensor: loading tensor token_embd.weight\n"

const load = "llama_model_loader: loaded meta data with 30 key-value pairs and 400 tensors from m.gguf (version GGUF V3 (latest))\n"

func fdText(driver, pdev, id, gtt string) string {
	return fmt.Sprintf("pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1181\ndrm-driver:\t%s\ndrm-client-id:\t%s\ndrm-pdev:\t%s\npasid:\t32785\ndrm-total-gtt:\t%s\n", driver, id, pdev, gtt)
}

func sample(seq uint64, fds ...string) Sample {
	s := Sample{Seq: seq, Time: time.Date(2026, 11, 7, 10, 0, int(seq), 0, time.UTC)}
	p := ProcFDs{PID: 4242}
	for i, txt := range fds {
		p.FDs = append(p.FDs, FDInfo{FD: 3 + i, Text: txt})
	}
	s.Procs = []ProcFDs{p}
	return s
}

// Each case is one rule of docs/accounting.md with the figure a naive rule would give:
// the test fails if the core ever computes the naive figure.
func TestRulesDiscriminate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		log   string
		get   func(Report) float64
		want  float64
		naive float64 // what the naive rule would give
	}{
		{
			name: "packed after an eviction keeps the largest",
			log: verbose + load +
				"hrx: host-weight pack    name=blk.0.ffn_up.weight type=q4_K bytes=314572800 packed=1 resident=300.0 MiB\n" +
				"hrx: host-weight pack    name=blk.0.ffn_down.weight type=q4_K bytes=519044710 packed=2 resident=795.8 MiB\n" +
				"hrx: host-weight evict   name=blk.0.ffn_up.weight bytes=314572800 packed=1 resident=512.0 MiB\n",
			get: func(r Report) float64 { return val(r.PackedMiB) }, want: 795.8, naive: 512.0,
		},
		{
			name: "packed weight count is distinct names, not lines",
			log: verbose + load +
				"hrx: host-weight pack    name=a type=q4_K bytes=1 packed=1 resident=1.0 MiB\n" +
				"hrx: host-weight pack    name=a type=q4_K bytes=1 packed=2 resident=2.0 MiB\n" +
				"hrx: host-weight pack    name=b type=q4_K bytes=1 packed=1 resident=3.0 MiB\n",
			get: func(r Report) float64 { return float64(*r.PackedWeights) }, want: 2, naive: 3,
		},
		{
			name: "CPU model buffers stay out of the GTT sum",
			log: verbose + load +
				"load_tensors:   CPU_Mapped model buffer size =   304.28 MiB\n" +
				"load_tensors:         HRX0 model buffer size =  2375.91 MiB\n",
			get: func(r Report) float64 { return val(r.ModelGTTMiB) }, want: 2375.91, naive: 2680.19,
		},
		{
			name: "CPU model buffer is reported on the host row",
			log: verbose + load +
				"load_tensors:   CPU_Mapped model buffer size =   304.28 MiB\n" +
				"load_tensors:         HRX0 model buffer size =  2375.91 MiB\n",
			get: func(r Report) float64 { return val(r.ModelHostMiB) }, want: 304.28, naive: -1,
		},
		{
			name: "model lines and none on host memory: the host row is 0, not unknown",
			log: verbose + load +
				"load_tensors:        ROCm0 model buffer size =  2375.91 MiB\n",
			get: func(r Report) float64 { return val(r.ModelHostMiB) }, want: 0, naive: -1,
		},
		{
			name: "DeepSeek-V4's compressed KV cache is KV + state",
			log: verbose + load +
				"load_tensors:        CUDA0 model buffer size =  9000.00 MiB\n" +
				"llama_context: constructing llama_context\n" +
				"llama_kv_cache:      CUDA0 KV buffer size =   100.00 MiB\n" +
				"llama_memory_hybrid_iswa:      CUDA0 DeepSeek4 compressed KV buffer size =  2450.00 MiB\n" +
				"sched_reserve:      CUDA0 compute buffer size =    50.00 MiB\n",
			get: func(r Report) float64 { return val(r.StateMiB) }, want: 2550, naive: 100,
		},
		{
			name: "a split buffer type is summed",
			log: verbose + load +
				"load_tensors:  ROCm0_Split model buffer size =   316.00 MiB\n" +
				"load_tensors:        ROCm0 model buffer size =  2059.91 MiB\n",
			get: func(r Report) float64 { return val(r.ModelGTTMiB) }, want: 2375.91, naive: 2059.91,
		},
		{
			name: "pinned host buffers are GTT",
			log: verbose + load +
				"load_tensors:    ROCm_Host model buffer size =   100.00 MiB\n" +
				"load_tensors:        ROCm0 model buffer size =  2000.00 MiB\n",
			get: func(r Report) float64 { return val(r.ModelGTTMiB) }, want: 2100, naive: 2000,
		},
		{
			name: "same-name lines of one load are summed (split GGUF)",
			log: verbose + load +
				"load_tensors:         HRX0 model buffer size =  8000.00 MiB\n" +
				"load_tensors:         HRX0 model buffer size =  7718.50 MiB\n",
			get: func(r Report) float64 { return val(r.ModelGTTMiB) }, want: 15718.5, naive: 7718.5,
		},
		{
			name: "the last real load is measured, the fit probe is not",
			log: verbose + load +
				"load_tensors:         HRX0 model buffer size =     0.00 MiB\n" +
				"llama_context: constructing llama_context\n" +
				"llama_memory_recurrent:       HRX0 RS buffer size =    12.00 MiB\n" +
				"sched_reserve:       HRX0 compute buffer size =    50.00 MiB\n" +
				load +
				"load_tensors:         HRX0 model buffer size =  2375.91 MiB\n" +
				"llama_context: constructing llama_context\n" +
				"llama_kv_cache:       HRX0 KV buffer size =    24.00 MiB\n" +
				"llama_memory_recurrent:       HRX0 RS buffer size =    12.00 MiB\n" +
				"sched_reserve:       HRX0 compute buffer size =    43.21 MiB\n",
			get: func(r Report) float64 { return val(r.StateMiB) + val(r.ComputeMiB) }, want: 79.21, naive: 141.21,
		},
		{
			name: "KV summary lines are never added",
			log: verbose + load + "load_tensors:         HRX0 model buffer size =  1.00 MiB\n" +
				"llama_kv_cache:       HRX0 KV buffer size =    24.00 MiB\n" +
				"llama_kv_cache: size =   24.00 MiB (   256 cells,  36 layers,  1/1 seqs), K (f16):   12.00 MiB, V (f16):   12.00 MiB\n" +
				"llama_context: KV self size  =   24.00 MiB, K (f16):   12.00 MiB, V (f16):   12.00 MiB\n",
			get: func(r Report) float64 { return val(r.StateMiB) }, want: 24, naive: 72,
		},
		{
			name: "CPU KV buffers are not GTT",
			log: verbose + load + "load_tensors:         HRX0 model buffer size =  1.00 MiB\n" +
				"llama_kv_cache:       HRX0 KV buffer size =    24.00 MiB\n" +
				"llama_kv_cache:        CPU KV buffer size =     8.00 MiB\n",
			get: func(r Report) float64 { return val(r.StateMiB) }, want: 24, naive: 32,
		},
		{
			name: "recurrent state printed with the KV word (b5262-b5855) is state",
			log: verbose + load + "load_tensors:         ROCm0 model buffer size =  1.00 MiB\n" +
				"llama_kv_cache_recurrent:      ROCm0 KV buffer size =    10.00 MiB\n",
			get: func(r Report) float64 { return val(r.Detail.RSMiB) }, want: 10, naive: 0,
		},
		{
			name: "the last compute reservation of a context counts",
			log: verbose + load + "load_tensors:         HRX0 model buffer size =  1.00 MiB\n" +
				"llama_context: constructing llama_context\n" +
				"sched_reserve:       HRX0 compute buffer size =    51.00 MiB\n" +
				"sched_reserve:        CPU compute buffer size =     4.02 MiB\n" +
				"sched_reserve: graph splits = 2\n" +
				"sched_reserve:       HRX0 compute buffer size =    43.21 MiB\n" +
				"sched_reserve:        CPU compute buffer size =     3.77 MiB\n",
			get: func(r Report) float64 { return val(r.ComputeMiB) }, want: 43.21, naive: 94.21,
		},
		{
			name: "a re-reservation without a graph-splits line still replaces the first",
			log: verbose + load + "load_tensors:         HRX0 model buffer size =  1.00 MiB\n" +
				"llama_context: constructing llama_context\n" +
				"sched_reserve:       HRX0 compute buffer size =    51.00 MiB\n" +
				"sched_reserve:       HRX0 compute buffer size =    43.21 MiB\n",
			get: func(r Report) float64 { return val(r.ComputeMiB) }, want: 43.21, naive: 94.21,
		},
		{
			name: "the ~llama_context echo is not counted twice",
			log: verbose + load + "load_tensors:         HRX0 model buffer size =  1.00 MiB\n" +
				"sched_reserve:       HRX0 compute buffer size =    43.21 MiB\n" +
				"~llama_context:       HRX0 compute buffer size is  43.2100 MiB, matches expectation of  43.2100 MiB\n",
			get: func(r Report) float64 { return val(r.ComputeMiB) }, want: 43.21, naive: 86.42,
		},
		{
			name: "pinned output buffers count, CPU ones do not",
			log: verbose + load + "load_tensors:         ROCm0 model buffer size =  1.00 MiB\n" +
				"llama_context:  ROCm_Host  output buffer size =     0.58 MiB\n" +
				"llama_context:        CPU  output buffer size =     0.50 MiB\n" +
				"llama_context:      ROCm0 compute buffer size =    10.00 MiB\n",
			get: func(r Report) float64 { return val(r.ComputeMiB) }, want: 10.58, naive: 11.08,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := foldLog(t, c.log)
			got := c.get(r)
			require.NotEqual(t, c.naive, got, "the naive rule's figure")
			require.InDelta(t, c.want, got, 1e-9)
		})
	}
}

func TestNoTraceIsUnknownNotZero(t *testing.T) {
	t.Parallel()
	r := foldLog(t, verbose+load+"load_tensors:         HRX0 model buffer size =  2375.91 MiB\n")
	require.Nil(t, r.PackedMiB)
	require.Nil(t, r.PackedWeights)
	require.Nil(t, r.DuplicatePct)
	require.Contains(t, r.Flags, FlagNoTrace)
	require.Contains(t, words(r), "packed row is unknown, not 0")
}

func TestNotVerboseIsFlagged(t *testing.T) {
	t.Parallel()
	r := foldLog(t, load+"load_tensors:         HRX0 model buffer size =  2375.91 MiB\n")
	require.Contains(t, r.Flags, FlagNotVerbose)
	require.InDelta(t, 2375.91, val(r.ModelGTTMiB), 1e-9, "numbers are still computed")
	r = foldLog(t, verbose+load+"load_tensors:         HRX0 model buffer size =  2375.91 MiB\n")
	require.NotContains(t, r.Flags, FlagNotVerbose)
	r = foldLog(t, "0.00.001.000 I cmn  common_param: common_params_print_info: verbosity = 2147483647 (adjust with the -lv N CLI arg)\n"+load)
	require.NotContains(t, r.Flags, FlagNotVerbose, "b9151+ states its verbosity")
}

func TestNotAModelLoadIsFlagged(t *testing.T) {
	t.Parallel()
	r := foldLog(t, "version: 4615 (bfcce4d6)\nbuilt with cc for x86_64-linux-gnu\n")
	require.Contains(t, r.Flags, FlagNotModelLoad)
	require.Nil(t, r.ModelGTTMiB)
	require.Equal(t, "b4615 (bfcce4d6)", r.Provenance.LlamaBuild)
}

// The seed's second negative control: counting a client on every fd gives
// 2099200 KiB instead of 1050624 KiB.
func TestFDInfoEachClientOnce(t *testing.T) {
	t.Parallel()
	a := fdText("amdgpu", "0000:c5:00.0", "30", "1048576 KiB")
	b := fdText("amdgpu", "0000:c5:00.0", "31", "2048 KiB")
	xe := fdText("xe", "0000:00:02.0", "30", "4096 KiB") // same id, other driver
	legacy := "drm-driver:\tamdgpu\ndrm-pdev:\t0000:c6:00.0\ndrm-client-id:\t7\ndrm-memory-gtt: \t1024 KiB\n"
	r := foldLog(t, verbose+load, sample(1, a, a, b, xe))
	require.InDelta(t, 1050624.0/1024, val(r.PeakGTTMiB), 1e-9)
	require.NotEqual(t, 2099200.0/1024, val(r.PeakGTTMiB))
	require.Equal(t, 2, r.Detail.GPUClients)
	// drm-memory-gtt is accepted as the fallback key.
	r = foldLog(t, verbose+load, sample(1, a, legacy))
	require.InDelta(t, (1048576.0+1024)/1024, val(r.PeakGTTMiB), 1e-9)
	require.Contains(t, r.Flags, FlagResidentOnly)
}

func TestFDInfoSameClientAcrossProcessesOnce(t *testing.T) {
	t.Parallel()
	a := fdText("amdgpu", "0000:c5:00.0", "30", "1 GiB")
	s := sample(1, a)
	s.Procs = append(s.Procs, ProcFDs{PID: 4243, FDs: []FDInfo{{FD: 9, Text: a}}})
	r := foldLog(t, verbose+load, s)
	require.InDelta(t, 1024, val(r.PeakGTTMiB), 1e-9)
}

func TestPeakAndFinal(t *testing.T) {
	t.Parallel()
	fd := func(v string) string { return fdText("amdgpu", "0000:c5:00.0", "30", v) }
	r := foldLog(t, verbose+load, sample(3, fd("3 MiB")), sample(1, fd("1 MiB")), sample(2, fd("5 MiB")), sample(4, fd("3145728")))
	require.InDelta(t, 5, val(r.PeakGTTMiB), 1e-9)
	require.InDelta(t, 3, val(r.FinalGTTMiB), 1e-9)
}

func TestNoGPUClient(t *testing.T) {
	t.Parallel()
	r := foldLog(t, verbose+load+"load_tensors:         HRX0 model buffer size =  2375.91 MiB\n",
		sample(1, "pos:\t0\nflags:\t02\nmnt_id:\t1\nino:\t2\n", fdText("xe", "0000:00:02.0", "3", "192 KiB")))
	require.Nil(t, r.PeakGTTMiB)
	require.Nil(t, r.UnattributedMiB)
	require.Contains(t, r.Flags, FlagNoGPUClient)
	r = foldLog(t, verbose+load)
	require.Contains(t, r.Flags, FlagNoSamples)
}

func TestUnattributedThresholdAndNegative(t *testing.T) {
	t.Parallel()
	log := verbose + load + "load_tensors:         HRX0 model buffer size =  900.00 MiB\n"
	fd := func(v string) string { return fdText("amdgpu", "0000:c5:00.0", "30", v) }
	r := foldLog(t, log, sample(1, fd("1000 MiB")))
	require.InDelta(t, 100, val(r.UnattributedMiB), 1e-9)
	require.InDelta(t, 10, val(r.UnattributedPct), 1e-9)
	require.NotContains(t, r.Flags, FlagUnattribHigh, "10 %% is not above a 10 %% threshold")
	r = foldLog(t, log, sample(1, fd("1001 MiB")))
	require.Contains(t, r.Flags, FlagUnattribHigh)
	f := NewFold(Options{UnattributedThresholdPct: 20})
	for i, l := range strings.Split(log, "\n") {
		f.AddLine(Line{Stream: "log", Seq: uint64(i + 1), Text: l})
	}
	f.AddSample(sample(1, fd("1001 MiB")))
	require.NotContains(t, f.Report().Flags, FlagUnattribHigh)
	r = foldLog(t, log, sample(1, fd("800 MiB")))
	require.InDelta(t, -100, val(r.UnattributedMiB), 1e-9)
	require.Contains(t, r.Flags, FlagUnattribNegative)
}

func TestComputeMismatchIsAWarning(t *testing.T) {
	t.Parallel()
	r := foldLog(t, verbose+load+"load_tensors:         HRX0 model buffer size =  1.00 MiB\n"+
		"sched_reserve:       HRX0 compute buffer size =    72.10 MiB\n"+
		"~llama_context:       HRX0 compute buffer size of  74.5000 MiB, does not match expectation of  72.1000 MiB\n")
	require.InDelta(t, 72.10, val(r.ComputeMiB), 1e-9)
	require.Contains(t, r.Flags, FlagComputeMismatch)
}

func TestUnknownBufferKindsAreListed(t *testing.T) {
	t.Parallel()
	r := foldLog(t, verbose+load+"load_tensors:         ROCm0 model buffer size =  1.00 MiB\n"+
		"llama_adapter_lora_init_impl:      ROCm0 LoRA buffer size =    50.00 MiB\n"+
		"llama_kv_cache_dsv4:      ROCm0 DSV4 idx state buffer size =     5.00 MiB\n")
	require.Contains(t, r.Flags, FlagUnknownBuffer)
	require.Len(t, r.Detail.Unknown, 1)
	require.Equal(t, "LoRA", r.Detail.Unknown[0].Kind)
	require.InDelta(t, 5, val(r.StateMiB), 1e-9, "DSV4 state buffers are state")
}

// The cross-checks fail when two sources disagree about the same bytes.
func TestCrossChecksCanFail(t *testing.T) {
	t.Parallel()
	check := func(r Report, name string) Check {
		for _, c := range r.Checks {
			if c.Name == name {
				return c
			}
		}
		t.Fatalf("no check %s in %+v", name, r.Checks)
		return Check{}
	}
	// A packed copy larger than the model buffer cannot be a copy of it.
	r := foldLog(t, verbose+load+"load_tensors:         HRX0 model buffer size =  2000.00 MiB\n"+
		"hrx: host-weight summary packed=3 resident=3000.0 MiB\n")
	require.Equal(t, StatusFail, check(r, "trace_vs_model").Status)

	// A process above its card's device-wide GTT use means a bad sample.
	s := sample(1, fdText("amdgpu", "0000:c5:00.0", "30", "3000 MiB"))
	s.Cards = []CardGTT{{Card: "card1", UsedBytes: 2000 << 20, TotalBytes: 96 << 30}}
	r = foldLog(t, verbose+load+"load_tensors:         HRX0 model buffer size =  2000.00 MiB\n", s)
	require.Equal(t, StatusFail, check(r, "process_vs_card").Status)

	// llama.cpp's own table disagreeing with the buffer lines is a warning.
	r = foldLog(t, verbose+load+"load_tensors:         HRX0 model buffer size =  2000.00 MiB\n"+
		"common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |\n"+
		"common_memory_breakdown_print: |   - HRX0 (8060S)       | 131072 = 120000 + (2500 = 2400 +  0 + 0) + 8572 |\n")
	require.Equal(t, StatusWarn, check(r, "breakdown_model").Status)

	// A peak that falls by more than the packed copy: briefly twice.
	fd := func(v string) string { return fdText("amdgpu", "0000:c5:00.0", "30", v) }
	r = foldLog(t, verbose+load+"load_tensors:         HRX0 model buffer size =  2000.00 MiB\n"+
		"hrx: host-weight summary packed=3 resident=500.0 MiB\n", sample(1, fd("2600 MiB")), sample(2, fd("2050 MiB")))
	c := check(r, "steady_state")
	require.Equal(t, StatusWarn, c.Status)
	require.Contains(t, c.Detail, "briefly twice")
}

// A control run (collector run --control-of) is judged as a control: the
// 4B run's offload-off control has 94 % of its small peak not attributed
// by design, which is not flagged; its Expected line says what a healthy
// control is. A "control" that holds model buffers in GTT is judged as
// any run, and flagged.
func TestControlJudgedAsControl(t *testing.T) {
	t.Parallel()
	fold := func(name string, ri RunInfo) Report {
		dir := filepath.Join("..", "..", "testdata", name)
		f := foldFiles(t, filepath.Join(dir, "split.log"), filepath.Join(dir, "gtt.txt"))
		f.SetRun(ri)
		return f.Report()
	}
	ctl := fold(filepath.Join("controls", "4b-ngl0"), RunInfo{ID: "ctl", ControlOf: "strix01-20261107T140311-4b"})
	require.InDelta(t, 94.26, val(ctl.UnattributedPct), 0.01)
	require.Contains(t, ctl.Flags, FlagControl)
	require.NotContains(t, ctl.Flags, FlagUnattribHigh)
	require.True(t, strings.HasPrefix(ctl.Expected, "Control of run strix01-20261107T140311-4b (the same command with offload off, -ngl 0): healthy when"), ctl.Expected)
	require.Contains(t, ctl.Expected, "This run: model buffer in GTT 0.0 MiB; CPU model buffer 2680.2 MiB; peak 753.3 MiB.")
	for _, c := range ctl.Checks {
		if c.Name == "attributed_vs_peak" {
			require.Equal(t, StatusOK, c.Status, c.Detail)
			require.Contains(t, c.Detail, "this run is a control (offload off)")
		}
	}

	// The same log without --control-of: an unhealthy run.
	plain := fold(filepath.Join("controls", "4b-ngl0"), RunInfo{ID: "ctl"})
	require.Contains(t, plain.Flags, FlagUnattribHigh)
	require.NotContains(t, plain.Flags, FlagControl)

	// A "control" with the weights in GTT.
	on := fold(filepath.Join("runs", "4b"), RunInfo{ID: "x", ControlOf: "y"})
	require.Contains(t, on.Flags, FlagControlOffloaded)
	require.Contains(t, on.Flags, FlagUnattribHigh)
	require.True(t, strings.HasPrefix(on.Expected, "Healthy:"))
}

// TestUnattributedMixedBackends: the not-attributed rest of a run that
// mixes backends and devices (ROCm and Vulkan on two cards, a remote RPC
// device, host, repacked and pinned host buffers), re-reserves its compute
// buffers, evicts packed weights and shares one client between two fds.
// Every naive rule gives another figure: summing every buffer line, taking
// the last resident= line, counting a client per fd, or taking the last
// sample as the peak.
func TestUnattributedMixedBackends(t *testing.T) {
	t.Parallel()
	log := verbose + load +
		"load_tensors:        ROCm0 model buffer size =   600.00 MiB\n" +
		"load_tensors:      Vulkan0 model buffer size =   300.00 MiB\n" +
		"load_tensors: RPC0[10.0.0.2:50052] model buffer size =  5000.00 MiB\n" +
		"load_tensors:   CPU_Mapped model buffer size =   100.00 MiB\n" +
		"load_tensors:   CPU_REPACK model buffer size =    50.00 MiB\n" +
		"load_tensors:   CPU_Mapped model buffer size =   100.00 MiB\n" +
		"load_tensors:  ROCm0_Split model buffer size =    10.00 MiB\n" +
		"load_tensors:  ROCm0_Split model buffer size =    10.00 MiB\n" +
		"llama_context: constructing llama_context\n" +
		"llama_kv_cache:      ROCm0 KV buffer size =    16.00 MiB\n" +
		"llama_kv_cache:    Vulkan0 KV buffer size =     8.00 MiB\n" +
		"llama_kv_cache: RPC0[10.0.0.2:50052] KV buffer size =   100.00 MiB\n" +
		"llama_kv_cache:        CPU KV buffer size =     4.00 MiB\n" +
		"llama_kv_cache: size =  128.00 MiB (  4096 cells,  32 layers,  1/1 seqs), K (f16):   64.00 MiB, V (f16):   64.00 MiB\n" +
		"llama_context:  ROCm_Host  output buffer size =     0.58 MiB\n" +
		"sched_reserve: reserving ...\n" +
		"sched_reserve:      ROCm0 compute buffer size =   400.00 MiB\n" +
		"sched_reserve: reserving ...\n" +
		"sched_reserve:      ROCm0 compute buffer size =    40.00 MiB\n" +
		"sched_reserve:    Vulkan0 compute buffer size =    20.00 MiB\n" +
		"sched_reserve: RPC0[10.0.0.2:50052] compute buffer size =    99.00 MiB\n" +
		"sched_reserve:  ROCm_Host compute buffer size =     8.00 MiB\n" +
		"sched_reserve:        CPU compute buffer size =     5.00 MiB\n" +
		"hrx: host-weight pack    name=a type=q4_K bytes=1 packed=1 resident=100.0 MiB\n" +
		"hrx: host-weight pack    name=b type=q4_K bytes=1 packed=2 resident=150.0 MiB\n" +
		"hrx: host-weight evict   name=a bytes=1 packed=1 resident=50.0 MiB\n" +
		"~llama_context:      ROCm0 compute buffer size is  40.0000 MiB, matches expectation of  40.0000 MiB\n"
	a := func(v string) string { return fdText("amdgpu", "0000:c5:00.0", "30", v) }
	b := fdText("amdgpu", "0000:c6:00.0", "30", "102400 KiB") // same id, other card: another client
	r := foldLog(t, log, sample(1, a("1000 MiB"), a("1000 MiB"), b), sample(2, a("1400 MiB"), a("1400 MiB"), b),
		sample(3, a("1258291200"), a("1258291200"), b))
	// model 600+300+10+10, packed 150, KV 16+8, compute+output 40+20+8+0.58
	require.InDelta(t, 920, val(r.ModelGTTMiB), 1e-9)
	require.InDelta(t, 250, val(r.ModelHostMiB), 1e-9)
	require.InDelta(t, 150, val(r.PackedMiB), 1e-9)
	require.InDelta(t, 24, val(r.StateMiB), 1e-9)
	require.InDelta(t, 68.58, val(r.ComputeMiB), 1e-9)
	require.InDelta(t, 1500, val(r.PeakGTTMiB), 1e-9)
	require.InDelta(t, 1300, val(r.FinalGTTMiB), 1e-9)
	got := val(r.UnattributedMiB)
	require.InDelta(t, 1500-1162.58, got, 1e-9)
	for name, naive := range map[string]float64{
		"every buffer line summed":   1500 - (920 + 5000 + 250 + 150 + 24 + 104 + 68.58 + 104),
		"the last resident= line":    1500 - (920 + 50 + 24 + 68.58),
		"a client per fd":            2900 - 1162.58,
		"the last sample as peak":    1300 - 1162.58,
		"the first compute reserved": 1500 - (920 + 150 + 24 + 400.58),
	} {
		require.NotEqual(t, round2(naive), got, name)
	}
	require.InDelta(t, 22.49, val(r.UnattributedPct), 1e-9)
	require.Contains(t, r.Flags, FlagRemoteBuffers)
	require.Contains(t, r.Flags, FlagUnattribHigh)
}

// TestBufferTypeFamilies pins the row of every family of buffer-type names
// llama.cpp's backends print, the ones no fixture log holds included:
// plain host memory (any CPU_*, AMX) is not GTT, pinned host memory
// (<backend>_Host) is, devices, split and meta types are, remote devices
// are another host's. A name is classified by its prefix or suffix, never
// by "CPU" or "Host" anywhere in it.
func TestBufferTypeFamilies(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		names                []string
		host, pinned, remote bool
	}{
		{[]string{"CPU", "CPU_Mapped", "CPU_REPACK", "CPU_AARCH64", "CPU_KLEIDIAI", "AMX"}, true, false, false},
		{[]string{"CUDA_Host", "ROCm_Host", "MUSA_Host", "Vulkan_Host", "SYCL_Host", "CANN_Host"}, false, true, false},
		{[]string{"CUDA0", "ROCm1", "MUSA0", "Vulkan0", "SYCL0", "Metal", "MTL0", "HRX0", "CANN0", "Metal_Mapped", "MTL0_Private",
			"CUDA_Split", "CUDA0_Split", "ROCm0_Split", "SYCL_Split", "Meta(ROCm0,ROCm1)", "Meta(CUDA0,CPU)", "HostCPU0", "ROCm0_CPU"}, false, false, false},
		{[]string{"RPC0[10.0.0.2:50052]", "RPC[192.168.1.2:50052]", "RPC1[[::1]:50052]"}, false, false, true},
	} {
		for _, n := range c.names {
			require.Equal(t, c.host, IsHostBuffer(n), n)
			require.Equal(t, c.pinned, IsPinnedHostBuffer(n), n)
			require.Equal(t, c.remote, IsRemoteBuffer(n), n)
		}
	}
}

// TestSlidingWindowCachesAreSummed: an iSWA model's two caches, each
// announced by its own line (llama_kv_cache_unified_iswa: in b5429-b6232,
// llama_kv_cache_iswa: from b6233), each with its buffer and summary
// lines: both device buffers count, neither summary does, nor the CPU one.
func TestSlidingWindowCachesAreSummed(t *testing.T) {
	t.Parallel()
	for _, fn := range []string{"llama_kv_cache_unified_iswa", "llama_kv_cache_iswa"} {
		kv := strings.TrimSuffix(fn, "_iswa")
		r := foldLog(t, verbose+load+"load_tensors:       CUDA0 model buffer size =  1000.00 MiB\n"+
			"llama_context: constructing llama_context\n"+
			fn+": creating non-SWA KV cache, size = 4096 cells\n"+
			kv+":      CUDA0 KV buffer size =   256.00 MiB\n"+
			kv+":        CPU KV buffer size =    32.00 MiB\n"+
			kv+": size =  288.00 MiB (  4096 cells,   8 layers,  1/1 seqs), K (f16):  144.00 MiB, V (f16):  144.00 MiB\n"+
			fn+": creating     SWA KV cache, size = 1024 cells\n"+
			kv+":      CUDA0 KV buffer size =    64.00 MiB\n"+
			kv+": size =   64.00 MiB (  1024 cells,  24 layers,  1/1 seqs), K (f16):   32.00 MiB, V (f16):   32.00 MiB\n")
		require.InDelta(t, 320, val(r.StateMiB), 1e-9, fn)
		require.InDelta(t, 32, val(&r.Detail.HostKVMiB), 1e-9, fn)
	}
}
