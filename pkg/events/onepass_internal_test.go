package events

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// The one-pass decoder takes every log-lines and fdinfo-sample event of
// the fixtures and gives what the general path gives; it leaves every
// other event alone.
func TestDecodeOnePassTakesLogLinesAndSamples(t *testing.T) {
	t.Parallel()
	taken := map[string]int{}
	for _, b := range fixtureEvents(t) {
		want, err := slowDecode(b)
		require.NoError(t, err)
		got, ok := decodeOnePass(b)
		if want.Type != TypeLogLines && want.Type != TypeFDInfoSample {
			require.False(t, ok, "a %s event", want.Type)
			continue
		}
		require.True(t, ok, "a %s event of the collector's shape is decoded in one pass", want.Type)
		require.Empty(t, cmp.Diff(want, got))
		taken[want.Type]++
	}
	require.Greater(t, taken[TypeLogLines], 10)
	require.Greater(t, taken[TypeFDInfoSample], 10)
}

// A sample's strings share one string, each at its place; the general
// path's shape (FDs never nil, Procs and Cards nil when empty) is kept.
func TestDecodeOnePassSampleShapes(t *testing.T) {
	t.Parallel()
	const head = `{"specversion":"1.0","id":"r/fdinfo/3","source":"urn:gttsplit:collector:h","type":"io.gttsplit.fdinfo.sample.v1","subject":"r","datacontenttype":"application/json","runid":"r","host":"h","lane":"l","data":`
	for _, d := range []string{
		`{"seq":3,"t":"2026-01-02T03:04:05.5Z","procs":[{"pid":7,"fds":[{"fd":4,"link":"/dev/dri/renderD128","text":"drm-total-gtt:\t1 KiB\n"},{"text":"b","fd":5,"link":""}]},{"pid":8,"fds":[]},{"pid":9}],"cards":[{"card":"card1","gtt_used_bytes":337117184,"gtt_total_bytes":103079215104},{"gtt_used_bytes":-1,"card":"c\u00e9"}]}`,
		`{"seq":3,"procs":[],"cards":[]}`,
		`{"seq":3}`,
		`{"cards":[{"card":"x"}],"seq":3,"procs":[{"fds":[{"fd":-2}]}]}`,
	} {
		b := []byte(head + d + `}`)
		want, err := slowDecode(b)
		require.NoError(t, err, d)
		got, ok := decodeOnePass(b)
		require.True(t, ok, d)
		require.Empty(t, cmp.Diff(want, got), d)
	}
	for _, d := range []string{
		`{"seq":3,"seq":3}`,
		`{"seq":3,"procs":null}`,
		`{"seq":3,"procs":[{"pid":1.0}]}`,
		`{"seq":3,"procs":[{"pid":-0}]}`,
		`{"seq":3,"procs":[{"pid":01}]}`,
		`{"seq":3,"procs":[{"pid":1,"extra":2}]}`,
		`{"seq":3,"cards":[{"card":"a","card":"b"}]}`,
		`{"seq":3,"cards":[{"gtt_used_bytes":1234567890123456789}]}`,
		`{"Seq":3}`,
		`{"seq":3,"t":"2026-01-02T03:04:05+01:00"}`,
	} {
		b := []byte(head + d + `}`)
		got, ok := decodeOnePass(b)
		if !ok {
			continue
		}
		// Taken: then it must be what the general path gives.
		want, err := slowDecode(b)
		require.NoError(t, err, d)
		require.Empty(t, cmp.Diff(want, got), d)
	}
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
		`{"stream":"stderr","first_seq":7,"lines":[{"text":"abcdefgh\u0001ijklmnopq"},{"text":""},{"text":"x\\"},{"text":"12345678\u001b[0m"}]}}`,
		"{\"stream\":\"stderr\",\"first_seq\":7,\"lines\":[{\"text\":\"abcdefgh\x01ijklmnopq\"}]}}",
		`{"lines":[{"t":"2026-01-02T03:04:05Z","text":"late stream"}],"first_seq":3,"stream":"stdout"}}`,
	} {
		f.Add([]byte(head + d))
	}
	const sampleHead = `{"specversion":"1.0","id":"r/fdinfo/3","source":"urn:gttsplit:collector:h","type":"io.gttsplit.fdinfo.sample.v1","subject":"r","datacontenttype":"application/json","runid":"r","host":"h","lane":"l","data":`
	for _, d := range []string{
		`{"seq":3,"t":"2026-01-02T03:04:05.5Z","procs":[{"pid":7,"fds":[{"fd":4,"link":"/dev/dri/renderD128","text":"drm-total-gtt:\t1 KiB\n"}]},{"pid":8,"fds":[]}],"cards":[{"card":"card1","gtt_used_bytes":337117184,"gtt_total_bytes":103079215104}]}}`,
		`{"seq":3,"procs":[{"pid":-0,"fds":[{"fd":1e1}]}],"cards":null}}`,
		` { "seq" : 3 , "procs" : [ { "fds" : [ { "text" : "a\ud83d\ude00" , "fd" : 9 } ] } ] } } `,
		`{"seq":3,"t":"2026-01-02T03:04:05+01:00","procs":[{"pid":1,"PID":2}]}}`,
	} {
		f.Add([]byte(sampleHead + d))
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

// plainWord says a word is plain exactly when each of its bytes is (the
// SWAR test never passes a quote, a backslash, a control or high byte).
func TestPlainWordMatchesBytes(t *testing.T) {
	t.Parallel()
	check := func(w [8]byte) {
		want := true
		for _, c := range w {
			want = want && plain[c]
		}
		if got := plainWord(binary.LittleEndian.Uint64(w[:])); got != want {
			t.Fatalf("plainWord(%q) = %v, want %v", w, got, want)
		}
	}
	base := [8]byte{'a', 'b', ' ', '~', '0', '[', 'm', '!'}
	check(base)
	for pos := range 8 {
		for c := range 256 {
			w := base
			w[pos] = byte(c)
			check(w)
			w[(pos+1)%8] = 0x1f // a second special byte, above or below
			check(w)
		}
	}
}

// utcTime parses what time.Time's UnmarshalJSON parses the same, and
// leaves it every other shape.
func TestUTCTimeMatchesUnmarshalJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"2026-11-07T15:41:50.51412213Z", "2026-11-07T15:41:50Z", "2026-11-07T15:41:50.5Z",
		"2026-11-07T15:41:50.123456789Z", "2026-11-07T15:41:50.1234567891Z", "2024-02-29T00:00:00Z",
		"2023-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2026-04-31T00:00:00Z", "2026-11-07T24:00:00Z",
		"2026-11-07T23:60:00Z", "2026-11-07T23:00:60Z", "0000-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z",
		"2026-11-07T15:41:50.Z", "2026-11-07T15:41:50,5Z", "2026-11-07T15:41:50+01:00", "2026-11-07 15:41:50Z",
		"2026-1a-07T15:41:50Z", "-026-11-07T15:41:50Z", "2026-11-07T15:41:50.5x5Z",
	} {
		var want time.Time
		werr := want.UnmarshalJSON([]byte(`"` + s + `"`))
		got, ok := utcTime([]byte(s))
		if ok && (werr != nil || !got.Equal(want) || got.Location() != want.Location()) {
			t.Errorf("utcTime(%q) = %v, UnmarshalJSON: %v, %v", s, got, want, werr)
		}
		if !ok && werr == nil && strings.HasSuffix(s, "Z") && !strings.ContainsAny(s, ", ") && len(s) <= 30 {
			t.Errorf("utcTime(%q) left a plain UTC time to the general parse", s)
		}
	}
}
