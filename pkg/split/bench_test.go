package split

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
)

var (
	bigOnce sync.Once
	bigLog  []byte
)

// benchLog builds a log of at least 100 MB from the 4B fixture's lines (the
// whole run repeated: loads, contexts, trace, and thousands of -v lines), as
// a long llama-server log would look.
func benchLog(b *testing.B) []byte {
	bigOnce.Do(func() {
		src, err := os.ReadFile(filepath.Join("..", "..", "testdata", "runs", "4b", "split.log"))
		if err != nil {
			src = []byte(propertyLog)
		}
		var buf bytes.Buffer
		buf.Grow(110 << 20)
		for buf.Len() < 100<<20 {
			buf.Write(src)
		}
		bigLog = buf.Bytes()
	})
	return bigLog
}

// BenchmarkScanBaseline is the baseline: plain bufio.Scanner line scanning
// of the same bytes, doing nothing with the lines.
func BenchmarkScanBaseline(b *testing.B) {
	data := benchLog(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 1<<30)
		n := 0
		for sc.Scan() {
			n++
		}
		if n == 0 {
			b.Fatal("no lines")
		}
	}
}

// BenchmarkParseFold is gttsplit's parse+fold of the same bytes (ReadLog
// then Report).
func BenchmarkParseFold(b *testing.B) {
	data := benchLog(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f := NewFold(Options{})
		if _, err := f.ReadLog(bytes.NewReader(data), "log"); err != nil {
			b.Fatal(err)
		}
		if r := f.Report(); r.ModelGTTMiB == nil {
			b.Fatal("no model row")
		}
	}
}

// BenchmarkNaiveRegexpPerLine is the design the block scanner replaces: a
// scanner visiting every line and trying the buffer regexp on each.
func BenchmarkNaiveRegexpPerLine(b *testing.B) {
	data := benchLog(b)
	re := regexp.MustCompile(`^(~?[A-Za-z_]\w*): +(\S+) +(model|KV|RS|compute|output) buffer size = +([0-9.]+) MiB$`)
	tr := regexp.MustCompile(DefaultTracePattern)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 1<<30)
		var scratch []byte
		n := 0
		for sc.Scan() {
			p := Payload(sc.Bytes(), &scratch)
			if re.Match(p) || tr.Match(p) {
				n++
			}
		}
		if n == 0 {
			b.Fatal("nothing matched")
		}
	}
}
