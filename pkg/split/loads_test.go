package split

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func loadOf(file string) string {
	return "llama_model_loader: loaded meta data with 30 key-value pairs and 400 tensors from " + file + " (version GGUF V3 (latest))\n"
}

func check(t *testing.T, r Report, name string) (Check, bool) {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// Each case is one rule of docs/accounting.md rule 3 (which loads are
// live) or of the cross-checks, with the figure the naive rule gives.
func TestLiveLoadsDiscriminate(t *testing.T) {
	t.Parallel()
	main := loadOf("/m/main-14B.gguf") +
		"load_tensors:        ROCm0 model buffer size =  8148.38 MiB\n" +
		"llama_context: constructing llama_context\n" +
		"llama_kv_cache:        ROCm0 KV buffer size =  1536.00 MiB\n" +
		"sched_reserve:        ROCm0 compute buffer size =   696.00 MiB\n"
	draft := "srv    load_model: loading draft model '/m/draft-0.5B.gguf'\n" + loadOf("/m/draft-0.5B.gguf") +
		"load_tensors:        ROCm0 model buffer size =   500.79 MiB\n" +
		"llama_context: constructing llama_context\n" +
		"llama_kv_cache:        ROCm0 KV buffer size =    96.00 MiB\n" +
		"sched_reserve:        ROCm0 compute buffer size =   298.50 MiB\n"
	cases := []struct {
		name         string
		log          string
		get          func(Report) float64
		want, naive  float64
		flags, noFlg []string
	}{
		{
			name: "a speculative server's main and draft models are both live",
			log:  verbose + main + draft,
			get:  func(r Report) float64 { return val(r.ModelGTTMiB) }, want: 8649.17, naive: 500.79,
			flags: []string{FlagMultipleModels}, noFlg: []string{FlagMultipleContexts},
		},
		{
			name: "the draft's KV and compute are summed with the main model's",
			log:  verbose + main + draft,
			get:  func(r Report) float64 { return val(r.StateMiB) + val(r.ComputeMiB) }, want: 1536 + 96 + 696 + 298.5, naive: 96 + 298.5,
		},
		{
			name: "a reload of the same file replaces the earlier load",
			log:  verbose + main + main,
			get:  func(r Report) float64 { return val(r.ModelGTTMiB) }, want: 8148.38, naive: 2 * 8148.38,
			noFlg: []string{FlagMultipleModels},
		},
		{
			name: "a fit probe is never live, even with the same file",
			log: verbose + loadOf("/m/main-14B.gguf") + "load_tensors:        ROCm0 model buffer size =     0.00 MiB\n" +
				"llama_context: constructing llama_context\n" +
				"sched_reserve:        ROCm0 compute buffer size =   700.00 MiB\n" + main,
			get: func(r Report) float64 { return val(r.ComputeMiB) }, want: 696, naive: 1396,
			flags: []string{FlagFitProbe}, noFlg: []string{FlagMultipleModels},
		},
		{
			name: "a router's unload ends its child's load",
			log: verbose +
				"srv          load: spawning server instance with name=big on port 41001\n" +
				prefixed("[41001] ", main) +
				"srv        unload: stopping model instance name=big\n" +
				"srv          load: spawning server instance with name=small on port 41002\n" +
				prefixed("[41002] ", loadOf("/m/small.gguf")+"load_tensors:        ROCm0 model buffer size =  1136.91 MiB\n"),
			get: func(r Report) float64 { return val(r.ModelGTTMiB) }, want: 1136.91, naive: 8148.38 + 1136.91,
			noFlg: []string{FlagMultipleModels},
		},
		{
			name: "two router children loaded at once are both live, their lines interleaved",
			log: verbose +
				"srv          load: spawning server instance with name=a on port 41001\n" +
				"srv          load: spawning server instance with name=b on port 41002\n" +
				"[41001] " + loadOf("/m/a.gguf") + "[41002] " + loadOf("/m/b.gguf") +
				"[41001] load_tensors:        ROCm0 model buffer size =   100.00 MiB\n" +
				"[41002] load_tensors:        ROCm0 model buffer size =   200.00 MiB\n" +
				"[41001] llama_context: constructing llama_context\n" +
				"[41002] llama_context: constructing llama_context\n" +
				"[41001] llama_kv_cache:        ROCm0 KV buffer size =    10.00 MiB\n" +
				"[41002] llama_kv_cache:        ROCm0 KV buffer size =    20.00 MiB\n",
			get: func(r Report) float64 { return val(r.ModelGTTMiB) + val(r.StateMiB) }, want: 330, naive: 220,
			flags: []string{FlagMultipleModels}, noFlg: []string{FlagMultipleContexts},
		},
		{
			name: "an mmproj's weights on a GPU backend and its compute buffers count",
			log: verbose + main +
				"clip_ctx: CLIP using ROCm0 backend\n" +
				"load_hparams: model size:         811.79 MiB\n" +
				"alloc_compute_meta:        ROCm0 compute buffer size =     1.12 MiB\n" +
				"alloc_compute_meta:          CPU compute buffer size =     0.02 MiB\n",
			get: func(r Report) float64 { return val(r.ModelGTTMiB) + val(r.ComputeMiB) }, want: 8148.38 + 811.79 + 696 + 1.12, naive: 8148.38 + 696,
			flags: []string{FlagMmproj, FlagMultipleModels}, noFlg: []string{FlagUnknownBuffer},
		},
		{
			name: "an mmproj on the CPU backend is host memory",
			log: verbose + main +
				"clip_ctx: CLIP using CPU backend\n" +
				"load_hparams: model size:         811.79 MiB\n",
			get: func(r Report) float64 { return val(r.ModelGTTMiB) }, want: 8148.38, naive: 8148.38 + 811.79,
		},
		{
			name: "RPC devices are another host's memory: kept out of the rows",
			log: verbose + loadOf("/m/big.gguf") +
				"load_tensors: RPC0[10.0.0.2:50052] model buffer size = 90000.00 MiB\n" +
				"load_tensors:        ROCm0 model buffer size =  8148.38 MiB\n" +
				"llama_context: constructing llama_context\n" +
				"llama_kv_cache: RPC0[10.0.0.2:50052] KV buffer size =   512.00 MiB\n" +
				"llama_kv_cache:        ROCm0 KV buffer size =    64.00 MiB\n" +
				"sched_reserve: RPC0[10.0.0.2:50052] compute buffer size =   300.00 MiB\n" +
				"sched_reserve:        ROCm0 compute buffer size =   100.00 MiB\n",
			get: func(r Report) float64 { return val(r.ModelGTTMiB) + val(r.StateMiB) + val(r.ComputeMiB) }, want: 8148.38 + 64 + 100, naive: 98148.38 + 576 + 400,
			flags: []string{FlagRemoteBuffers},
		},
		{
			name: "DSV4 state is state, named outside the KV/RS rule",
			log: verbose + loadOf("/m/dsv4.gguf") + "load_tensors:        ROCm0 model buffer size =  1.00 MiB\n" +
				"llama_kv_cache:        ROCm0 KV buffer size =   172.00 MiB\n" +
				"llama_dsv4_comp_state:      ROCm0 DSV4 compressor state buffer size =    10.75 MiB\n",
			get: func(r Report) float64 { return val(r.Detail.OtherStateMiB) }, want: 10.75, naive: -1,
		},
		{
			name: "colour codes that lost their ESC byte are stripped",
			log: verbose + "[34m0.00.612.001[0m [32mI [0m" + loadOf("/m/x.gguf") +
				"[34m0.00.612.001[0m [32mI [0mload_tensors:        ROCm0 model buffer size =  1234.00 MiB\n" +
				"[0m[1;33mllama_kv_cache:        ROCm0 KV buffer size =    64.00 MiB[0m\n",
			// 1 when every counted line's function reads clean.
			get: func(r Report) float64 {
				for _, b := range r.Detail.Buffers {
					if strings.Contains(b.Func, "[") {
						return 0
					}
				}
				return float64(len(r.Detail.Buffers))
			}, want: 2, naive: 0,
		},
		{
			name: "a lost colour code in front of the CLIP loader still makes it the mmproj",
			log: verbose + main + "[0mclip_model_loader: loaded meta data with 19 key-value pairs and 455 tensors from /m/mmproj-f16.gguf\n" +
				"[0mclip_ctx: CLIP using ROCm0 backend\n" +
				"[0mload_hparams: model size:         811.79 MiB\n",
			get: func(r Report) float64 { return val(r.ModelGTTMiB) }, want: 8148.38 + 811.79, naive: 8148.38,
		},
		{
			name: "generated text glued in front of the CLIP loader still makes it the mmproj",
			log: verbose + main + "Sure.</s>clip_model_loader: loaded meta data with 19 key-value pairs and 455 tensors from /m/mmproj-f16.gguf\n" +
				"clip_ctx: CLIP using ROCm0 backend\n" +
				"load_hparams: model size:         811.79 MiB\n",
			get: func(r Report) float64 { return val(r.ModelGTTMiB) }, want: 8148.38 + 811.79, naive: 8148.38,
			flags: []string{FlagMmproj},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := foldLog(t, c.log)
			got := c.get(r)
			require.NotEqual(t, c.naive, got, "the naive rule's figure")
			require.InDelta(t, c.want, got, 1e-9)
			for _, f := range c.flags {
				require.Contains(t, r.Flags, f)
			}
			for _, f := range c.noFlg {
				require.NotContains(t, r.Flags, f)
			}
		})
	}
}

func prefixed(p, s string) string {
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString(p + l)
		}
	}
	return b.String()
}

func TestModelsListNamesEachLoad(t *testing.T) {
	t.Parallel()
	r := foldLog(t, verbose+loadOf("/m/main.gguf")+"load_tensors:        ROCm0 model buffer size =  100.00 MiB\n"+
		"srv    load_model: loading draft model '/m/draft.gguf'\n"+loadOf("/m/draft.gguf")+
		"load_tensors:        ROCm0 model buffer size =   10.00 MiB\n"+
		loadOf("/m/main.gguf")+"load_tensors:        ROCm0 model buffer size =  100.00 MiB\n")
	require.Len(t, r.Models, 3)
	require.Equal(t, "main", r.Models[0].Role)
	require.False(t, r.Models[0].Live)
	require.Contains(t, r.Models[0].Ended, "reload")
	require.Equal(t, "draft", r.Models[1].Role)
	require.Equal(t, "/m/draft.gguf", r.Models[1].File)
	require.True(t, r.Models[1].Live)
	require.InDelta(t, 10, val(r.Models[1].ModelGTTMiB), 1e-9)
	require.InDelta(t, 110, val(r.ModelGTTMiB), 1e-9)
	require.Contains(t, r.Models[0].Ended, "replaced by the reload")
	js, err := JSON(r)
	require.NoError(t, err)
	require.Contains(t, string(js), `"models": [`)
}

// A fit probe's breakdown table is never a cross-check source, with or
// without -v; a bracket with a table is a probe even when the probe's own
// load lines are hidden.
func TestProbeTableIsNoCheckSource(t *testing.T) {
	t.Parallel()
	probeTable := "common_init_result: fitting params to device memory, for bugs during this step try to reproduce them with -fit off\n" +
		"common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |\n" +
		"common_memory_breakdown_print: |   - ROCm0 (8060S)       | 131072 = 120000 + (2500 = 2400 +  60 + 40) + 8572 |\n" +
		"common_memory_breakdown_print: |   - RPC0 (10.0.0.2:50052) | 262144 = 60000 + (199175 = 199175 + 0 + 0) + 2969 |\n" +
		"common_fit_params: fitting params to free memory took 0.80 seconds\n"
	// No real load at all: the naive rule compares the probe's table.
	r := foldLog(t, "verbosity = 3\n"+probeTable)
	_, ok := check(t, r, "breakdown_model")
	require.False(t, ok, "the probe's table was compared")
	require.Contains(t, r.Flags, FlagFitProbe, "a bracket with a table is a probe")
	require.Equal(t, 1, r.Detail.ProbeLoads)
	// With a real load after it, its table is still not the source.
	r = foldLog(t, "verbosity = 3\n"+probeTable+loadOf("/m/x.gguf")+"load_tensors:        ROCm0 model buffer size =  2400.00 MiB\n")
	_, ok = check(t, r, "breakdown_model")
	require.False(t, ok)
	// At the default verbosity the bracket's end line may be missing: the
	// warm-up closes it, so the exit table is compared.
	r = foldLog(t, verbose+"common_init_result: fitting params to device memory ...\n"+
		loadOf("/m/x.gguf")+"load_tensors:        ROCm0 model buffer size =  2400.00 MiB\n"+
		"common_init_from_params: warming up the model with an empty run - please wait ... (--no-warmup to disable)\n"+
		"common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |\n"+
		"common_memory_breakdown_print: |   - ROCm0 (8060S)       | 131072 = 120000 + (2400 = 2400 +  0 + 0) + 8672 |\n")
	_, ok = check(t, r, "breakdown_model")
	require.True(t, ok, "the exit table after the warm-up is compared")
	// A bracket with no table and no probe load is no probe (a failed fit).
	r = foldLog(t, "common_init_result: fitting params to device memory, for bugs\nllama_params_fit: fitting params to free memory took 0.00 seconds\n")
	require.NotContains(t, r.Flags, FlagFitProbe)
	// A real table after the real load is compared, its RPC row left out.
	r = foldLog(t, verbose+loadOf("/m/x.gguf")+"load_tensors:        ROCm0 model buffer size =  2400.00 MiB\n"+
		"common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |\n"+
		"common_memory_breakdown_print: |   - ROCm0 (8060S)       | 131072 = 120000 + (2400 = 2400 +  0 + 0) + 8672 |\n"+
		"common_memory_breakdown_print: |   - RPC0 (10.0.0.2:50052) | 262144 = 60000 + (199175 = 199175 + 0 + 0) + 2969 |\n")
	c, ok := check(t, r, "breakdown_model")
	require.True(t, ok)
	require.Equal(t, StatusOK, c.Status, c.Detail)
}

func TestLegacyTotalsAreFlagged(t *testing.T) {
	t.Parallel()
	r := foldLog(t, "main: build = 1500 (a30b324)\n"+loadOf("/m/llama-2-7b.Q4_0.gguf")+
		"llm_load_tensors: mem required  =   70.42 MB\n"+
		"llm_load_tensors: VRAM used: 3577.55 MB\n")
	require.Contains(t, r.Flags, FlagLegacyFormat)
	require.Contains(t, r.Flags, FlagPreB3761)
	require.Nil(t, r.ModelGTTMiB)
}

// The format is judged by the lines: a fork's own build counter below
// b3761 does not make a log that parses "not supported".
func TestForkBuildCounterIsNotAFormat(t *testing.T) {
	t.Parallel()
	r := foldLog(t, "build: 3701 (abcdef12) with gcc for x86_64\n"+loadOf("/m/x.gguf")+
		"load_tensors:        CUDA0 model buffer size =  1000.00 MiB\n")
	require.NotContains(t, r.Flags, FlagPreB3761)
	require.InDelta(t, 1000, val(r.ModelGTTMiB), 1e-9)
	require.NotContains(t, words(r), "not supported")
}

func TestWhyTheModelRowIsNull(t *testing.T) {
	t.Parallel()
	// A load marker without buffer lines (b9151+ at the default level).
	r := foldLog(t, "verbosity = 3\n"+loadOf("/m/x.gguf")+"llama_kv_cache:        ROCm0 KV buffer size =    64.00 MiB\n")
	require.Nil(t, r.ModelGTTMiB)
	require.NotContains(t, r.Flags, FlagNotModelLoad)
	require.Contains(t, strings.Join(r.Detail.Warnings, "\n"), "has no model buffer line, so the model row is unknown")
	// No load at all, but state lines: the flag does not call the state unknown.
	r = foldLog(t, "llama_kv_cache:        ROCm0 KV buffer size =    64.00 MiB\n")
	require.Contains(t, r.Flags, FlagNotModelLoad)
	require.InDelta(t, 64, val(r.StateMiB), 1e-9)
	require.NotContains(t, words(r), "the log rows are unknown")
	require.Contains(t, words(r), "the model row is unknown")
}

// The split states the sampling the collector had (its run-finished event).
func TestSplitStatesItsSampling(t *testing.T) {
	t.Parallel()
	f := NewFold(Options{})
	f.AddLine(Line{Stream: "log", Seq: 1, Text: strings.TrimSuffix(load, "\n")})
	r := f.Report()
	require.Nil(t, r.Detail.Sampling, "not stated: no run-finished event")
	f.Finish(FinishInfo{Sent: &Sent{Samples: 412, LastSampleSeq: 412,
		Sampling: &Sampling{Interval: 100 * time.Millisecond, Triggered: 37, LargestGap: 104500 * time.Microsecond}}})
	r = f.Report()
	require.NotNil(t, r.Detail.Sampling)
	require.Equal(t, SamplingDetail{IntervalMs: 100, Samples: 412, Triggered: 37, LargestGapMs: 104.5}, *r.Detail.Sampling)
}
