package events

import (
	"encoding/json"
	"hash/fnv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// keepFunc is a LineFilter of a function.
type keepFunc func(seg []byte) bool

func (k keepFunc) Keep(seg []byte) bool { return k(seg) }

// requireFilteredMatches holds DecodeFiltered(b, keep) to DecodeBytes:
// the same acceptance; a kept line is the line DecodeBytes gives at its
// seq, in order; the span is every line DecodeBytes gives; the rest is
// equal. It returns both decodings (want, got).
func requireFilteredMatches(t *testing.T, b []byte, keep func([]byte) bool) (Decoded, Decoded, bool) {
	t.Helper()
	want, werr := DecodeBytes(b)
	got, gerr := DecodeFiltered(b, keepFunc(keep))
	require.Equal(t, werr == nil, gerr == nil, "accepted alike: %v / %v", werr, gerr)
	if werr != nil {
		return want, got, false
	}
	if got.Span == nil {
		require.Equal(t, want, got)
		return want, got, true
	}
	require.Equal(t, TypeLogLines, got.Type)
	require.NotEmpty(t, want.Lines)
	require.Equal(t, split.LineSpan{Stream: want.Lines[0].Stream, First: want.Lines[0].Seq, Last: want.Lines[len(want.Lines)-1].Seq}, *got.Span)
	i := 0
	for _, l := range got.Lines {
		for i < len(want.Lines) && want.Lines[i].Seq != l.Seq {
			i++
		}
		require.Less(t, i, len(want.Lines), "kept line %d is a line of the event, in order", l.Seq)
		require.Equal(t, want.Lines[i], l)
	}
	rest := got
	rest.Lines, rest.Span = want.Lines, nil
	require.Equal(t, want, rest)
	return want, got, true
}

// foldOf applies the events to a new fold, each twice (the second time
// nothing is new), and returns the fold's state and report and what was
// new. With p, each event is decoded filtered by p's LineFilter, as the
// aggregator does: whole when the filter skipped a possible -v marker and
// the fold still looks for one.
func foldOf(t *testing.T, p *llamalog.Parser, evs ...[]byte) string {
	t.Helper()
	f := split.NewFold(split.Options{})
	var fresh []bool
	for _, b := range evs {
		var d Decoded
		var err error
		if p == nil {
			d, err = DecodeBytes(b)
		} else {
			lf := p.NewLineFilter()
			d, err = DecodeFiltered(b, lf)
			if err == nil && d.Span != nil && lf.SkippedMarker() && f.WantsDebug() {
				d, err = DecodeBytes(b)
			}
		}
		if err != nil {
			continue
		}
		fresh = append(fresh, f.Apply(d.Input()))
		fresh = append(fresh, f.Apply(d.Input()))
	}
	st, err := json.Marshal(f)
	require.NoError(t, err)
	rep, err := split.JSON(f.Report())
	require.NoError(t, err)
	return string(st) + "\n" + string(rep) + "\n" + jsonOf(t, fresh)
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// Every fixture event decodes filtered as it decodes whole, with the
// fold's line filter, one that keeps nothing and one that keeps
// everything; the runs fold to the same state and split with the fold's
// filter, though it keeps few lines (a filter that keeps nothing loses the
// split: the filter is applied).
func TestDecodeFilteredFoldsTheSame(t *testing.T) {
	t.Parallel()
	p := llamalog.MustParser()
	evs := fixtureEvents(t)
	var held, total int
	for _, b := range evs {
		lf := p.NewLineFilter()
		_, got, ok := requireFilteredMatches(t, b, lf.Keep)
		require.True(t, ok)
		if got.Span != nil {
			held += len(got.Lines)
			total += int(got.Span.Last - got.Span.First + 1)
		}
		requireFilteredMatches(t, b, func([]byte) bool { return true })
		requireFilteredMatches(t, b, func([]byte) bool { return false })
	}
	require.Positive(t, total)
	require.Less(t, held, total/5, "most lines skipped (%d of %d kept)", held, total)
	require.Equal(t, foldOf(t, nil, evs...), foldOf(t, p, evs...))
	f := split.NewFold(split.Options{})
	for _, b := range evs {
		d, err := DecodeFiltered(b, keepFunc(func([]byte) bool { return false }))
		require.NoError(t, err)
		f.Apply(d.Input())
	}
	require.Nil(t, f.Report().ModelGTTMiB, "a filter that keeps nothing loses the split")
}

// verbose is a log-lines event whose one line is a -v marker: after it, a
// fold no longer looks for one.
const verbose = `{"specversion":"1.0","id":"v/stderr/900-900","source":"urn:gttsplit:collector:h","type":"io.gttsplit.log.lines.v1","subject":"v","datacontenttype":"application/json","runid":"v","host":"h","lane":"l","data":{"stream":"stderr","first_seq":900,"lines":[{"text":"llama_model_loader: enumerating backends"}]}}`

// FuzzDecodeFilteredMatches: any bytes, any filter (a hash bit of the
// segment), decode filtered as DecodeBytes decodes them; with the fold's
// filter, an event folds to the same state, into a fold that looks for a
// -v marker and into one that has one.
func FuzzDecodeFilteredMatches(f *testing.F) {
	for i, b := range fixtureEvents(f) {
		if i%3 == 0 && len(b) < 64<<10 {
			f.Add(b, uint8(i))
		}
	}
	const head = `{"specversion":"1.0","id":"r/stderr/1-3","source":"urn:gttsplit:collector:h","type":"io.gttsplit.log.lines.v1","subject":"r","datacontenttype":"application/json","runid":"r","host":"h","lane":"l","data":`
	for _, d := range []string{
		`{"stream":"stderr","first_seq":1,"lines":[{"t":"2026-01-02T03:04:05.123456789Z","text":"load_tensors: \u001b[0m ROCm0 model buffer size = 1.00 MiB"},{"text":"b"},{}]}}`,
		`{"stream":"stderr","first_seq":1,"lines":[{"text":"load_tensors: ROCm0 model buffer size = 1.00 Mi\u0042"},{"text":"x\ud83d"},{"text":"c"}]}}`,
		`{"stream":"stderr","first_seq":1,"lines":[{"text":"a\q"},{"text":"b"},{"text":"c"}]}}`,
		`{"stream":"stderr","first_seq":1,"lines":[{"text":"llama_context:        CPU  output buffer size =     0.58 MiB"},{"t":"2026-01-02T03:04:05+01:00","text":"b"},{"text":"c"}]}}`,
	} {
		f.Add([]byte(head+d), uint8(0))
		f.Add([]byte(head+d), uint8(1))
	}
	p := llamalog.MustParser()
	d, err := DecodeBytes([]byte(verbose))
	if err != nil {
		f.Fatal(err)
	}
	if fold := split.NewFold(split.Options{}); fold.Apply(d.Input()) && fold.WantsDebug() {
		f.Fatal("the -v event leaves the fold looking for a -v marker")
	}
	f.Fuzz(func(t *testing.T, b []byte, mask uint8) {
		keep := func(seg []byte) bool {
			h := fnv.New32a()
			_, _ = h.Write(seg)
			return (h.Sum32()^uint32(mask))&1 == 0
		}
		requireFilteredMatches(t, b, keep)
		requireFilteredMatches(t, b, p.NewLineFilter().Keep)
		require.Equal(t, foldOf(t, nil, b), foldOf(t, p, b))
		require.Equal(t, foldOf(t, nil, []byte(verbose), b), foldOf(t, p, []byte(verbose), b))
	})
}
