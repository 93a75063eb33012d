package events

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

func fixtureEvents(t testing.TB) [][]byte {
	t.Helper()
	var out [][]byte
	for _, run := range []string{"4b", "27b"} {
		f, err := os.Open(filepath.Join("..", "..", "testdata", "runs", run, "events.jsonl"))
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), MaxLineBytes)
		for sc.Scan() {
			out = append(out, append([]byte(nil), sc.Bytes()...))
		}
		require.NoError(t, sc.Err())
		f.Close()
	}
	return out
}

// slowDecode is the general path: the SDK's parse, then Decode.
func slowDecode(b []byte) (Decoded, error) {
	ev, err := Unmarshal(b)
	if err != nil {
		return Decoded{}, err
	}
	return Decode(ev)
}

// The fast path takes the hot events and gives exactly what the general
// path gives.
func TestDecodeFastTakesTheHotEvents(t *testing.T) {
	t.Parallel()
	fast := 0
	for _, b := range fixtureEvents(t) {
		want, err := slowDecode(b)
		require.NoError(t, err)
		got, ok := decodeFast(b)
		if want.Type == TypeLogLines || want.Type == TypeFDInfoSample {
			require.True(t, ok, "a %s event of the collector's shape takes the fast path", want.Type)
			fast++
		} else {
			require.False(t, ok)
			continue
		}
		require.Empty(t, cmp.Diff(want, got))
	}
	require.Greater(t, fast, 40)
}

// FuzzDecodeFastMatchesDecode: whenever the fast path accepts an input, the
// general path accepts it too and decodes the same thing.
func FuzzDecodeFastMatchesDecode(f *testing.F) {
	for i, b := range fixtureEvents(f) {
		if i%3 == 0 && len(b) < 64<<10 {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"specversion":"1.0","id":"r/fdinfo/1","source":"urn:gttsplit:collector:h","type":"io.gttsplit.fdinfo.sample.v1","subject":"r","datacontenttype":"application/json","runid":"r","host":"h","lane":"l","data":{"seq":1,"procs":[],"cards":[]}}`))
	f.Add([]byte(`{"specversion":"1.0","id":"r/fdinfo/1","source":"urn:gttsplit:collector:h","type":"io.gttsplit.fdinfo.sample.v1","subject":"r","datacontenttype":"application/json","runid":"r","host":"h","lane":"l","data":{"seq":1,"procs":[],"cards":[]},"data":{"seq":2}}`))
	for _, d := range []string{
		`{"stream":"stderr","first_seq":"1","lines":[{"text":"a"},{"text":"b"}]}`,
		`{"stream":"stderr","first_seq":1,"lines":[{"text":null},{"TEXT":"b"}]}`,
		`{"stream":"stderr","first_seq":1,"lines":[null,{}]}`,
		`{"stream":"stderr","lines":[{"t":null,"text":"a"},{"text":"b"}]}`,
	} {
		f.Add(logLinesEvent(1, 2, d))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		got, ok := decodeFast(b)
		if !ok {
			return
		}
		want, err := slowDecode(b)
		if err != nil {
			t.Fatalf("fast path accepted what the general path rejects (%v): %q", err, b)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("fast and general paths differ on %q:\n%s", b, diff)
		}
	})
}
