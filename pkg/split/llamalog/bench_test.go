package llamalog

import (
	"testing"

	"github.com/gttsplit/gttsplit/internal/perftest"
)

// BenchmarkScanAnchorsPlain and BenchmarkScanAnchors compare the plain
// anchor search (each anchor in turn) with the grouped one, on the
// server log.
func BenchmarkScanAnchorsPlain(b *testing.B) {
	benchScanAnchors(b, func(c []byte, s []int) []int { return anchorLinesPlain(pieceAnchors, c, s) })
}

// BenchmarkScanAnchors is the grouped search.
func BenchmarkScanAnchors(b *testing.B) { benchScanAnchors(b, scanAnchorLines) }

func benchScanAnchors(b *testing.B, scan func([]byte, []int) []int) {
	data, err := perftest.ServerLog(100 << 20)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	var starts []int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for off := 0; off < len(data); off += benchChunk {
			starts = scan(data[off:min(off+benchChunk, len(data))], starts[:0])
		}
	}
}

// benchChunk is how much of a log the fold's ReadLog scans at once.
const benchChunk = 1 << 18
