package split

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// deviceRow is the report's device row of name (nil: none).
func deviceRow(r Report, name string) *Device {
	for i := range r.Devices {
		if r.Devices[i].Name == name {
			return &r.Devices[i]
		}
	}
	return nil
}

const twoCUDA = verbose + load +
	"load_tensors:        CUDA0 model buffer size =  4000.00 MiB\n" +
	"load_tensors:        CUDA1 model buffer size =  4000.00 MiB\n" +
	"llama_context: constructing llama_context\n" +
	"llama_kv_cache:      CUDA0 KV buffer size =   100.00 MiB\n"

// A reservation starts at its start line (b7746+), whatever buffer types
// it prints first; naive (a repeated buffer type starts the next one), a
// last reservation that prints CUDA0 first, which the one before did not
// print, is split between the two.
func TestReservationStartsAtItsStartLine(t *testing.T) {
	t.Parallel()
	log := twoCUDA +
		"sched_reserve: reserving ...\n" +
		"sched_reserve:      CUDA1 compute buffer size =   144.64 MiB\n" +
		"sched_reserve:  CUDA_Host compute buffer size =    11.54 MiB\n" +
		"sched_reserve: graph splits = 5\n" +
		"sched_reserve: reserving ...\n" +
		"sched_reserve:      CUDA0 compute buffer size =    46.79 MiB\n" +
		"sched_reserve:      CUDA1 compute buffer size =   146.41 MiB\n" +
		"sched_reserve:  CUDA_Host compute buffer size =    17.82 MiB\n"
	r := foldLog(t, log)
	require.NotEqual(t, 164.23, val(r.ComputeMiB), "the naive rule's figure")
	require.InDelta(t, 211.02, val(r.ComputeMiB), 1e-9)
	require.Equal(t, 2, r.Detail.Reservations)
	require.NotNil(t, deviceRow(r, "CUDA0"))
	require.InDelta(t, 46.79, val(deviceRow(r, "CUDA0").ComputeMiB), 1e-9)
	require.InDelta(t, 146.41, val(deviceRow(r, "CUDA1").ComputeMiB), 1e-9)

	// A reservation whose start line is there holds a buffer type twice
	// only if llama.cpp printed it twice: one reservation, not two.
	r = foldLog(t, twoCUDA+"sched_reserve: reserving ...\n"+
		"sched_reserve:      CUDA0 compute buffer size =    40.00 MiB\n"+
		"sched_reserve:      CUDA1 compute buffer size =    50.00 MiB\n")
	require.InDelta(t, 90, val(r.ComputeMiB), 1e-9)

	// Before b7746 a context reserves once, in its constructor, and
	// prints no start line: its compute lines are one reservation, and
	// the next context's start (its first buffer line, before b4881)
	// ends it.
	old := verbose + load + "llm_load_tensors:      CUDA0 buffer size =  4000.00 MiB\n" +
		"llama_kv_cache_init:      CUDA0 KV buffer size =   100.00 MiB\n" +
		"llama_new_context_with_model:      CUDA0 compute buffer size =   164.00 MiB\n" +
		"llama_new_context_with_model:  CUDA_Host compute buffer size =    12.01 MiB\n" +
		"llama_kv_cache_init:      CUDA0 KV buffer size =    50.00 MiB\n" +
		"llama_new_context_with_model:      CUDA0 compute buffer size =    80.00 MiB\n"
	r = foldLog(t, old)
	require.InDelta(t, 164+12.01+80, val(r.ComputeMiB), 1e-9)
	require.Equal(t, 2, r.Detail.LiveContexts)
}

// A context whose creation failed after its output and KV buffers printed
// holds nothing: its buffers are listed apart and the report says so,
// quoting the line; the context created after it counts. Naive, the
// failed context's KV is counted.
func TestFailedContextIsNotResident(t *testing.T) {
	t.Parallel()
	log := verbose + load +
		"load_tensors:        ROCm0 model buffer size =  4000.00 MiB\n" +
		"llama_context: constructing llama_context\n" +
		"llama_context:  ROCm_Host  output buffer size =     0.58 MiB\n" +
		"llama_kv_cache:      ROCm0 KV buffer size =  6564.00 MiB\n" +
		"sched_reserve: reserving ...\n" +
		"ggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 4757131264\n" +
		"graph_reserve: failed to allocate compute buffers\n" +
		"llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers\n" +
		"common_init_from_params: failed to create context with model 'm.gguf'\n" +
		// A retry with a smaller context.
		"llama_context: constructing llama_context\n" +
		"llama_context:  ROCm_Host  output buffer size =     0.58 MiB\n" +
		"llama_kv_cache:      ROCm0 KV buffer size =   512.00 MiB\n" +
		"sched_reserve: reserving ...\n" +
		"sched_reserve:      ROCm0 compute buffer size =   300.00 MiB\n"
	r := foldLog(t, log)
	require.NotEqual(t, 7076.0, val(r.StateMiB), "the naive rule's figure")
	require.InDelta(t, 512, val(r.StateMiB), 1e-9)
	require.InDelta(t, 300.58, val(r.ComputeMiB), 1e-9)
	require.Equal(t, 1, r.Detail.LiveContexts)
	require.Contains(t, r.Flags, FlagContextFailed)
	require.NotContains(t, r.Flags, FlagMultipleContexts)
	require.Len(t, r.Detail.Failed, 2)
	require.Equal(t, "failed", r.Detail.Failed[1].Row)
	require.InDelta(t, 6564, float64(r.Detail.Failed[1].MiB), 1e-9)
	w := strings.Join(r.Detail.Warnings, "\n")
	require.Contains(t, w, "line 10: a context's creation failed (`llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers`): its buffers (ROCm_Host output 0.58 MiB, ROCm0 KV 6564.00 MiB; 6564.58 MiB in all) were freed with it")
	require.Equal(t, 1, strings.Count(w, "creation failed"), "the tool's line repeats the same failure")
	require.Contains(t, words(r), "context_failed: a context's creation failed")

	// A pipeline-parallel retry that works is no failure.
	r = foldLog(t, verbose+load+"load_tensors:        ROCm0 model buffer size =  4000.00 MiB\n"+
		"llama_context: constructing llama_context\n"+
		"llama_kv_cache:      ROCm0 KV buffer size =   512.00 MiB\n"+
		"sched_reserve: reserving ...\n"+
		"ggml_gallocr_reserve_n: failed to allocate ROCm0 buffer of size 4757131264\n"+
		"graph_reserve: failed to allocate compute buffers\n"+
		"sched_reserve: compute buffer allocation failed, retrying without pipeline parallelism\n"+
		"sched_reserve:      ROCm0 compute buffer size =   300.00 MiB\n")
	require.NotContains(t, r.Flags, FlagContextFailed)
	require.InDelta(t, 512, val(r.StateMiB), 1e-9)
	require.InDelta(t, 300, val(r.ComputeMiB), 1e-9)
}

const mainWithContext = verbose + load +
	"load_tensors:        ROCm0 model buffer size =  6476.18 MiB\n" +
	"llama_context: constructing llama_context\n" +
	"llama_kv_cache:      ROCm0 KV buffer size =   768.00 MiB\n" +
	"sched_reserve:      ROCm0 compute buffer size =   519.62 MiB\n" +
	"clip_ctx: CLIP using ROCm0 backend\n" +
	"load_hparams: model size:         811.79 MiB\n" +
	"load_hparams: metadata size:      0.18 MiB\n"

// An mmproj whose weights fail to allocate holds none: not live, its
// weights listed apart; naive, they are counted on its backend. One
// whose warm-up compute buffer fails to allocate has its weights.
func TestFailedMmprojIsNotResident(t *testing.T) {
	t.Parallel()
	r := foldLog(t, mainWithContext+
		"ggml_backend_cuda_buffer_type_alloc_buffer: allocating 811.79 MiB on device 0: cudaMalloc failed: out of memory\n"+
		"alloc_tensor_range: failed to allocate ROCm0 buffer of size 851222528\n"+
		"clip_init: failed to load model 'mmproj.gguf': unable to allocate ROCm0 buffer\n"+
		"srv    load_model: failed to load multimodal model, 'mmproj.gguf'\n")
	require.NotEqual(t, 7287.97, val(r.ModelGTTMiB), "the naive rule's figure")
	require.InDelta(t, 6476.18, val(r.ModelGTTMiB), 1e-9)
	require.Contains(t, r.Flags, FlagMmprojFailed)
	require.NotContains(t, r.Flags, FlagMultipleModels)
	require.NotContains(t, r.Flags, FlagMmproj)
	require.Len(t, r.Models, 2)
	require.False(t, r.Models[1].Live)
	require.Equal(t, "mmproj", r.Models[1].Role)
	require.Len(t, r.Detail.Failed, 1)
	require.Equal(t, "mmproj model", r.Detail.Failed[0].Kind)
	require.Contains(t, strings.Join(r.Detail.Warnings, "\n"), "line 11: the multimodal projector's load failed (`alloc_tensor_range: failed to allocate ROCm0 buffer of size 851222528`): its buffers (ROCm0 mmproj model 811.79 MiB; 811.79 MiB in all)")

	r = foldLog(t, mainWithContext+
		"warmup: warmup with image size = 1472 x 1472\n"+
		"ggml_gallocr_reserve_n_impl: failed to allocate ROCm0 buffer of size 390156544\n"+
		"alloc_compute_meta:      ROCm0 compute buffer size =   112.50 MiB\n")
	require.InDelta(t, 7287.97, val(r.ModelGTTMiB), 1e-9, "the weights were allocated")
	require.NotContains(t, r.Flags, FlagMmprojFailed)
	require.Contains(t, r.Flags, FlagMmproj)
}

// A --fit dry run's table followed by the fit's projection in its
// several-devices form, with no start line before it, is a probe, as one
// followed by "projected to use" is; so is the table after "getting
// device memory data for initial parameters". Naive, the table is taken
// for the run's own breakdown and compared with its buffer lines.
func TestFitProbeShapes(t *testing.T) {
	t.Parallel()
	table := "common_memory_breakdown_print: | memory breakdown [MiB] | total    free     self   model   context   compute    unaccounted |\n" +
		"common_memory_breakdown_print: |   - ROCm0 (RX 6700 XT)   | 12272 = 12094 + (3067 =  3067 +       0 +       0) +       -2889 |\n" +
		"common_memory_breakdown_print: |   - ROCm1 (RX 6700 XT)   | 12272 = 12096 + (2402 =  2402 +       0 +       0) +       -2226 |\n"
	real := load + "load_tensors:        ROCm0 model buffer size =  3067.00 MiB\n" +
		"load_tensors:        ROCm1 model buffer size =  2402.00 MiB\n"
	breakdownChecks := func(r Report) int {
		n := 0
		for _, c := range r.Checks {
			if strings.HasPrefix(c.Name, "breakdown_") {
				n++
			}
		}
		return n
	}
	for name, fit := range map[string]string{
		"initial projection": table + "common_params_fit_impl: projected memory use with initial parameters [MiB]:\n" +
			"common_params_fit_impl:   - ROCm0 (AMD Radeon RX 6700 XT): 12272 total, 3067 used, 9027 free vs. target of 1024\n",
		"early function name": table + "llama_params_fit: projected to use 5469 MiB of device memory vs. a total of 24544 MiB\n",
		"dry-run start line": "common_params_fit_impl: getting device memory data for initial parameters:\n" + table +
			"common_fit_params: fitting params to free memory took 0.41 seconds\n",
	} {
		r := foldLog(t, verbose+fit+real)
		require.Contains(t, r.Flags, FlagFitProbe, name)
		require.Equal(t, 1, r.Detail.ProbeLoads, name)
		require.Zero(t, breakdownChecks(r), "%s: the probe's table is not the run's", name)
	}
	// The same table after the real load is the run's own (checked).
	r := foldLog(t, verbose+real+table)
	require.NotContains(t, r.Flags, FlagFitProbe)
	require.Equal(t, 3, breakdownChecks(r))
}

// A buffer type named by its device (some Vulkan builds) is read whole:
// two cards of one vendor are two devices. Naive (the first word is the
// type), both are one device "AMD", and the kinds are unknown.
func TestDeviceNamedBufferTypes(t *testing.T) {
	t.Parallel()
	r := foldLog(t, verbose+load+
		"llm_load_tensors: AMD Radeon RX 5600 XT buffer size =  2580.38 MiB\n"+
		"llm_load_tensors: AMD Radeon RX 6800 buffer size =  4433.52 MiB\n"+
		"llama_kv_cache_init: AMD Radeon RX 5600 XT KV buffer size =   192.00 MiB\n"+
		"llama_kv_cache_init: AMD Radeon RX 6800 KV buffer size =   320.00 MiB\n"+
		"llama_new_context_with_model: AMD Radeon RX 5600 XT compute buffer size =   296.00 MiB\n"+
		"llama_new_context_with_model: AMD Radeon RX 6800 compute buffer size =   296.00 MiB\n")
	require.NotEqual(t, 0.0, val(r.ModelGTTMiB), "the naive rule's figure")
	require.InDelta(t, 7013.9, val(r.ModelGTTMiB), 1e-9)
	require.InDelta(t, 592, val(r.ComputeMiB), 1e-9)
	require.Nil(t, deviceRow(r, "AMD"))
	for name, want := range map[string][3]float64{"AMD Radeon RX 5600 XT": {2580.38, 192, 296}, "AMD Radeon RX 6800": {4433.52, 320, 296}} {
		d := deviceRow(r, name)
		require.NotNil(t, d, name)
		require.Equal(t, DeviceGPU, d.Kind)
		require.InDelta(t, want[0], val(d.ModelMiB), 1e-9, name)
		require.InDelta(t, want[1], val(d.StateMiB), 1e-9, name)
		require.InDelta(t, want[2], val(d.ComputeMiB), 1e-9, name)
	}
	require.NotContains(t, r.Flags, FlagUnknownBuffer)
}
