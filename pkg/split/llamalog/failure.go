package llamalog

import (
	"bytes"
	"unicode/utf8"
)

// Failures: what llama.cpp says when an allocation, a context's creation
// or a multimodal projector's load failed (docs/formats.md, "What
// failed"). A buffer whose allocation failed was never resident; a
// context or projector whose creation failed freed what it had allocated.
//
//	llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers   context (b4881+)
//	common_init_from_params: failed to create context with model '...'                                 context (every era; MTP, draft: "failed to create MTP context")
//	llama_new_context_with_model: failed to allocate compute buffers                                  context (to b4880, no retry)
//	clip_init: failed to load model '...': ...                                                         mmproj
//	mtmd_init_from_file: error: Failed to load CLIP model from ...                                     mmproj
//	srv    load_model: failed to load multimodal model, '...'                                         mmproj
//	alloc_tensor_range: failed to allocate ROCm0 buffer of size 3196059648                            tensors (weights, KV: a buffer of tensors)
//	.../ggml-backend.cpp:179: GGML_ASSERT(buffer) failed                                               tensors (a buffer of tensors that was not allocated)
//	ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 4725934080                        compute (a reservation may be retried)
//	graph_reserve: failed to allocate compute buffers                                                  compute

// failureLen bounds the message kept to quote (a path can be long).
const failureLen = 200

// ctxCtors are the functions that build a context and return nothing when
// its compute buffers fail (to b4880).
var ctxCtors = [][]byte{[]byte("llama_new_context_with_model"), []byte("llama_init_from_model")}

// readFailure reads a line that says something failed; a line of another
// failure (a file not opened, a lock not taken) is not relevant.
func readFailure(r Record, s []byte, sc *Scratch) (Record, bool) {
	fn := []byte(nil)
	if c := bytes.Index(s, []byte(": ")); c > 0 {
		fn = lastWord(s[:c])
	}
	what, name := "", []byte(nil)
	switch {
	case bytes.Contains(s, []byte("failed to initialize the context")),
		bytes.Contains(s, []byte("failed to create")) && bytes.Contains(s, []byte("context")):
		what = "context"
	case bytes.Contains(s, []byte("failed to allocate compute buffers")):
		what = "compute"
		for _, f := range ctxCtors {
			if bytes.Equal(fn, f) {
				what = "context"
			}
		}
	case bytes.Contains(s, []byte("Failed to load CLIP model")), bytes.Contains(s, []byte("failed to load multimodal model")),
		bytes.Equal(fn, []byte("clip_init")) && bytes.Contains(s, []byte("failed to load model")):
		what = "mmproj"
	case bytes.Contains(s, aAssertBuffer):
		what = "tensors"
	case bytes.Contains(s, []byte("failed to allocate ")) && bytes.Contains(s, []byte(" buffer of size ")):
		i := bytes.Index(s, []byte("failed to allocate ")) + len("failed to allocate ")
		j := bytes.Index(s[i:], []byte(" buffer of size "))
		if j < 0 {
			return r, false
		}
		name = bytes.TrimSpace(s[i : i+j])
		switch {
		case bytes.HasPrefix(fn, []byte("alloc_tensor_range")):
			what = "tensors"
		case bytes.HasPrefix(fn, []byte("ggml_gallocr")):
			what = "compute"
		default:
			return r, false
		}
	default:
		return r, false
	}
	msg := bytes.TrimSpace(s)
	if len(msg) > failureLen {
		n := failureLen
		for n > 0 && !utf8.RuneStart(msg[n]) {
			n--
		}
		msg = msg[:n]
	}
	r.Kind, r.BufKind, r.Func, r.Name, r.Text = KindFailure, what, sc.str(fn), sc.str(name), sc.str(msg)
	return r, true
}

// lastWord is the last blank-separated word of b.
func lastWord(b []byte) []byte {
	b = bytes.TrimRight(b, " \t")
	if i := bytes.LastIndexAny(b, " \t"); i >= 0 {
		return b[i+1:]
	}
	return b
}
