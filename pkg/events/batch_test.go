package events_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// longOrigin is an origin whose attributes are as long as they may be.
var longOrigin = events.Origin{RunID: strings.Repeat("r", 128), Host: strings.Repeat("h", 253), Lane: strings.Repeat("l", 64)}

// TestLogLinesEventsFitTheBroker: however the lines escape, no event is
// over MaxEventBytes as Marshal encodes it, the lines stay in order and
// complete, and a line of sources.MaxLineBytes whose every byte takes a
// six-byte escape still fits an event of its own. Before, a batch's
// size was bounded by its line count alone: 256 pieces of a giant line
// made events of up to 256 MiB.
func TestLogLinesEventsFitTheBroker(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 7, 14, 3, 11, 123456789, time.UTC)
	worst := strings.Repeat("\x01", sources.MaxLineBytes) // \u0001 each
	invalid := strings.Repeat("\xff", sources.MaxLineBytes)
	quotes := strings.Repeat(`"\`, sources.MaxLineBytes/2)
	var lines []split.Line
	for i, text := range []string{"plain", worst, invalid, quotes, quotes, "tail", strings.Repeat("y", sources.MaxLineBytes)} {
		for range 3 {
			lines = append(lines, split.Line{Stream: "stderr", Seq: uint64(len(lines) + 1), Text: text, Time: t0.Add(time.Duration(i))})
		}
	}
	evs, err := events.LogLinesEvents(longOrigin, lines, 256)
	require.NoError(t, err)
	require.Greater(t, len(evs), 10, "split by size, not by count")
	var got []split.Line
	for _, ev := range evs {
		b, err := events.Marshal(ev)
		require.NoError(t, err)
		require.LessOrEqual(t, len(b), events.MaxEventBytes, ev.ID())
		d, err := events.DecodeBytes(b)
		require.NoError(t, err)
		got = append(got, d.Lines...)
	}
	require.Len(t, got, len(lines))
	for i := range lines {
		require.Equal(t, lines[i].Seq, got[i].Seq)
		if lines[i].Text != invalid {
			require.Equal(t, lines[i].Text, got[i].Text, "line %d", i)
		}
	}

	// Plain lines go by the line count as before.
	var small []split.Line
	for i := range 600 {
		small = append(small, split.Line{Stream: "stdout", Seq: uint64(i + 1), Text: "llama_context: n_ctx = 256"})
	}
	evs, err = events.LogLinesEvents(longOrigin, small, 256)
	require.NoError(t, err)
	require.Len(t, evs, 3)

	// A line no source emits (longer than sources.MaxLineBytes and all
	// escapes) is refused, not sent over the limit.
	huge := []split.Line{{Stream: "stderr", Seq: 1, Text: strings.Repeat("\x01", events.MaxEventBytes/5)}}
	_, err = events.LogLinesEvents(longOrigin, huge, 256)
	require.ErrorIs(t, err, events.ErrInvalid)
	require.True(t, bytes.Contains([]byte(err.Error()), []byte("over")))
}
