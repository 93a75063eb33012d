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
// any text, ids and times; and surelyValid passes only events the SDK's
// Validate passes.
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
		if !surelyValid(ev) {
			f.Fatalf("fixture event %s is not surely valid", ev.ID())
		}
	}
	f.Add("run-1", "host", "gpu0", "load_tensors: ROCm0 model buffer size = 1.00 MiB", "\x1b[0m\"\\</>&\u2028\xff", int64(0), uint64(1))
	f.Add("r", "h", "l", "", "é", int64(1764624000123456789), uint64(1<<63))
	f.Add("r", "h", "l", "urn:x", " ", int64(0), uint64(2))
	f.Add("r", "h", "l", "application/json; charset=\"", "1a://b", int64(0), uint64(3))
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
			if surelyValid(ev) && ev.Validate() != nil {
				t.Fatalf("surelyValid passes what Validate refuses: %v", ev.Validate())
			}
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
		// Each attribute Validate looks at, set to a and to b.
		for _, v := range []string{a, b} {
			for i := range 6 {
				e := ev.Clone()
				e.SetDataContentType(event.ApplicationJSON)
				switch i {
				case 0:
					e.SetID(v)
				case 1:
					e.SetType(v)
				case 2:
					e.SetSubject(v)
				case 3:
					e.SetDataContentType(v)
				case 4:
					e.SetDataSchema(v)
				case 5:
					e.SetSource(v)
				}
				if surelyValid(e) && e.Validate() != nil {
					t.Fatalf("surelyValid passes what Validate refuses (%d %q): %v", i, v, e.Validate())
				}
			}
		}
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

// FuzzSubjectOfMatches: SubjectOf (which remembers the last subject it
// built) gives Subject of the event's kind and origin, for events of
// alternating origins.
func FuzzSubjectOfMatches(f *testing.F) {
	f.Add("run-1", "host", "gpu0", "run-2", "host", "gpu0")
	f.Add("r", "h", "l", "r", "h", "l.x")
	f.Fuzz(func(t *testing.T, r1, h1, l1, r2, h2, l2 string) {
		var evs []event.Event
		for _, o := range []Origin{{RunID: r1, Host: h1, Lane: l1}, {RunID: r2, Host: h2, Lane: l2}} {
			ev, err := NewLogLines(o, []split.Line{{Stream: "stderr", Seq: 1, Text: "x"}})
			if err != nil {
				return
			}
			evs = append(evs, ev)
		}
		for round := 0; round < 3; round++ {
			for _, ev := range evs {
				o, err := origin(ev)
				if err != nil {
					t.Fatal(err)
				}
				got, err := SubjectOf(ev)
				if want := Subject(KindLog, o.Host, o.Lane, o.RunID); err != nil || got != want {
					t.Fatalf("%+v: %q %v, want %q", o, got, err, want)
				}
			}
		}
	})
}
