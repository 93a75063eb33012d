package split

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gttsplit/gttsplit/internal/perftest"
	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

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
	lines := perftest.FixtureLines(f, "runs/4b/split.log", 400)
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
		// Read into the chunk buffer (a reader without WriteTo), and
		// handed over in writes of 1 to 41 bytes, lines across them: the
		// same fold.
		for _, r := range []io.Reader{struct{ io.Reader }{bytes.NewReader(data)}, &smallWrites{data}, strings.NewReader(string(data))} {
			e := NewFold(Options{})
			if _, err := e.readLog(r, "log", 1+len(data)%83); err != nil {
				t.Fatal(err)
			}
			if se, _ := json.Marshal(e); !bytes.Equal(sa, se) {
				t.Fatalf("%T folds differently:\n%s\n%s", r, sa, se)
			}
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

// smallWrites hands its bytes over (WriteTo) in writes of 1 to 41 bytes.
type smallWrites struct{ b []byte }

func (s *smallWrites) Read([]byte) (int, error) { panic("read through WriteTo") }

func (s *smallWrites) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for i := 0; len(s.b) > 0; i++ {
		k := min(len(s.b), 1+i*7%41)
		m, err := w.Write(s.b[:k])
		n += int64(m)
		if err != nil {
			return n, err
		}
		s.b = s.b[k:]
	}
	return n, nil
}

// splitLines splits like a line reader: a final newline ends the last line
// rather than starting an empty one.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// FuzzApplyParsedEqualsApply: pieces whose candidate lines ParsePiece
// parsed ahead fold as Apply folds them, state and all, with the default
// trace grammar and with a custom one (whose lines the scan is not sure
// of), with lines applied before (skipped), and with the fold's look for
// -v markers ending within a piece.
func FuzzApplyParsedEqualsApply(f *testing.F) {
	f.Add([]byte(propertyLog), uint8(0))
	f.Add([]byte("no newline MiB"), uint8(1))
	f.Add([]byte("load_tensors: loading model tensors\nw: weight x=3 MiB name=a\n"), uint8(2))
	lines := perftest.FixtureLines(f, "runs/4b/split.log", 400)
	f.Add([]byte(strings.Join(lines, "\n")), uint8(3))
	custom, err := llamalog.NewParser(`w(?:eight)? x=([0-9.]+)`, `name=(\w+)`)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte, how uint8) {
		var p *llamalog.Parser
		if how&1 != 0 {
			p = custom
		}
		size := 1 + int(how>>2)*7
		fold := func(parsed bool) []byte {
			fo := NewFold(Options{Parser: p})
			if how&2 != 0 {
				for i, l := range splitLines(string(data)) {
					if i%3 == 0 {
						fo.AddLine(Line{Stream: "log", Seq: uint64(i + 1), Text: l})
					}
				}
			}
			feed := fo.NewLogFeed("log")
			var pc llamalog.Piece
			var pr PieceRecords
			rest := data
			for len(rest) > 0 {
				// Whole lines, at least size bytes unless the log ends.
				n := len(rest)
				if i := bytes.IndexByte(rest[min(size, len(rest))-1:], '\n'); i >= 0 {
					n = min(size, len(rest)) + i
				}
				piece := rest[:n]
				rest = rest[n:]
				feed.Parser().ScanPiece(piece, feed.WantDebug(), &pc)
				if parsed {
					ParsePiece(feed.Parser(), piece, &pc, &pr)
					feed.ApplyParsed(piece, &pc, &pr)
				} else {
					feed.Apply(piece, &pc)
				}
			}
			feed.Close()
			j, _ := json.Marshal(fo)
			return j
		}
		if a, b := fold(false), fold(true); !bytes.Equal(a, b) {
			t.Fatalf("parsed ahead folds differently:\n%s\n%s", a, b)
		}
	})
}
