package aggregator

import (
	"testing"

	"github.com/gttsplit/gttsplit/pkg/events"
)

func BenchmarkZZDecodeFold(b *testing.B) {
	fxs := []fixture{loadFixture(b, fixture4B), loadFixture(b, fixture27B)}
	runs := genRuns(b, 200, fxs...)
	ws := interleave(runs)
	opts := foldOptions(b)
	b.ResetTimer()
	b.ReportAllocs()
	n := 0
	for i := 0; i < b.N; i++ {
		st := map[string]*RunState{}
		for _, w := range ws {
			d, err := events.DecodeBytes(w.Data)
			if err != nil {
				b.Fatal(err)
			}
			s := st[d.Origin.RunID]
			if s == nil {
				s = NewRunState(d.Origin, opts)
				st[d.Origin.RunID] = s
			}
			ApplyTo(s, d)
			n++
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/event")
}
func BenchmarkZZDecode(b *testing.B) {
	fxs := []fixture{loadFixture(b, fixture4B), loadFixture(b, fixture27B)}
	runs := genRuns(b, 200, fxs...)
	ws := interleave(runs)
	b.ResetTimer()
	b.ReportAllocs()
	n := 0
	for i := 0; i < b.N; i++ {
		for _, w := range ws {
			_, err := events.DecodeBytes(w.Data)
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/event")
}
