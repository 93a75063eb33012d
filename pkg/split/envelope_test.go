package split

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPayloadStripsEveryEnvelope(t *testing.T) {
	t.Parallel()
	const want = "load_tensors:        ROCm0 model buffer size = 27022.95 MiB"
	cases := map[string]string{
		"plain":                 want,
		"timestamp":             "0.04.123.305 I " + want,
		"long minutes":          "123.04.000.001 D " + want,
		"colour":                "\x1b[34m0.04.123.305\x1b[0m \x1b[32mI \x1b[0m" + want,
		"reset of previous W":   "\x1b[0m0.04.123.305 I " + want,
		"router":                "[47161] 0.15.050.780 I " + want,
		"router padded":         "[  801] " + want,
		"legacy unix timestamp": "[1700000000] " + want,
		"progress dots":         "..........................0.01.354.206 D " + want,
		"dots no prefix":        "......" + want,
		"windows":               want + "\r",
		"crlf with newline":     want + "\r\n",
		"router then dots":      "[47161] ....0.15.050.780 I " + want,
		"legacy file prefix":    "[                llama.cpp: 1234][        llm_load_tensors] " + want,
		"byte order mark":       "\ufeff" + want,
		"byte order mark, crlf": "\ufeff0.04.123.305 I " + want + "\r\n",
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			var scratch []byte
			require.Equal(t, want, string(Payload([]byte(in), &scratch)))
		})
	}
}

func TestPayloadStripsCommonTags(t *testing.T) {
	t.Parallel()
	var s []byte
	got := Payload([]byte("0.00.197.384 I cmn  common_param: common_params_print_info: build 9890 (74976e1ae) with GNU 13.3.0 for Linux x86_64"), &s)
	require.Equal(t, "common_params_print_info: build 9890 (74976e1ae) with GNU 13.3.0 for Linux x86_64", string(got))
	// A bare word that only looks like a tag stays.
	require.Equal(t, "cmn", string(Payload([]byte("cmn"), &s)))
	require.Equal(t, "srv: hello", string(Payload([]byte("srv: hello"), &s)))
}

func TestPayloadDoesNotEatNumbersThatAreNotTimestamps(t *testing.T) {
	t.Parallel()
	var s []byte
	require.Equal(t, "1.5 is a number", string(Payload([]byte("1.5 is a number"), &s)))
	require.Equal(t, "0.04.123.305 X msg", string(Payload([]byte("0.04.123.305 X msg"), &s)))
	require.Equal(t, "[a][b] c", string(Payload([]byte("[a][b] c"), &s)), "not a file:line prefix")
}

func TestParseBuildLines(t *testing.T) {
	t.Parallel()
	p := MustParser()
	cases := map[string]string{
		"build: 4615 (bfcce4d6) with cc (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0 for x86_64-linux-gnu": "b4615 (bfcce4d6)",
		"main: build = 1500 (a30b324)": "b1500 (a30b324)",
		"common_params_print_info: build 9890 (74976e1ae) with GNU 13.3.0 for Linux x86_64": "b9890 (74976e1ae)",
		"build_info: b8700-9ee9fc04c":                        "b8700 (9ee9fc04c)",
		"build      : b8700-9ee9fc04c":                       "b8700 (9ee9fc04c)",
		"version: 4615 (bfcce4d6)":                           "b4615 (bfcce4d6)",
		"version: 0.1.2-dev (build 10524, commit 9ee9fc04c)": "b10524 (9ee9fc04c, 0.1.2-dev)",
		`{"timestamp":1707365237,"level":"INFO","function":"server_cli","line":2457,"message":"build info","build":1500,"commit":"a30b324"}`: "b1500 (a30b324)",
		`INFO [                    main] build info | tid="22442514837504" timestamp=1740782032 build=0 commit="unknown"`:                    "b0 (unknown)",
	}
	for in, want := range cases {
		var s []byte
		r, ok := p.Parse(1, Payload([]byte(in), &s))
		require.True(t, ok, in)
		require.Equal(t, KindBuild, r.Kind, in)
		require.Equal(t, want, r.Text, in)
	}
}

func TestParseBufferLineVariants(t *testing.T) {
	t.Parallel()
	p := MustParser()
	cases := []struct {
		in             string
		fn, name, kind string
		mib            float64
	}{
		{"load_tensors:  CUDA0_Split model buffer size =   248.62 MiB", "load_tensors", "CUDA0_Split", "model", 248.62},
		{"llm_load_tensors:     CUDA14 buffer size = 12698.93 MiB", "llm_load_tensors", "CUDA14", "model", 12698.93},
		{"llama_kv_cache_init:      ROCm0 KV buffer size =  4352.00 MiB", "llama_kv_cache_init", "ROCm0", "KV", 4352},
		{"init:    Vulkan0 KV buffer size = 13800.00 MiB", "init", "Vulkan0", "KV", 13800},
		{"llama_memory_recurrent:     Meta() RS buffer size =   149.62 MiB", "llama_memory_recurrent", "Meta()", "RS", 149.62},
		{"llama_new_context_with_model:  ROCm_Host  output buffer size =     0.58 MiB", "llama_new_context_with_model", "ROCm_Host", "output", 0.58},
		{"llama_context: Vulkan_Host  output buffer size =     0.58 MiB", "llama_context", "Vulkan_Host", "output", 0.58},
		{"load_tensors: RPC0[127.0.0.1:50052] model buffer size =  100.00 MiB", "load_tensors", "RPC0[127.0.0.1:50052]", "model", 100},
		{"llama_kv_cache_dsv4:      ROCm0 DSV4 idx state buffer size =     5.00 MiB", "llama_kv_cache_dsv4", "ROCm0", "DSV4 idx state", 5},
	}
	for _, c := range cases {
		var s []byte
		r, ok := p.Parse(1, Payload([]byte(c.in), &s))
		require.True(t, ok, c.in)
		require.Equal(t, KindBuffer, r.Kind, c.in)
		require.Equal(t, c.fn, r.Func, c.in)
		require.Equal(t, c.name, r.Name, c.in)
		require.Equal(t, c.kind, r.BufKind, c.in)
		require.InDelta(t, c.mib, r.MiB, 1e-9, c.in)
	}
}

func TestParseMalformedBufferLineIsCounted(t *testing.T) {
	t.Parallel()
	r := foldLog(t, verbose+load+"load_tensors:         HRX0 model buffer size =  nan MiB\nload_tensors:         HRX0 model buffer size =  1.00 MiB\n")
	require.Equal(t, 1, r.Detail.LinesSkipped)
	require.Contains(t, r.Flags, FlagLinesSkipped)
	require.InDelta(t, 1, val(r.ModelGTTMiB), 1e-9)
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	cases := map[string]int64{"0": 0, "20 MiB": 20 << 20, "155068 KiB": 155068 << 10, "4096": 4096, "1 GiB": 1 << 30, "12 kB": 12 << 10}
	for in, want := range cases {
		got, ok := ParseSize([]byte(in))
		require.True(t, ok, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "MiB", "-1", "12 TiB", "1.5 MiB", "99999999999999999999"} {
		_, ok := ParseSize([]byte(bad))
		require.False(t, ok, bad)
	}
}

func TestParseFDInfoVariants(t *testing.T) {
	t.Parallel()
	// kernels 6.5 to about 6.7: the core header, then amdgpu's own copy with
	// the fence-context client id; the first id wins.
	dup := "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1181\ndrm-driver:\tamdgpu\ndrm-client-id:\t30\ndrm-pdev:\t0000:04:00.0\npasid:\t32785\ndrm-driver:\tamdgpu\ndrm-pdev:\t0000:04:00.0\ndrm-client-id:\t18446744073709551\ndrm-memory-vram:\t155068 KiB\ndrm-memory-gtt: \t20480 KiB\n"
	c, v := ParseFDInfo([]byte(dup))
	require.Equal(t, FDAmdgpu, v)
	require.Equal(t, "30", c.ClientID)
	require.Equal(t, int64(20480<<10), c.GTTBytes)
	require.Equal(t, "drm-memory-gtt", c.Key)

	// Kernels 5.14 to 5.18: no drm- keys; the pasid keys the client.
	old := "pos:\t0\nflags:\t02100002\npdev:\t0000:04:00.0\npasid:\t32785\nvram mem:\t155068 kB\ngtt mem:\t20480 kB\ncpu mem:\t0 kB\ngfx0:\t0.00%\n"
	c, v = ParseFDInfo([]byte(old))
	require.Equal(t, FDAmdgpu, v)
	require.Equal(t, "pasid-32785", c.ClientID)
	require.Equal(t, "0000:04:00.0", c.PDev)
	require.Equal(t, int64(20480<<10), c.GTTBytes)
	require.Equal(t, "gtt mem", c.Key)

	// drm-total-gtt wins over drm-memory-gtt; drm-total-cycles is not memory.
	both := "drm-driver:\tamdgpu\ndrm-client-id:\t1\ndrm-pdev:\t0000:04:00.0\ndrm-total-cycles-gfx:\t99\ndrm-total-gtt:\t22 MiB\ndrm-memory-gtt: \t20480 KiB\n"
	c, v = ParseFDInfo([]byte(both))
	require.Equal(t, FDAmdgpu, v)
	require.Equal(t, int64(22<<20), c.GTTBytes)

	for name, in := range map[string]string{
		"dma-buf":       "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t99\nsize:\t4194304\ncount:\t1\nexp_name:\tamdgpu\n",
		"kfd":           "pos:\t0\nflags:\t02\nmnt_id:\t1\nino:\t2\n",
		"xe":            "drm-driver:\txe\ndrm-client-id:\t3\ndrm-total-gtt:\t192 KiB\n",
		"amdxdna":       "drm-driver:\tamdxdna_accel_driver\ndrm-client-id:\t76\ndrm-pdev:\t0000:c5:00.1\ndrm-total-memory:\t0\n",
		"old, no pasid": "pdev:\t0000:04:00.0\nvram mem:\t1024 kB\ngtt mem:\t2048 kB\n",
		"no id":         "drm-driver:\tamdgpu\ndrm-pdev:\t0000:04:00.0\ndrm-total-gtt:\t2 MiB\n",
		"cut":           "drm-driver:\tamdgpu\ndrm-client-id:\t1\ndrm-pdev:\t0000:04:00.0\ndrm-total-gtt:\t2",
	} {
		want := map[string]FDVerdict{"dma-buf": FDNotDRM, "kfd": FDNotDRM, "xe": FDOtherDriver, "amdxdna": FDOtherDriver,
			"old, no pasid": FDUnsupported, "no id": FDMalformed, "cut": FDMalformed}[name]
		_, v := ParseFDInfo([]byte(in))
		require.Equal(t, want, v, name)
	}
}
