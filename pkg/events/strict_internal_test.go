package events

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// logLinesEvent is a log-lines event of run r whose id names lines
// first..last of stderr and whose data is data.
func logLinesEvent(first, last uint64, data string) []byte {
	return []byte(`{"specversion":"1.0","id":"` + LinesID("r", "stderr", first, last) + `","source":"urn:gttsplit:collector:h","type":"io.gttsplit.log.lines.v1","subject":"r","datacontenttype":"application/json","runid":"r","host":"h","lane":"l","data":` + data + `}`)
}

// A log-lines event whose members do not have the JSON types
// docs/events.md gives (stream a string, first_seq a non-negative
// integer, lines a non-empty array of objects with a string text and an
// optional string t) is invalid in every decoding path: the one-pass
// decoder leaves it to the others, the filtered path and the general path
// refuse it with ErrInvalid. Members the contract does not name are still
// ignored.
func TestLogLinesOfWrongTypesAreInvalid(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		first, last uint64
		data        string
	}{
		{"string first_seq", 1, 2, `{"stream":"stderr","first_seq":"1","lines":[{"text":"a"},{"text":"b"}]}`},
		{"null first_seq", 0, 1, `{"stream":"stderr","first_seq":null,"lines":[{"text":"a"},{"text":"b"}]}`},
		{"missing first_seq", 0, 1, `{"stream":"stderr","lines":[{"text":"a"},{"text":"b"}]}`},
		{"boolean first_seq", 1, 2, `{"stream":"stderr","first_seq":true,"lines":[{"text":"a"},{"text":"b"}]}`},
		{"object lines", 1, 1, `{"stream":"stderr","first_seq":1,"lines":{"text":"a"}}`},
		{"string lines", 1, 1, `{"stream":"stderr","first_seq":1,"lines":"a"}`},
		{"null line", 1, 2, `{"stream":"stderr","first_seq":1,"lines":[null,{"text":"b"}]}`},
		{"string line", 1, 2, `{"stream":"stderr","first_seq":1,"lines":["a",{"text":"b"}]}`},
		{"null text", 1, 2, `{"stream":"stderr","first_seq":1,"lines":[{"text":null},{"text":"b"}]}`},
		{"missing text", 1, 2, `{"stream":"stderr","first_seq":1,"lines":[{"t":"2026-01-02T03:04:05Z"},{"text":"b"}]}`},
		{"empty line", 1, 2, `{"stream":"stderr","first_seq":1,"lines":[{},{"text":"b"}]}`},
		{"numeric text", 1, 2, `{"stream":"stderr","first_seq":1,"lines":[{"text":7},{"text":"b"}]}`},
		{"null t", 1, 2, `{"stream":"stderr","first_seq":1,"lines":[{"t":null,"text":"a"},{"text":"b"}]}`},
		{"null text twice named", 1, 2, `{"stream":"stderr","first_seq":1,"lines":[{"text":"a","text":null},{"text":"b"}]}`},
		{"null text in capitals", 1, 2, `{"stream":"stderr","first_seq":1,"lines":[{"TEXT":null},{"text":"b"}]}`},
		{"numeric stream", 1, 2, `{"stream":2,"first_seq":1,"lines":[{"text":"a"},{"text":"b"}]}`},
	} {
		b := logLinesEvent(c.first, c.last, c.data)
		_, ok := decodeOnePass(b)
		require.False(t, ok, "%s: one pass", c.name)
		_, ok = decodeOnePassKeep(b, keepFunc(func([]byte) bool { return false }))
		require.False(t, ok, "%s: one pass, filtered", c.name)
		_, ok = decodeFast(b)
		require.False(t, ok, "%s: fast path", c.name)
		_, err := slowDecode(b)
		require.ErrorIs(t, err, ErrInvalid, "%s: general path", c.name)
		_, err = DecodeBytes(b)
		require.ErrorIs(t, err, ErrInvalid, "%s: DecodeBytes", c.name)
		for _, keep := range []bool{true, false} {
			_, err = DecodeFiltered(b, keepFunc(func([]byte) bool { return keep }))
			require.ErrorIs(t, err, ErrInvalid, "%s: filtered, keep %v", c.name, keep)
		}
		_, err = DecodeFiltered(b, llamalog.MustParser().NewLineFilter())
		require.ErrorIs(t, err, ErrInvalid, "%s: the fold's filter", c.name)
		require.False(t, errors.Is(err, ErrUnknownType))
	}

	for _, c := range []struct {
		name string
		data string
	}{
		{"no t", `{"stream":"stderr","first_seq":1,"lines":[{"text":"a"},{"text":"b"}]}`},
		{"unknown members", `{"stream":"stderr","first_seq":1,"x":null,"lines":[{"text":"a","y":null},{"text":"b","z":{"k":[1]}}]}`},
	} {
		b := logLinesEvent(1, 2, c.data)
		want, err := slowDecode(b)
		require.NoError(t, err, c.name)
		require.Equal(t, []string{"a", "b"}, []string{want.Lines[0].Text, want.Lines[1].Text})
		got, err := DecodeBytes(b)
		require.NoError(t, err, c.name)
		require.Equal(t, want, got)
	}
}
