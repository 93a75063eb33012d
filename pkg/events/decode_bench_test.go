package events_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/internal/perftest"
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

// BenchmarkDecodeLogLines decodes the log-lines events of the 4B and 27B
// fixtures (batches of up to 256 lines, colour escapes) with DecodeBytes
// and, in the same iterations, scans the same bytes with encoding/json's
// Valid (one validity pass, no allocation) as the baseline; the two swap
// order every iteration. x/baseline is decode's rate over the scan's (≥ 1:
// decoding is faster than validating), of the summed times (the garbage
// collections the decoding causes included); median-x/baseline the median
// over the iterations.
func BenchmarkDecodeLogLines(b *testing.B) {
	benchDecodeVsValid(b, events.TypeLogLines)
}

// BenchmarkDecodeSamples is BenchmarkDecodeLogLines for the fdinfo-sample
// events of the same fixtures (16 of every 25 events of the 4B run, ~3.7 KB
// each: every DRM fd's fdinfo text of the measured processes).
func BenchmarkDecodeSamples(b *testing.B) {
	benchDecodeVsValid(b, events.TypeFDInfoSample)
}

// benchDecodeVsValid decodes the fixtures' events of type typ against
// json.Valid of the same bytes, in alternating order.
func benchDecodeVsValid(b *testing.B, typ string) {
	var evs [][]byte
	n := 0
	for _, run := range []string{"4b", "27b"} {
		f, err := os.Open("../../testdata/runs/" + run + "/events.jsonl")
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			if bytes.Contains(sc.Bytes(), []byte(`"type":"`+typ+`"`)) {
				evs = append(evs, append([]byte(nil), sc.Bytes()...))
				n += len(sc.Bytes())
			}
		}
		f.Close()
	}
	if len(evs) == 0 {
		b.Fatalf("no %s events", typ)
	}
	decode := func() time.Duration {
		t0 := time.Now()
		for _, e := range evs {
			if _, err := events.DecodeBytes(e); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t0)
	}
	valid := func() time.Duration {
		b.StopTimer()
		defer b.StartTimer()
		t0 := time.Now()
		for _, e := range evs {
			if !json.Valid(e) {
				b.Fatal("invalid")
			}
		}
		return time.Since(t0)
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	var pairs perftest.Pairs
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			d := decode()
			pairs.Add(d, valid())
		} else {
			v := valid()
			pairs.Add(decode(), v)
		}
	}
	b.StopTimer()
	pairs.Report(b)
	ours, base := pairs.Totals()
	b.ReportMetric(float64(n)*float64(b.N)/ours.Seconds()/1e6, "MB/s-decode")
	b.ReportMetric(float64(n)*float64(b.N)/base.Seconds()/1e6, "MB/s-valid")
}
