package llamalog

import (
	"testing"

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
