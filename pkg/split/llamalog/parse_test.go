package llamalog

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestParseDeviceLine: the "using device" line in its shapes.
func TestParseDeviceLine(t *testing.T) {
	t.Parallel()
	p := MustParser()
	for _, tc := range []struct {
		line, name, desc, id string
		free                 float64
	}{
		{"llama_load_model_from_file: using device ROCm0 (AMD Radeon Graphics) - 63818 MiB free", "ROCm0", "AMD Radeon Graphics", "", 63818},
		{"llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 3060) (0000:01:00.0) - 11245 MiB free", "CUDA0", "NVIDIA GeForce RTX 3060", "0000:01:00.0", 11245},
		{"llama_prepare_model_devices: using device Vulkan0 (AMD Radeon 8060S Graphics (RADV GFX1151)) (0000:c5:00.0) - 95000 MiB free", "Vulkan0", "AMD Radeon 8060S Graphics (RADV GFX1151)", "0000:c5:00.0", 95000},
		{"llama_model_load_from_file_impl: using device Vulkan0 (Intel(R) Arc(tm) A770 Graphics (DG2)) - 15000 MiB free", "Vulkan0", "Intel(R) Arc(tm) A770 Graphics (DG2)", "", 15000},
		{"llama_model_load_from_file_impl: using device SYCL0 (Intel(R) Arc(TM) A770 Graphics) (unknown id) - 15473 MiB free", "SYCL0", "Intel(R) Arc(TM) A770 Graphics", "", 15473},
		{"llama_model_load_from_file_impl: using device RPC0 (10.0.0.2:50052) (10.0.0.2:50052) - 24000 MiB free", "RPC0", "10.0.0.2:50052", "10.0.0.2:50052", 24000},
	} {
		r, ok := p.Parse(3, []byte(tc.line))
		require.True(t, ok, tc.line)
		require.Equal(t, KindDevice, r.Kind, tc.line)
		require.Equal(t, tc.name, r.Name)
		require.Equal(t, tc.desc, r.Text)
		require.Equal(t, tc.id, r.BufKind)
		require.Equal(t, tc.free, r.MiB)
	}
	for _, bad := range []string{
		"ggml_cuda_set_main_device: using device 0 (NVIDIA GeForce RTX 3090) as main device",
		"llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 3060 - 11245 MiB free",
		"llama_model_load_from_file_impl: using device CUDA0 (x) - lots MiB free",
	} {
		r, ok := p.Parse(3, []byte(bad))
		require.False(t, ok && r.Kind == KindDevice, bad)
	}
}

func TestMemoryLine(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]bool{
		"load_tensors:        ROCm0 model buffer size =  2375.91 MiB":                                                         true,
		"hrx: host-weight pack    name=a type=q4_K bytes=1 packed=1 resident=1.0 MiB":                                         true,
		"llama_model_loader: loaded meta data with 30 key-value pairs and 400 tensors from m.gguf (version GGUF V3 (latest))": true,
		"llama_context: constructing llama_context":                                                                           true,
		"print_info: n_ctx_train      = 40960":                                                                                false,
		"slot print_timing: id  9 | task 0 | prompt eval time =     176.94 ms /    22 tokens":                                 false,
	} {
		require.Equal(t, want, MemoryLine([]byte(line)), line)
	}
}

// TestGrammarRules holds the grammar's table to its loop's assumptions:
// every rule is told by a literal the one-pass search finds (a rule with
// none would apply to every line, or be skipped with its class) and has a
// read method.
func TestGrammarRules(t *testing.T) {
	all := litMask(1<<len(lits) - 1)
	for c, class := range grammar {
		if len(class) == 0 {
			t.Fatalf("class %d has no rule", c)
		}
		for k, u := range class {
			if u.anyOf|u.allOf == 0 || (u.anyOf|u.allOf)&^all != 0 {
				t.Errorf("class %d rule %d: literals %b not among the %d searched", c, k, u.anyOf|u.allOf, len(lits))
			}
			if u.read == nil {
				t.Errorf("class %d rule %d: no read method", c, k)
			}
		}
	}
}

// TestParseFailures: what failed, told by the line's grammar; other
// failures are not relevant.
func TestParseFailures(t *testing.T) {
	t.Parallel()
	p := MustParser()
	for _, tc := range []struct{ line, what, name, fn string }{
		{"llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers", "context", "", "llama_init_from_model"},
		{"llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache", "context", "", "llama_init_from_model"},
		{"common_init_from_params: failed to create context with model 'm.gguf'", "context", "", "common_init_from_params"},
		{"common_speculative_init_result: failed to create MTP context", "context", "", "common_speculative_init_result"},
		{"llama_new_context_with_model: failed to allocate compute buffers", "context", "", "llama_new_context_with_model"},
		{"graph_reserve: failed to allocate compute buffers", "compute", "", "graph_reserve"},
		{"ggml_gallocr_reserve_n: failed to allocate Vulkan0 buffer of size 4757131264", "compute", "Vulkan0", "ggml_gallocr_reserve_n"},
		{"ggml_gallocr_reserve_n_impl: failed to allocate CUDA0 buffer of size 390156544", "compute", "CUDA0", "ggml_gallocr_reserve_n_impl"},
		{"alloc_tensor_range: failed to allocate ROCm0 buffer of size 3196059648", "tensors", "ROCm0", "alloc_tensor_range"},
		{"/build/ggml/src/ggml-backend.cpp:179: GGML_ASSERT(buffer) failed", "tensors", "", "/build/ggml/src/ggml-backend.cpp:179"},
		{"clip_init: failed to load model 'mmproj.gguf': load_hparams: unknown projector type: x", "mmproj", "", "clip_init"},
		{"mtmd_init_from_file: error: Failed to load CLIP model from mmproj.gguf", "mmproj", "", "mtmd_init_from_file"},
		{"srv    load_model: failed to load multimodal model, 'mmproj.gguf'", "mmproj", "", "load_model"},
	} {
		r, ok := p.Parse(3, []byte(tc.line))
		require.True(t, ok, tc.line)
		require.Equal(t, KindFailure, r.Kind, tc.line)
		require.Equal(t, tc.what, r.BufKind, tc.line)
		require.Equal(t, tc.name, r.Name, tc.line)
		require.Equal(t, tc.fn, r.Func, tc.line)
		require.Equal(t, tc.line, r.Text)
		require.True(t, p.Relevant([]byte(tc.line), false), tc.line)
	}
	for _, line := range []string{
		"warning: failed to mlock 71303168-byte buffer (after previously locking 0 bytes): Cannot allocate memory",
		"load_backend: failed to find ggml_backend_init in ./libggml-vulkan.so",
		"llama_model_load: error loading model: unable to allocate CUDA0 buffer",
	} {
		r, ok := p.Parse(3, []byte(line))
		require.False(t, ok && r.Kind == KindFailure, line)
	}
	long := "common_init_from_params: failed to create context with model '" + strings.Repeat("é", 200) + "'"
	r, ok := p.Parse(3, []byte(long))
	require.True(t, ok)
	require.LessOrEqual(t, len(r.Text), failureLen)
	require.True(t, utf8.ValidString(r.Text), "cut at a rune")
}

// TestParseReserveAndFit: a reservation's start line, and the fit's
// start and projection lines in every shape (the projection only from the
// fit's function).
func TestParseReserveAndFit(t *testing.T) {
	t.Parallel()
	p := MustParser()
	r, ok := p.Parse(3, []byte("sched_reserve: reserving ..."))
	require.True(t, ok)
	require.Equal(t, KindReserve, r.Kind)
	require.Equal(t, "sched_reserve", r.Func)
	r, ok = p.Parse(3, []byte("graph_reserve: reserving a graph for ubatch with n_tokens =  512, n_seqs =  1, n_outputs =  512"))
	require.True(t, ok)
	require.Equal(t, KindDebugMarker, r.Kind, "a -v line, not a reservation")
	for line, text := range map[string]string{
		"common_init_result: fitting params to device memory, for bugs during this step try to reproduce them with -fit off": "start",
		"common_params_fit_impl: getting device memory data for initial parameters:":                                         "start",
		"llama_params_fit_impl: getting device memory data for initial parameters:":                                          "start",
		"common_params_fit_impl: projected memory use with initial parameters [MiB]:":                                        "projected",
		"llama_params_fit: projected memory use with initial parameters [MiB]:":                                              "projected",
		"llama_params_fit: projected to use 158641 MiB of device memory vs. a total of 65424 MiB":                            "projected",
		"common_params_fit_impl: projected to use 6007 MiB of device memory vs. 6898 MiB of free device memory":              "projected",
		"common_fit_params: fitting params to free memory took 0.74 seconds":                                                 "end",
	} {
		r, ok := p.Parse(3, []byte(line))
		require.True(t, ok, line)
		require.Equal(t, KindFitBracket, r.Kind, line)
		require.Equal(t, text, r.Text, line)
		require.True(t, p.Relevant([]byte(line), false), line)
	}
	r, ok = p.Parse(3, []byte("main: projected to use 12 MiB more than last time"))
	require.False(t, ok && r.Kind == KindFitBracket, "not the fit's function")
}

// TestParseDeviceNamedBufferTypes: a buffer type is what the printf put
// between the function's ": " and the kind; a device-named one (some
// Vulkan builds) is read whole.
func TestParseDeviceNamedBufferTypes(t *testing.T) {
	t.Parallel()
	p := MustParser()
	for _, tc := range []struct{ line, name, kind string }{
		{"llama_kv_cache_init: AMD Radeon RX 5600 XT KV buffer size =   192.00 MiB", "AMD Radeon RX 5600 XT", "KV"},
		{"llama_new_context_with_model: AMD Radeon RX 6800 compute buffer size =   296.00 MiB", "AMD Radeon RX 6800", "compute"},
		{"llama_new_context_with_model: Intel(R) Arc(TM) A770 Graphics  output buffer size =     0.24 MiB", "Intel(R) Arc(TM) A770 Graphics", "output"},
		{"llm_load_tensors: AMD Radeon RX 5600 XT buffer size =  2580.38 MiB", "AMD Radeon RX 5600 XT", "model"},
		{"load_tensors: NVIDIA GeForce RTX 4090 model buffer size =  7969.22 MiB", "NVIDIA GeForce RTX 4090", "model"},
		// llama.cpp's own names: the first word, the kind after it.
		{"llama_kv_cache:      CUDA0 KV buffer size =   100.00 MiB", "CUDA0", "KV"},
		{"llama_memory_hybrid_iswa:      CUDA0 DeepSeek4 compressed KV buffer size =  2450.00 MiB", "CUDA0", "DeepSeek4 compressed KV"},
		{"llama_dsv4_comp_state:      ROCm0 DSV4 compressor state buffer size =    10.75 MiB", "ROCm0", "DSV4 compressor state"},
		{"llama_adapter_lora_init_impl:      ROCm0 LoRA buffer size =    80.00 MiB", "ROCm0", "LoRA"},
		{"load_tensors: RPC[10.0.2.242:50052] model buffer size = 116788.73 MiB", "RPC[10.0.2.242:50052]", "model"},
		{"load_tensors: Meta(CUDA0,CUDA1) model buffer size =  1000.00 MiB", "Meta(CUDA0,CUDA1)", "model"},
		{"llama_context: Vulkan_Host  output buffer size =     0.58 MiB", "Vulkan_Host", "output"},
		{"llm_load_tensors:        CPU buffer size =   132.81 MiB", "CPU", "model"},
		{"llama_kv_cache_init:        CPU KV buffer size =     8.00 MiB", "CPU", "KV"},
	} {
		r, ok := p.Parse(3, []byte(tc.line))
		require.True(t, ok, tc.line)
		require.Equal(t, KindBuffer, r.Kind, tc.line)
		require.Equal(t, tc.name, r.Name, tc.line)
		require.Equal(t, tc.kind, r.BufKind, tc.line)
	}
	r, ok := p.Parse(3, []byte("~llama_context: AMD Radeon RX 6800 compute buffer size is 296.0000 MiB, matches expectation of 296.0000 MiB"))
	require.True(t, ok)
	require.Equal(t, KindEcho, r.Kind)
	require.Equal(t, "AMD Radeon RX 6800", r.Name)
}
