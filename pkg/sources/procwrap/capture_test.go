package procwrap

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzCapture: whatever the chunking, the passthrough gets every byte, the
// captured texts are the input without its newlines, pieces respect
// max_line_bytes, and seqs count from 1 without gaps.
func FuzzCapture(f *testing.F) {
	f.Add([]byte("a\nb\r\n\nlast"), uint8(0), uint8(255))
	f.Add([]byte("0123456789\n0123\n"), uint8(2), uint8(3))
	f.Add([]byte("\n\n\n"), uint8(1), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, chunk, maxLine uint8) {
		var out bytes.Buffer
		q := newLineQueue(1<<30, 1<<20)
		c := &capture{q: q, stream: "stderr", out: &out, max: int(maxLine) + 1}
		for rest := data; len(rest) > 0; {
			n := min(int(chunk)+1, len(rest))
			w, err := c.Write(rest[:n])
			require.NoError(t, err)
			require.Equal(t, n, w)
			rest = rest[n:]
		}
		q.mu.Lock()
		c.flushLocked()
		q.mu.Unlock()
		q.close()
		require.Equal(t, string(data), out.String())

		lines, _, _ := q.take(0, time.Now())
		_, _, done := q.take(0, time.Now())
		require.True(t, done)
		var texts []string
		for i, l := range lines {
			require.Equal(t, uint64(i+1), l.Seq)
			require.Equal(t, "stderr", l.Stream)
			require.LessOrEqual(t, len(l.Text), c.max)
			texts = append(texts, l.Text)
		}
		require.Equal(t, strings.ReplaceAll(string(data), "\n", ""), strings.Join(texts, ""))
		if len(data) <= c.max {
			require.Equal(t, splitLines(data), texts)
		}
	})
}
