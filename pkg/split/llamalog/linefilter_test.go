package llamalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"unicode/utf16"
)

// jsonForms are ways an encoder may write a line's text as a JSON string:
// encoding/json's (HTML escaped), without HTML escapes, and every
// character escaped.
func jsonForms(t *testing.T, text string) [][]byte {
	t.Helper()
	std, err := json.Marshal(text)
	if err != nil {
		t.Fatal(err)
	}
	var plain bytes.Buffer
	enc := json.NewEncoder(&plain)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(text); err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	all.WriteByte('"')
	for _, r := range string(bytes.ToValidUTF8([]byte(text), []byte("\uFFFD"))) {
		if r > 0xFFFF {
			a, b := utf16.EncodeRune(r)
			fmt.Fprintf(&all, `\u%04x\u%04X`, a, b)
			continue
		}
		fmt.Fprintf(&all, `\u%04x`, r)
	}
	all.WriteByte('"')
	return [][]byte{std, bytes.TrimSuffix(plain.Bytes(), []byte("\n")), all.Bytes()}
}

// FuzzLineFilterKeepsRelevant: whatever the text and however it is
// written as a JSON string, a line Relevant finds relevant is kept, and a
// line that is relevant only as a -v marker is kept or reported
// (SkippedMarker).
func FuzzLineFilterKeepsRelevant(f *testing.F) {
	for _, s := range []string{
		"load_tensors:        ROCm0 model buffer size =  2281.02 MiB",
		"\x1b[0mllama_kv_cache:      ROCm0 KV buffer size =   448.00 MiB",
		"llama_model_loader: enumerating backends",
		"\x1backend_ptrs.size() = 2",
		"<b>&amp;</b> assigned to device CUDA0",
		"print_info: file size   = 2.31 GiB (5.07 BPW) \u2028",
		"generated text with no anchor",
		"x\xffy MiB",
		"",
	} {
		f.Add(s)
	}
	p := MustParser()
	f.Fuzz(func(t *testing.T, text string) {
		for _, q := range jsonForms(t, text) {
			var u string
			if err := json.Unmarshal(q, &u); err != nil {
				t.Fatalf("%q: %v", q, err)
			}
			seg := q[1 : len(q)-1]
			lf := p.NewLineFilter()
			keep := lf.Keep(seg)
			if p.Relevant([]byte(u), false) && !keep {
				t.Fatalf("relevant line not kept: %q as %s", u, q)
			}
			if p.Relevant([]byte(u), true) && !keep && !lf.SkippedMarker() {
				t.Fatalf("-v marker neither kept nor reported: %q as %s", u, q)
			}
		}
	})
}

// The filter keeps what it must and little else: a -v marker is reported,
// not kept; a colour escape that spells a marker's start is neither.
func TestLineFilter(t *testing.T) {
	t.Parallel()
	p := MustParser()
	for _, c := range []struct {
		seg          string
		keep, marker bool
	}{
		{`load_tensors:        ROCm0 model buffer size =  2281.02 MiB`, true, false},
		{`\u001b[0mllama_kv_cache:      ROCm0 KV buffer size =   448.00 MiB`, true, false},
		{`generated text`, false, false},
		{`llama_model_loader: enumerating backends`, false, true},
		{`\u001backend_ptrs.size() = 2`, false, false},  // ESC then "ackend_ptrs"
		{`load_tensors: 2281.02 Mi\u0042`, true, false}, // an anchor byte escaped
	} {
		lf := p.NewLineFilter()
		if got := lf.Keep([]byte(c.seg)); got != c.keep || lf.SkippedMarker() != c.marker {
			t.Errorf("%s: keep %v marker %v, want %v %v", c.seg, got, lf.SkippedMarker(), c.keep, c.marker)
		}
	}
}
