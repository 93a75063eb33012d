package events

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// FuzzMarshalMatchesSDK: marshalJSON writes the bytes the SDK's
// MarshalJSON writes, for the fixtures' events and for log-lines events of
// any text, ids and times.
func FuzzMarshalMatchesSDK(f *testing.F) {
	for _, b := range fixtureEvents(f) {
		ev, err := Unmarshal(b)
		if err != nil {
			f.Fatal(err)
		}
		want, err := ev.MarshalJSON()
		if err != nil {
			f.Fatal(err)
		}
		got, err := marshalJSON(ev)
		if err != nil || !bytes.Equal(got, want) {
			f.Fatalf("fixture event %s: %v\n%s\n%s", ev.ID(), err, got, want)
		}
	}
	f.Add("run-1", "host", "gpu0", "load_tensors: ROCm0 model buffer size = 1.00 MiB", "\x1b[0m\"\\</>&\u2028\xff", int64(0), uint64(1))
	f.Add("r", "h", "l", "", "é", int64(1764624000123456789), uint64(1<<63))
	f.Fuzz(func(t *testing.T, run, host, lane, a, b string, ns int64, seq uint64) {
		var tm time.Time
		if ns != 0 {
			tm = time.Unix(0, ns).UTC()
		}
		ev, err := NewLogLines(Origin{RunID: run, Host: host, Lane: lane}, []split.Line{
			{Stream: "stderr", Seq: seq, Text: a, Time: tm},
			{Stream: "stderr", Seq: seq + 1, Text: b},
		})
		if err != nil {
			return
		}
		if ns != 0 {
			ev.SetTime(tm)
		}
		check := func(ev event.Event) {
			want, werr := ev.MarshalJSON()
			got, gerr := marshalJSON(ev)
			if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
				t.Fatalf("marshalJSON differs from the SDK:\n%s (%v)\n%s (%v)", got, gerr, want, werr)
			}
		}
		check(ev)
		ev.SetSubject(a)
		ev.SetExtension("zeta", b)
		ev.SetExtension("alpha", 7)
		check(ev)
		ev.SetDataContentType("text/plain")
		check(ev)
	})
}

// Token's shortcut gives what the full mapping gives.
func TestPlainTokenIsToken(t *testing.T) {
	t.Parallel()
	for c := range 256 {
		for _, s := range []string{string(rune(c)), "a" + string([]byte{byte(c)}) + "b", strings.Repeat("x", MaxTokenBytes-1) + string([]byte{byte(c)})} {
			if plainToken(s) && token(s) != s {
				t.Errorf("plainToken(%q) but token(%q) = %q", s, s, token(s))
			}
		}
	}
	if plainToken(strings.Repeat("x", MaxTokenBytes+1)) {
		t.Error("a long string is plain")
	}
}
