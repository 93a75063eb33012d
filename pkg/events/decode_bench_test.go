package events_test

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/events"
)

// loadLines reads the 27B fixture stream: log batches of 256 lines with
// colour escapes, the hard case for a JSON string decoder.
func loadLines(b *testing.B) [][]byte {
	f, err := os.Open("../../testdata/runs/27b/events.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var out [][]byte
	for sc.Scan() {
		out = append(out, append([]byte(nil), sc.Bytes()...))
	}
	return out
}

// BenchmarkDecodeBytes is what the aggregator pays per event: parse,
// validate and decode a structured event.
func BenchmarkDecodeBytes(b *testing.B) {
	lines := loadLines(b)
	var n int
	for _, l := range lines {
		n += len(l)
	}
	b.SetBytes(int64(n))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, l := range lines {
			if _, err := events.DecodeBytes(l); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(len(lines)), "events/op")
}

// BenchmarkJSONValidBaseline is the baseline: encoding/json's validity scan
// of the same bytes, one pass and no allocation.
func BenchmarkJSONValidBaseline(b *testing.B) {
	lines := loadLines(b)
	var n int
	for _, l := range lines {
		n += len(l)
	}
	b.SetBytes(int64(n))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, l := range lines {
			if !json.Valid(l) {
				b.Fatal("invalid")
			}
		}
	}
}
