package events

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// The one-pass decoder takes every log-lines event of the fixtures and
// gives what the general path gives; it leaves every other event alone.
func TestDecodeOnePassTakesLogLines(t *testing.T) {
	t.Parallel()
	taken := 0
	for _, b := range fixtureEvents(t) {
		want, err := slowDecode(b)
		require.NoError(t, err)
		got, ok := decodeOnePass(b)
		if want.Type != TypeLogLines {
			require.False(t, ok, "a %s event", want.Type)
			continue
		}
		require.True(t, ok, "a log-lines event of the collector's shape is decoded in one pass")
		require.Empty(t, cmp.Diff(want, got))
		taken++
	}
	require.Greater(t, taken, 10)
}

// FuzzDecodeOnePassMatchesDecode: whatever the one-pass decoder accepts is
// valid JSON that the general path accepts and decodes the same.
func FuzzDecodeOnePassMatchesDecode(f *testing.F) {
	for i, b := range fixtureEvents(f) {
		if i%3 == 1 && len(b) < 64<<10 {
			f.Add(b)
		}
	}
	const head = `{"specversion":"1.0","id":"r/stderr/1-2","source":"urn:gttsplit:collector:h","type":"io.gttsplit.log.lines.v1","subject":"r","datacontenttype":"application/json","runid":"r","host":"h","lane":"l","data":`
	for _, d := range []string{
		`{"stream":"stderr","first_seq":1,"lines":[{"t":"2026-01-02T03:04:05.123456789Z","text":"a\u001b[0m \"q\" \\ \/ é"},{"text":"b"}]}}`,
		`{"stream":"stderr","first_seq":01,"lines":[{"text":"a"},{"text":"b"}]}}`,
		`{"stream":"stderr","first_seq":1.0,"lines":[{"text":"a"},{"text":"b"}]}}`,
		`{"stream":"stderr","first_seq":1,"lines":[{"text":"a\ud83d\ude00"},{"text":"b","text":"c"}]}}`,
		` { "stream" : "stderr" , "first_seq" : 1 , "lines" : [ { "text" : "a" } , { "t" : null, "text" : "b" } ] } } `,
		`{"stream":"stderr","first_seq":1,"lines":[{"text":"a"},{"text":"b"}]}} x`,
	} {
		f.Add([]byte(head + d))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := decodeOnePass(b)
		if !ok {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("one pass accepted invalid JSON: %q", b)
		}
		want, err := slowDecode(b)
		if err != nil {
			t.Fatalf("one pass accepted what the general path rejects (%v): %q", err, b)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("one pass and general path differ on %q:\n%s", b, diff)
		}
		if d, err := DecodeBytes(b); err != nil || cmp.Diff(want, d) != "" {
			t.Fatalf("DecodeBytes differs on %q: %v", b, err)
		}
	})
}
