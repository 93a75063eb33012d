package llamalog

import (
	"bytes"
	"math"
	"regexp"
	"strconv"
	"testing"

	"github.com/gttsplit/gttsplit/internal/perftest"
)

// addLineSeeds seeds a line fuzz target with the fixtures' lines.
func addLineSeeds(f *testing.F) {
	for _, l := range perftest.FixtureLines(f, "runs/*/split.log", 3000) {
		f.Add([]byte(l))
	}
	for _, l := range perftest.FixtureLines(f, "logs/*.log", 2000) {
		f.Add([]byte(l))
	}
}

func FuzzPayloadAndParse(f *testing.F) {
	addLineSeeds(f)
	// Buffer lines in other units than MiB, and "buffer size" in other
	// words: relevant without "MiB".
	for _, s := range []string{
		"\x1b[34m0.01.000.000\x1b[0m \x1b[32mI \x1b[0mload_tensors:        ROCm0 model buffer size =     1.50 GiB\r",
		"[47161] llama_kv_cache:    Vulkan0 KV buffer size = 16384.00 KiB", "main: the buffer size is chosen by --batch-size",
	} {
		f.Add([]byte(s))
	}
	p := MustParser()
	f.Fuzz(func(t *testing.T, line []byte) {
		var s []byte
		out := Payload(line, &s)
		if len(out) > len(line) {
			t.Fatalf("payload grew: %q -> %q", line, out)
		}
		if bytes.IndexByte(out, 0x1b) >= 0 && bytes.Contains(line, []byte{0x1b, '['}) && !bytes.Contains(out, []byte{0x1b, '['}) {
			t.Fatalf("half-stripped escape in %q", out)
		}
		if bytes.HasSuffix(out, []byte{'\r'}) {
			t.Fatalf("trailing CR kept: %q", out)
		}
		if !p.Relevant(line, true) {
			return
		}
		r, ok := p.Parse(1, out)
		if !ok {
			return
		}
		for _, v := range []float64{r.MiB, r.Expect} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("bad size %v from %q", v, line)
			}
		}
		if r.Kind == KindBuffer && (r.Name == "" || r.Func == "") {
			t.Fatalf("buffer without name or func from %q", line)
		}
	})
}

// FuzzDefaultTraceMatchesRegexp holds the hand-written default trace parser
// to the regexp it stands for.
func FuzzDefaultTraceMatchesRegexp(f *testing.F) {
	for _, s := range []string{
		"hrx: host-weight pack    name=blk.0.ffn_up.weight type=q4_K bytes=1 packed=1 resident=795.8 MiB",
		"resident=5MiB", "resident=.5 MiB", "resident=5. MiB", "resident=1.2.3 MiB resident=7 MiB",
		"resident=5  MiB", "name= name=x resident=1 MiB", "name=\vx resident=1 MiB",
	} {
		f.Add([]byte(s))
	}
	tr := regexp.MustCompile(DefaultTracePattern)
	nm := regexp.MustCompile(DefaultTraceNamePattern)
	f.Fuzz(func(t *testing.T, s []byte) {
		v, ok := defaultTrace(s)
		m := tr.FindSubmatch(s)
		if ok != (m != nil) {
			if m != nil {
				if _, err := strconv.ParseFloat(string(m[1]), 64); err != nil {
					return // a number out of range: both are no figure
				}
			}
			t.Fatalf("%q: hand %v, regexp %q", s, ok, m)
		}
		if ok {
			want, _ := strconv.ParseFloat(string(m[1]), 64)
			if v != want {
				t.Fatalf("%q: hand %v, regexp %v", s, v, want)
			}
		}
		want := ""
		if n := nm.FindSubmatch(s); n != nil {
			want = string(n[1])
		}
		if got := string(traceName(s)); got != want {
			t.Fatalf("%q: name %q, regexp %q", s, got, want)
		}
	})
}
