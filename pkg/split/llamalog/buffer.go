package llamalog

import (
	"bytes"
	"strings"
)

// parseBuffer parses "<func>: <name> <kind words> buffer size = N MiB" and
// the ~llama_context echo; i is the index of "buffer size". It allocates
// nothing for a line whose strings sc holds (parseBufferPlain is the
// plain form FuzzParseLeavesMatchPlain holds it to).
func parseBuffer(r Record, s []byte, i int, sc *Scratch) (Record, bool) {
	// The last ": " before "buffer size" ends the function name, so a
	// wrapper's own prefix ("Mar 12 07:01:05 host python[433748]: ",
	// "llama-cpp  | ") stays out of the buffer type.
	c := lastColonBlank(s[:i])
	if c <= 0 {
		r.Kind = KindMalformed
		return r, true
	}
	r.Func = funcName(s[:c], sc)
	name, kind, ok := bufferWords(s[c+2:i], sc)
	rest := s[i+len(aBufferSize):]
	if !ok {
		r.Kind = KindMalformed
		return r, true
	}
	r.Name, r.BufKind = deviceNamed(r.Func, name, kind, sc)
	if r.Name == "params" && r.BufKind == "backend" {
		// Old CLIP loaders: "clip_model_load: params backend buffer size
		// = 595.49 MB (377 tensors)", the mmproj weights (MB is MiB).
		v, ok := mibOrMB(bytes.TrimLeft(bytes.TrimLeft(rest, " ="), " "))
		if !ok {
			r.Kind = KindMalformed
			return r, true
		}
		r.Kind, r.Text, r.MiB, r.Name, r.BufKind = KindClip, "size", v, "", ""
		return r, true
	}
	rest = bytes.TrimLeft(rest, " ")
	if !sizeFollows(rest) && !bytes.Contains(s, aMiB) {
		// "buffer size" in other words ("the buffer size is chosen
		// ..."): no size follows, none in MiB is on the line.
		return r, false
	}
	switch {
	case bytes.HasPrefix(rest, []byte("= ")) || bytes.HasPrefix(rest, []byte("=")):
		v, ok := mibValue(bytes.TrimLeft(rest[1:], " "))
		if !ok {
			r.Kind = KindMalformed
			return r, true
		}
		r.Kind, r.MiB = KindBuffer, v
		if r.BufKind == "" {
			// ≤ b3989 "llm_load_tensors: CUDA0 buffer size": a model buffer.
			r.BufKind = "model"
		}
		return r, true
	case bytes.HasPrefix(rest, []byte("is ")) || bytes.HasPrefix(rest, []byte("of ")):
		a, e, match, ok := echoFigures(rest)
		if !ok {
			r.Kind = KindMalformed
			return r, true
		}
		av, err1 := parseDecimal(a)
		ev, err2 := parseDecimal(e)
		if err1 != nil || err2 != nil {
			r.Kind = KindMalformed
			return r, true
		}
		r.Kind, r.MiB, r.Expect, r.Match = KindEcho, av, ev, match
		return r, true
	}
	r.Kind = KindMalformed
	return r, true
}

// sizeFollows reports whether rest, what follows "buffer size", starts
// with "= " and a figure: a buffer line's size, in MiB or not (a size in
// another unit is malformed, never passed over).
func sizeFollows(rest []byte) bool {
	if len(rest) == 0 || rest[0] != '=' {
		return false
	}
	rest = bytes.TrimLeft(rest[1:], " ")
	return len(rest) > 0 && (isDigit(rest[0]) || rest[0] == '.')
}

// indexBufferSize is bytes.Index(s, aBufferSize) by the anchor's rare
// 'z' rather than its first byte, a 'b' most lines hold several of.
func indexBufferSize(s []byte) int {
	const k = 9 // "buffer size"[k] == 'z'
	for off := k; off < len(s); {
		i := bytes.IndexByte(s[off:], 'z')
		if i < 0 {
			return -1
		}
		st := off + i - k
		if st+len(aBufferSize) <= len(s) && bytes.Equal(s[st:st+len(aBufferSize)], aBufferSize) {
			return st
		}
		off += i + 1
	}
	return -1
}

// The buffer type is delimited by the line's grammar: it is what the
// printf's %10s (%12s) printed between the function's ": " and the kind
// word(s) before "buffer size". llama.cpp's buffer-type names hold no
// blank (CUDA0, ROCm0_Split, CPU_Mapped, Meta(CUDA0,CUDA1),
// RPC0[10.0.0.2:50052]): the first word is the buffer type and the others
// the kind, which may be several words (DSV4 compressor state, DeepSeek4
// compressed KV). Some Vulkan builds name a buffer type by its device
// ("AMD Radeon RX 5600 XT KV buffer size"): a first word that is no
// buffer-type name, followed by words that end in one of llama.cpp's
// one-word kinds, is a device name up to that kind; one with no kind word
// at all (the model lines of builds before b3990, function
// llm_load_tensors) is a device name whole.

// oneWordKinds are the kinds llama.cpp prints as one word.
var oneWordKinds = map[string]bool{"model": true, "KV": true, "RS": true, "compute": true, "output": true, "input": true}

// bufferTypeNames are the buffer-type names with neither a device number
// nor a suffix.
var bufferTypeNames = map[string]bool{"CPU": true, "AMX": true, "Metal": true, "BLAS": true, "OpenCL": true,
	"Vulkan": true, "Kompute": true, "CANN": true, "WebGPU": true, "SYCL": true, "CUDA": true, "ROCm": true, "MUSA": true}

// isBufferTypeName reports whether w, the first word of a buffer line's
// type and kind, is a buffer-type name of llama.cpp's backends: a device
// number (CUDA0, ROCm1, Vulkan0, HRX0), a suffix after '_' (CPU_Mapped,
// CUDA_Host, ROCm0_Split), Meta(...), a remote device's [host:port], or
// one of bufferTypeNames. A device's own name starts with a word of none
// of these forms (AMD, NVIDIA, Radeon, Intel(R)).
func isBufferTypeName(w string) bool {
	for i := 0; i < len(w); i++ {
		if c := w[i]; c == '_' || c == '[' || isDigit(c) {
			return true
		}
	}
	return bufferTypeNames[w] || strings.HasPrefix(w, "Meta(")
}

// deviceNamed returns a buffer line's type and kind as the grammar
// delimits them (see above) from the first word (name) and the others
// (kind).
func deviceNamed(fn, name, kind string, sc *Scratch) (string, string) {
	if kind == "" || isBufferTypeName(name) {
		return name, kind
	}
	last := kind
	if i := strings.LastIndexByte(kind, ' '); i >= 0 {
		last = kind[i+1:]
	}
	switch {
	case oneWordKinds[last] && last != kind:
		return sc.str([]byte(name + " " + kind[:len(kind)-len(last)-1])), last
	case !oneWordKinds[last] && fn == "llm_load_tensors":
		return sc.str([]byte(name + " " + kind)), ""
	}
	return name, kind
}

// bufferWords splits the words before "buffer size" as strings.Fields
// would: the first is the name, the others joined by one blank the buffer
// type. ok is false when there is no word.
func bufferWords(b []byte, sc *Scratch) (name, kind string, ok bool) {
	if !isASCII(b) {
		// Unicode blanks: strings.Fields itself.
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return "", "", false
		}
		return f[0], strings.Join(f[1:], " "), true
	}
	i, j := nextField(b, 0)
	if i == j {
		return "", "", false
	}
	name = sc.str(b[i:j])
	from, to, n := 0, 0, 0 // the span of the other words, and their count
	single := true         // each separated from the next by one blank
	for k := j; ; {
		a, e := nextField(b, k)
		if a == e {
			break
		}
		if n == 0 {
			from = a
		} else if a != to+1 || b[to] != ' ' {
			single = false
		}
		to, k = e, e
		n++
	}
	switch {
	case n == 0:
	case single:
		kind = sc.str(b[from:to])
	default:
		var buf []byte
		if sc != nil {
			buf = sc.join[:0]
		}
		for k := from; ; {
			a, e := nextField(b, k)
			if a == e {
				break
			}
			if len(buf) > 0 {
				buf = append(buf, ' ')
			}
			buf = append(buf, b[a:e]...)
			k = e
		}
		if sc != nil {
			sc.join = buf
		}
		kind = sc.str(buf)
	}
	return name, kind, true
}

// echoFigures parses the rest of an echo line by hand, as the regexp
// `^(?:is|of) +([0-9.]+) MiB, (does not )?match(?:es)? expectation of
// +([0-9.]+) MiB` would (FuzzParseLeavesMatchPlain): the actual and the
// expected figure, and whether they match.
func echoFigures(b []byte) (actual, expect []byte, match, ok bool) {
	if len(b) < 2 || !(b[0] == 'i' && b[1] == 's' || b[0] == 'o' && b[1] == 'f') {
		return nil, nil, false, false
	}
	b = b[2:]
	figure := func() []byte {
		i := 0
		for i < len(b) && b[i] == ' ' {
			i++
		}
		if i == 0 {
			return nil
		}
		j := i
		for j < len(b) && (isDigit(b[j]) || b[j] == '.') {
			j++
		}
		if j == i || !bytes.HasPrefix(b[j:], []byte(" MiB")) {
			return nil
		}
		f := b[i:j]
		b = b[j+len(" MiB"):]
		return f
	}
	if actual = figure(); actual == nil || !bytes.HasPrefix(b, []byte(", ")) {
		return nil, nil, false, false
	}
	b = b[2:]
	match = !bytes.HasPrefix(b, []byte("does not "))
	if !match {
		b = b[len("does not "):]
	}
	if !bytes.HasPrefix(b, []byte("match")) {
		return nil, nil, false, false
	}
	b = b[len("match"):]
	if bytes.HasPrefix(b, []byte("es")) {
		b = b[2:]
	}
	if !bytes.HasPrefix(b, []byte(" expectation of")) {
		return nil, nil, false, false
	}
	b = b[len(" expectation of"):]
	if expect = figure(); expect == nil {
		return nil, nil, false, false
	}
	return actual, expect, match, true
}

// mibValue parses "N MiB" at the start of b.
func mibValue(b []byte) (float64, bool) {
	j := 0
	for j < len(b) && (isDigit(b[j]) || b[j] == '.') {
		j++
	}
	if j == 0 || !bytes.HasPrefix(bytes.TrimLeft(b[j:], " "), aMiB) {
		return 0, false
	}
	v, err := parseDecimal(b[:j])
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// funcName is the C function in front of a line's ": ": the identifier
// (with a destructor's "~") that ends the last blank-separated word, so
// that a wrapper's prefix and text glued to the line ("the end.</s>" of
// generated tokens printed without a newline) go. A word that ends in no
// identifier is kept whole.
func funcName(b []byte, sc *Scratch) string {
	e := len(b)
	for e > 0 && b[e-1] == ' ' {
		e--
	}
	j := e
	for j > 0 && b[j-1] != ' ' && b[j-1] != '\t' {
		j--
	}
	k := e
	for k > j && isIdentByte(b[k-1]) {
		k--
	}
	for k < e && isDigit(b[k]) {
		k++ // an identifier starts with no digit
	}
	if k > j && b[k-1] == '~' {
		k--
	}
	if id := b[k:e]; len(id) > 1 || len(id) == 1 && id[0] != '~' {
		j = k // an identifier, not nothing or a lone "~"
	}
	return sc.str(b[j:e])
}

func isIdentByte(c byte) bool {
	return c == '_' || isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// lastColonBlank is bytes.LastIndex(b, []byte(": ")) by a loop back from
// the end (the library's is a Rabin-Karp search for a two-byte separator).
func lastColonBlank(b []byte) int {
	for i := len(b) - 2; i >= 0; i-- {
		if b[i] == ':' && b[i+1] == ' ' {
			return i
		}
	}
	return -1
}

// mibOrMB parses "N MiB" or "N MB" at the start of b.
func mibOrMB(b []byte) (float64, bool) {
	j := 0
	for j < len(b) && (isDigit(b[j]) || b[j] == '.') {
		j++
	}
	rest := bytes.TrimLeft(b[j:], " ")
	if j == 0 || !(bytes.HasPrefix(rest, aMiB) || bytes.HasPrefix(rest, []byte("MB"))) {
		return 0, false
	}
	v, err := parseDecimal(b[:j])
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}
