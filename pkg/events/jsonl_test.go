package events_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/stretchr/testify/require"
)

func readAll(t *testing.T, r *events.Reader) []event.Event {
	t.Helper()
	var out []event.Event
	for r.Next() {
		out = append(out, r.Event())
	}
	require.NoError(t, r.Err())
	return out
}

func TestWriterReader(t *testing.T) {
	t.Parallel()
	evs := exampleEvents(t)
	var buf bytes.Buffer
	w := events.NewWriter(&buf)
	for _, ev := range evs {
		require.NoError(t, w.Write(ev))
	}
	require.NoError(t, w.Close())
	require.Error(t, w.Write(evs[0]), "write after close")
	require.Equal(t, len(evs), strings.Count(buf.String(), "\n"), "one line per event")

	r := events.NewReader(&buf)
	got := readAll(t, r)
	require.Len(t, got, len(evs))
	require.Zero(t, r.Skipped())
	for i := range evs {
		a, _ := events.Marshal(evs[i])
		b, _ := events.Marshal(got[i])
		require.Equal(t, string(a), string(b))
	}
}

// TestReaderSkipsBadLines mixes valid events with every kind of bad line;
// the reader yields the valid ones, and counts and reports the others with
// their line numbers.
func TestReaderSkipsBadLines(t *testing.T) {
	t.Parallel()
	evs := exampleEvents(t)
	line := func(ev event.Event) string {
		b, err := events.Marshal(ev)
		require.NoError(t, err)
		return string(b)
	}
	long := `{"x":"` + strings.Repeat("a", events.MaxLineBytes) + `"}`
	input := strings.Join([]string{
		line(evs[0]),                            // 1
		"not json at all",                       // 2 bad
		"",                                      // 3 blank
		`{"specversion":"1.0"}`,                 // 4 bad: no id/source/type
		line(evs[1]) + "\r",                     // 5 CRLF
		long,                                    // 6 bad: too long
		`{"specversion":"1.0","data_base64":1}`, // 7 bad: would panic the SDK
		line(evs[2]),                            // 8
		line(evs[3])[:40],                       // 9 bad: torn
		line(evs[4]),                            // 10, no final newline
	}, "\n")
	r := events.NewReader(strings.NewReader(input))
	var reported []int
	r.OnError = func(le *events.LineError) { reported = append(reported, le.Line) }
	var lines []int
	var types []string
	for r.Next() {
		lines = append(lines, r.Line())
		types = append(types, r.Event().Type())
	}
	require.NoError(t, r.Err())
	require.Equal(t, []int{1, 5, 8, 10}, lines)
	require.Equal(t, []string{evs[0].Type(), evs[1].Type(), evs[2].Type(), evs[4].Type()}, types)
	require.Equal(t, 5, r.Skipped())
	require.Equal(t, []int{2, 4, 6, 7, 9}, reported)
	errs := r.Errors()
	require.Len(t, errs, 5)
	require.ErrorIs(t, errs[2], events.ErrLineTooLong)
	for _, i := range []int{0, 1, 3, 4} {
		require.ErrorIs(t, errs[i], events.ErrInvalid)
	}
	require.Contains(t, errs[0].Error(), "line 2:")
}

// TestOpenWriterRepairsTornTail appends to a file whose last line was torn
// by a crash: the torn line stays one bad line, and nothing after it is
// lost.
func TestOpenWriterRepairsTornTail(t *testing.T) {
	t.Parallel()
	evs := exampleEvents(t)
	path := filepath.Join(t.TempDir(), "events.jsonl")
	first, err := events.Marshal(evs[0])
	require.NoError(t, err)
	torn, err := events.Marshal(evs[1])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, append(append(first, '\n'), torn[:30]...), 0o644))

	w, err := events.OpenWriter(path)
	require.NoError(t, err)
	require.NoError(t, w.Write(evs[2]))
	require.NoError(t, w.Write(evs[3]))
	require.NoError(t, w.Sync())
	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "Close is idempotent")

	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r := events.NewReader(f)
	got := readAll(t, r)
	require.Len(t, got, 3)
	require.Equal(t, 1, r.Skipped())
	require.Equal(t, 2, r.Errors()[0].Line)
	require.Equal(t, evs[3].ID(), got[2].ID())
}

// TestWriterConcurrent writes from several goroutines: every line is one
// whole event.
func TestWriterConcurrent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	w, err := events.OpenWriter(path)
	require.NoError(t, err)
	const writers, each = 4, 50
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				seq := uint64(g*each + i)
				ev, err := events.NewLogLines(origin, []split.Line{{Stream: "stderr", Seq: seq, Text: strings.Repeat("x", 1000)}})
				if err == nil {
					err = w.Write(ev)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, w.Close())
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r := events.NewReader(f)
	got := readAll(t, r)
	require.Len(t, got, writers*each)
	require.Zero(t, r.Skipped())
	ids := map[string]bool{}
	for _, ev := range got {
		ids[ev.ID()] = true
	}
	require.Len(t, ids, writers*each)
}

// TestReaderKeepsEventsIntact reads many events and checks the earlier ones
// were not overwritten by later reads.
func TestReaderKeepsEventsIntact(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := events.NewWriter(&buf)
	for i := range 20 {
		ev, err := events.NewLogLines(origin, []split.Line{{Stream: "stdout", Seq: uint64(i), Text: strings.Repeat(string(rune('a'+i)), 100)}})
		require.NoError(t, err)
		require.NoError(t, w.Write(ev))
	}
	got := readAll(t, events.NewReader(&buf))
	require.Len(t, got, 20)
	for i, ev := range got {
		d, err := events.Decode(ev)
		require.NoError(t, err)
		require.Equal(t, strings.Repeat(string(rune('a'+i)), 100), d.Lines[0].Text)
	}
}
