package events_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/events"
)

// seeds returns the wire form of every example plus a few near misses.
func seeds(f *testing.F) [][]byte {
	var out [][]byte
	for _, ev := range exampleEvents(f) {
		b, err := events.Marshal(ev)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	out = append(out,
		[]byte(`{"specversion":"1.0","data_base64":1}`),
		[]byte(`{"specversion":"1.0","id":"r/fdinfo/1","source":"urn:gttsplit:collector:h","type":"io.gttsplit.fdinfo.sample.v2","runid":"r","host":"h","lane":"","subject":"r","data":{}}`),
		[]byte(`{}`),
	)
	return out
}

// FuzzDecodeBytes asserts that decoding never panics, that errors are typed,
// and that an accepted event re-encodes to bytes that decode to the same id.
func FuzzDecodeBytes(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := events.DecodeBytes(b)
		if err != nil {
			if !errors.Is(err, events.ErrInvalid) && !errors.Is(err, events.ErrUnknownType) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		ev, err := events.Unmarshal(b)
		if err != nil {
			t.Fatalf("DecodeBytes accepted what Unmarshal rejects: %v", err)
		}
		wire, err := events.Marshal(ev)
		if err != nil {
			t.Fatalf("re-encode accepted event: %v", err)
		}
		if bytes.IndexByte(wire, '\n') >= 0 {
			t.Fatalf("wire form spans lines: %q", wire)
		}
		d2, err := events.DecodeBytes(wire)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if d2.ID != d.ID || d2.Type != d.Type || d2.Origin != d.Origin {
			t.Fatalf("round trip changed identity: %+v vs %+v", d, d2)
		}
		if _, err := events.SubjectOf(ev); err != nil {
			t.Fatalf("subject of a decoded event: %v", err)
		}
	})
}

// FuzzReader asserts that a recorded stream never panics the reader and
// that every non-blank line is either an event or a counted skip.
func FuzzReader(f *testing.F) {
	s := seeds(f)
	var all [][]byte
	for _, b := range s {
		f.Add(b)
		all = append(all, b)
	}
	f.Add(bytes.Join(all, []byte("\n")))
	f.Add(bytes.Join(all, []byte("\r\n\n")))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := events.NewReader(bytes.NewReader(b))
		n := 0
		last := 0
		for r.Next() {
			n++
			if r.Line() <= last {
				t.Fatalf("line numbers not increasing: %d after %d", r.Line(), last)
			}
			last = r.Line()
		}
		if r.Err() != nil {
			t.Fatalf("read error from memory: %v", r.Err())
		}
		nonBlank := 0
		for _, l := range strings.Split(string(b), "\n") {
			if len(strings.TrimSpace(l)) > 0 {
				nonBlank++
			}
		}
		if n+r.Skipped() != nonBlank {
			t.Fatalf("%d events + %d skipped != %d non-blank lines", n, r.Skipped(), nonBlank)
		}
	})
}
