package split

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// fixtureLines returns up to max distinct lines of the shared fixtures, so
// every fuzz target's seed corpus covers the real formats.
func fixtureLines(t testing.TB, glob string, max int) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", glob))
	seen := map[string]bool{}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if !seen[l] && len(out) < max {
				seen[l] = true
				out = append(out, l)
			}
		}
	}
	return out
}

// addLineSeeds seeds a line fuzz target with the property log's lines and
// the fixtures'.
func addLineSeeds(f *testing.F) {
	for _, l := range strings.Split(propertyLog, "\n") {
		f.Add([]byte(l))
	}
	for _, l := range fixtureLines(f, "runs/*/split.log", 3000) {
		f.Add([]byte(l))
	}
	for _, l := range fixtureLines(f, "logs/*.log", 2000) {
		f.Add([]byte(l))
	}
}

func FuzzPayloadAndParse(f *testing.F) {
	addLineSeeds(f)
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

func FuzzParseFDInfo(f *testing.F) {
	for _, s := range propertySamples() {
		for _, p := range s.Procs {
			for _, fd := range p.FDs {
				f.Add([]byte(fd.Text))
			}
		}
	}
	for _, s := range fixtureSamples(f) {
		for _, p := range s.Procs {
			for _, fd := range p.FDs {
				f.Add([]byte(fd.Text))
			}
		}
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		c, v := ParseFDInfo(text)
		if v == FDAmdgpu {
			if c.GTTBytes < 0 || c.ClientID == "" || (c.Key != "drm-total-gtt" && c.Key != "drm-memory-gtt" && c.Key != "gtt mem") {
				t.Fatalf("bad client %+v from %q", c, text)
			}
			// The per-card GTT is the headline's when the text has one
			// gtt figure (a second "gtt" key of another family can
			// only be the same memory or none).
			if c.Mem.Seen&(1<<MemGTT) != 0 && c.Mem.Bytes[MemGTT] != c.GTTBytes && c.Mem.Regions[MemGTT] == "gtt" {
				t.Fatalf("per-card GTT %d, headline %d from %q", c.Mem.Bytes[MemGTT], c.GTTBytes, text)
			}
		}
		for cl := range NumMemClasses {
			if c.Mem.Bytes[cl] < 0 || c.Mem.Bytes[cl] != 0 && c.Mem.Seen&(1<<cl) == 0 {
				t.Fatalf("bad memory %+v from %q", c.Mem, text)
			}
		}
	})
}

func fixtureSamples(t testing.TB) []Sample {
	files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "runs", "*", "gtt.txt"))
	var out []Sample
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		s, _, err := ParseSamples(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s...)
	}
	return out
}

// FuzzSamplesRoundTrip: any samples file parses without panic, and what
// FormatSamples writes parses back to the same figures.
func FuzzSamplesRoundTrip(f *testing.F) {
	var buf bytes.Buffer
	for _, s := range propertySamples() {
		FormatSamples(&buf, s)
	}
	f.Add(buf.Bytes())
	files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "runs", "*", "gtt.txt"))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		if len(b) > 64<<10 {
			b = b[:64<<10]
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ss, _, err := ParseSamples(data)
		if err != nil {
			return
		}
		var out bytes.Buffer
		for _, s := range ss {
			FormatSamples(&out, s)
		}
		again, _, err := ParseSamples(out.Bytes())
		if err != nil {
			t.Fatalf("formatted samples do not parse: %v", err)
		}
		a, b := NewFold(Options{}), NewFold(Options{})
		for _, s := range ss {
			a.AddSample(s)
		}
		for _, s := range again {
			b.AddSample(s)
		}
		ra, rb := a.Report(), b.Report()
		if val(ra.PeakGTTMiB) != val(rb.PeakGTTMiB) || val(ra.FinalGTTMiB) != val(rb.FinalGTTMiB) {
			t.Fatalf("round trip changed the figures: %v/%v vs %v/%v", val(ra.PeakGTTMiB), val(ra.FinalGTTMiB), val(rb.PeakGTTMiB), val(rb.FinalGTTMiB))
		}
	})
}

// FuzzReadLog: the block scanner and line-by-line application agree on any
// input.
func FuzzReadLog(f *testing.F) {
	f.Add([]byte(propertyLog))
	f.Add([]byte("no newline MiB"))
	f.Add([]byte("\n\n\r\n MiB \n"))
	lines := fixtureLines(f, "runs/4b/split.log", 400)
	f.Add([]byte(strings.Join(lines, "\n")))
	f.Fuzz(func(t *testing.T, data []byte) {
		a := NewFold(Options{})
		if _, err := a.ReadLog(bytes.NewReader(data), "log"); err != nil {
			t.Fatal(err)
		}
		b := NewFold(Options{})
		for i, l := range splitLines(string(data)) {
			b.AddLine(Line{Stream: "log", Seq: uint64(i + 1), Text: l})
		}
		ja, _ := JSON(a.Report())
		jb, _ := JSON(b.Report())
		if !bytes.Equal(ja, jb) {
			t.Fatalf("scanner and line-by-line differ:\n%s\n%s", ja, jb)
		}
		// Cut into small chunks (lines across them, a piece per line):
		// the same fold, state and all.
		c := NewFold(Options{})
		if _, err := c.readLog(bytes.NewReader(data), "log", 1+len(data)%97); err != nil {
			t.Fatal(err)
		}
		sa, _ := json.Marshal(a)
		sc, _ := json.Marshal(c)
		if !bytes.Equal(sa, sc) {
			t.Fatalf("chunks of %d bytes fold differently:\n%s\n%s", 1+len(data)%97, sa, sc)
		}
		// Lines applied before (every third, one by one) are skipped by
		// the feed: the same split as reading the log alone (the state may
		// keep a later -v marker: only that there is one counts).
		d := NewFold(Options{})
		for i, l := range splitLines(string(data)) {
			if i%3 == 0 {
				d.AddLine(Line{Stream: "log", Seq: uint64(i + 1), Text: l})
			}
		}
		if _, err := d.readLog(bytes.NewReader(data), "log", 1+len(data)%89); err != nil {
			t.Fatal(err)
		}
		if jd, _ := JSON(d.Report()); !bytes.Equal(ja, jd) {
			t.Fatalf("lines applied before the log fold differently:\n%s\n%s", ja, jd)
		}
	})
}

// splitLines splits like a line reader: a final newline ends the last line
// rather than starting an empty one.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
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
