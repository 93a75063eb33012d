package llamalog

import (
	"bytes"
	"fmt"
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

func TestRouterPort(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int{
		"[47161] 0.00.483.095 I load_tensors: x":    47161,
		"\x1b[0m[  801] load_tensors: x":            801,
		"[1700000000] llm_load_tensors: x":          0, // legacy unix-seconds time stamp
		"load_tensors: [47161] x":                   0,
		"[0m[47161] 0.00.483.095 I load_tensors: x": 47161,
		// Behind a supervisor's prefix.
		"Mar 12 07:01:05 strix1 llama-server[433748]: [47161] 0.00.483.095 I load_tensors: x": 47161,
		"Mar 12 07:01:05 strix1 llama-server: [ 8080] load_tensors: x":                        8080,
		"llama-server-1  | [47161] 0.00.483.095 I load_tensors: x":                            47161,
		"2026-03-12T07:01:05.123456789Z [47161] load_tensors: x":                              47161,
		"[pod/llama-server-0/server] [47161] load_tensors: x":                                 47161,
		"llama-server-1  | load_tensors: [47161] x":                                           0,
		"Mar 12 07:01:05 strix1 llama-server[4337]: load_tensors: x":                          0,
		"srv  load_model: [47161] x":                                                          0,
		"2026-03-12T07:01:05Z [1700000000] llm_load_tensors: x":                               0,
	} {
		require.Equal(t, want, RouterPort([]byte(in)), in)
	}
}

// wrappers are the prefixes a supervisor writes in front of every line of
// a process's output (the split package folds real logs behind each).
var wrappers = map[string]string{
	"journald": "Mar 12 07:01:05 strix1 llama-server[433748]: ",
	"compose":  "llama-server-1  | ",
	"runtime":  "2026-03-12T07:01:05.123456789Z ",
	"kubectl":  "[pod/llama-server-0/server] ",
}

// FuzzRouterPort holds RouterPort to a port it can name: 0, or the number
// of a "[port] " in the line; and a port at a bare line's start is found
// behind each wrapper's prefix.
func FuzzRouterPort(f *testing.F) {
	for _, s := range []string{"[47161] 0.00.483.095 I load_tensors: x", "]", "[]", " ]", "[1]", "a [1] x", "x: [ 1] ", "\x1b[0m[  801] x", "[0m[1] x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := RouterPort(b)
		if p < 0 || p > 99999 {
			t.Fatalf("%q: port %d", b, p)
		}
		if p > 0 && !bytes.Contains(b, []byte(fmt.Sprintf("%d] ", p))) {
			t.Fatalf("%q: port %d is not in the line", b, p)
		}
		if bytes.IndexByte(b, '\n') >= 0 || p == 0 || RouterPort(b) != p {
			return
		}
		for name, prefix := range wrappers {
			if len(prefix)+len(b) > wrapperSpan {
				continue
			}
			// A port at the bare line's start is found behind the prefix.
			if got := RouterPort(append([]byte(prefix), b...)); got != p && portAt(b, skipColour(b, 0)) == p {
				t.Fatalf("%q behind %s: port %d, bare %d", b, name, got, p)
			}
		}
	})
}

// TestParseBufferLineOtherUnits: llama.cpp prints every buffer size in MiB
// (bytes/1024/1024, %8.2f). A buffer line with another unit (a fork's, or
// a log someone edited) is not a size gttsplit can trust: it is relevant
// and malformed (counted and flagged), never dropped unseen because it
// lacks "MiB". A line that merely says "buffer size" with no "= N" after
// it is no buffer line.
func TestParseBufferLineOtherUnits(t *testing.T) {
	t.Parallel()
	p := MustParser()
	for _, line := range []string{
		"load_tensors:        ROCm0 model buffer size =     1.50 GiB",
		"load_tensors:        ROCm0 model buffer size =  1000.00 MB",
		"llama_kv_cache:    Vulkan0 KV buffer size = 16384.00 KiB",
		"llama_kv_cache:      CUDA0 KV buffer size = 16384.00 kB",
		"sched_reserve:      ROCm1 compute buffer size =   164.00",
		"llama_context:  ROCm_Host  output buffer size =     0.58 B",
		"0.01.000.000 I load_tensors:   CPU_Mapped model buffer size =     1.00 GB\r",
		"\x1b[34m0.01.000.000\x1b[0m \x1b[32mI \x1b[0mllama_memory_recurrent:      ROCm0 RS buffer size =    38.00 MB",
	} {
		require.True(t, p.Relevant([]byte(line), false), "relevant: %q", line)
		var s []byte
		r, ok := p.Parse(1, Payload([]byte(line), &s))
		require.True(t, ok, line)
		require.Equal(t, KindMalformed, r.Kind, line)
	}
	for _, line := range []string{
		"ggml_opencl: max buffer size is device dependent",
		"main: the buffer size can be set with --batch-size",
	} {
		r, ok := p.Parse(1, []byte(line))
		require.False(t, ok, "%q: %+v", line, r)
	}
}

// TestFunctionAfterGluedText: text printed on stdout without a newline
// (generated tokens, a "> " prompt) can share a line with the log line
// that follows it; the line's function is the C identifier in front of
// its ": ", not the text glued to it.
func TestFunctionAfterGluedText(t *testing.T) {
	t.Parallel()
	p := MustParser()
	for line, fn := range map[string]string{
		"> Hello there.load_tensors:      Vulkan0 model buffer size =   400.00 MiB":                                                "load_tensors",
		"the end.</s>llama_memory_recurrent:      ROCm0 KV buffer size =    38.00 MiB":                                             "llama_memory_recurrent",
		"42!~llama_context:      ROCm0 compute buffer size is 318.5000 MiB, matches expectation of 318.5000 MiB":                   "~llama_context",
		"ok.clip_model_load: loaded meta data with 18 key-value pairs and 377 tensors from mmproj.gguf (version GGUF V3 (latest))": "clip_model_load",
		"Mar 12 07:01:05 host llama-server[4337]: load_tensors:        ROCm0 model buffer size =  1000.00 MiB":                     "load_tensors",
		"llama-cpp  | sched_reserve:      ROCm0 compute buffer size =    40.00 MiB":                                                "sched_reserve",
	} {
		var s []byte
		r, ok := p.Parse(1, Payload([]byte(line), &s))
		require.True(t, ok, line)
		require.Equal(t, fn, r.Func, line)
	}
}
