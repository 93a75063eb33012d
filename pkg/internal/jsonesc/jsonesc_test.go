package jsonesc

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeMatchesJSON: an escape Decode reads means what encoding/json
// reads from it (a surrogate alone is U+FFFD there).
func FuzzDecodeMatchesJSON(f *testing.F) {
	for _, s := range []string{`\n`, `\"`, `\/`, `\u001b`, `\u00e9`, `\uD83D`, `\x`, `\u12`, `\uzzzz`, `\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, seg []byte) {
		r, n, ok := Decode(seg)
		var s string
		err := json.Unmarshal(append(append([]byte{'"'}, seg[:min(len(seg), max(n, 2))]...), '"'), &s)
		if !ok {
			if n != 0 {
				t.Fatalf("%q: not ok but length %d", seg, n)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: Decode reads %q, encoding/json refuses: %v", seg, r, err)
		}
		want := string(r)
		if IsSurrogate(r) {
			want = "\uFFFD"
		}
		if s != want {
			t.Fatalf("%q: Decode %q, encoding/json %q", seg, r, s)
		}
	})
}
