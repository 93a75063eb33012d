package runtable_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

var (
	fixture4B  = rt.Runs("4b")
	fixture27B = rt.Runs("27b")
)

// A duplicate event changes nothing: it is reported as such and leaves a
// closed run closed; a new event re-opens it.
func TestApplyToReportsDuplicates(t *testing.T) {
	t.Parallel()
	fx := rt.Load(t, fixture4B, split.Options{})
	st := runtable.NewRunState(fx.Origin, split.Options{})
	for _, d := range fx.Decoded {
		require.True(t, runtable.ApplyTo(st, d), "first time: %s", d.ID)
	}
	want, err := split.JSON(runtable.Report(st))
	require.NoError(t, err)
	st.Closed = true
	for _, d := range fx.Decoded {
		require.False(t, runtable.ApplyTo(st, d), "again: %s", d.ID)
	}
	require.True(t, st.Closed, "duplicates leave a closed run closed")
	got, err := split.JSON(runtable.Report(st))
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}

// MarshalState splices the fold's encoding into the state's: at every
// point of both recorded runs it is the JSON value encoding/json writes for
// the whole state (fields in another order), and it loads back to a state
// that encodes to the same bytes.
func TestMarshalStateMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	opts := rt.FoldOptions(t)
	for _, path := range []string{fixture4B, fixture27B} {
		fx := rt.Load(t, path, opts)
		st := runtable.NewRunState(fx.Origin, opts)
		for i, d := range append(fx.Decoded, fx.Decoded[0]) {
			runtable.ApplyTo(st, d)
			st.LastEvent = time.Date(2026, 11, 7, 15, 0, i, 0, time.UTC)
			st.FinishedSeq, st.Splits, st.Reported = uint64(i), i, fmt.Sprintf("{\"n\": %d, \"<&>\": true}\n", i)
			got, err := runtable.MarshalState(st)
			require.NoError(t, err)
			plain, err := runtable.PlainState(st)
			require.NoError(t, err)
			require.JSONEq(t, string(plain), string(got), "event %d", i)
			back, err := runtable.UnmarshalState(got, opts)
			require.NoError(t, err)
			again, err := runtable.MarshalState(back)
			require.NoError(t, err)
			require.Equal(t, string(got), string(again), "event %d: loads back to the same state", i)
		}
	}
}

// closedState folds every event of fx and closes the run as a close does.
func closedState(t testing.TB, fx rt.Fixture) *runtable.RunState {
	t.Helper()
	st := runtable.NewRunState(fx.Origin, rt.FoldOptions(t))
	for _, d := range fx.Decoded {
		runtable.ApplyTo(st, d)
	}
	js, err := split.JSON(runtable.Report(st))
	require.NoError(t, err)
	st.Closed, st.ClosedAt, st.Reported, st.Splits = true, time.Date(2026, 11, 7, 15, 0, 0, 0, time.UTC), string(js), 1
	return st
}

// A closed run's compact record keeps what /runs/<id>, the sinks' re-send
// and a late duplicate need, not the fold: it loads back with the same
// split, byte for byte, recognises every event of the run as a repeat, and
// is several times smaller than the full state. An old full state (no
// "v") still loads; a newer format is refused.
func TestCompactRecord(t *testing.T) {
	t.Parallel()
	opts := rt.FoldOptions(t)
	for _, path := range []string{fixture4B, fixture27B} {
		fx := rt.Load(t, path, opts)
		st := closedState(t, fx)
		full, err := runtable.MarshalState(st)
		require.NoError(t, err)
		c := st.Compacted()
		require.True(t, c.Compact())
		require.False(t, st.Compact(), "compacted copies")
		rec, err := runtable.MarshalState(c)
		require.NoError(t, err)
		t.Logf("%s: closed full state %d bytes, compact record %d bytes", path, len(full), len(rec))
		require.Less(t, len(rec)*2, len(full), "the compact record is under half the full state")

		got, err := runtable.UnmarshalState(rec, opts)
		require.NoError(t, err)
		require.True(t, got.Compact())
		require.Equal(t, string(fx.Want), got.Reported, "the written split, byte for byte")
		rep, err := split.JSON(runtable.Report(got))
		require.NoError(t, err)
		require.Equal(t, string(fx.Want), string(rep), "its report is the written split")
		require.Equal(t, st.Origin, got.Origin)
		require.Equal(t, st.Splits, got.Splits)
		require.True(t, got.Closed)
		require.True(t, got.ClosedAt.Equal(st.ClosedAt))
		for _, d := range fx.Decoded {
			require.True(t, got.Holds(d), "a repeat of %s", d.Type)
			require.False(t, runtable.ApplyTo(got, d))
		}
		// A line, a sample or a finish the fold never had is new.
		var lines, sample events.Decoded
		for _, d := range fx.Decoded {
			if d.Lines != nil && lines.Lines == nil {
				lines = d
				l := d.Lines[0]
				l.Seq += 1 << 40
				lines.Lines = append([]split.Line{}, d.Lines...)
				lines.Lines[len(lines.Lines)-1] = l
			}
			if d.Sample != nil && sample.Sample == nil {
				s := *d.Sample
				s.Seq += 1 << 40
				sample.Sample = &s
			}
		}
		require.False(t, got.Holds(lines), "one new line among repeated ones")
		require.False(t, got.Holds(sample))
		again, err := runtable.MarshalState(got)
		require.NoError(t, err)
		require.JSONEq(t, string(rec), string(again), "a loaded record is written back as it was")

		// The stored format: v2, the split as a JSON object, no fold.
		var raw map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(rec, &raw))
		require.Equal(t, "2", string(raw["v"]))
		require.NotContains(t, raw, "fold")
		require.NotContains(t, raw, "reported")
		require.Contains(t, raw, "split")
		require.Contains(t, raw, "seen")

		// A full state written before the format had "v" loads as one.
		old, err := json.Marshal(struct {
			Origin   events.Origin `json:"origin"`
			Fold     *split.Fold   `json:"fold"`
			Reported string        `json:"reported"`
			Closed   bool          `json:"closed"`
			Splits   int           `json:"splits"`
		}{st.Origin, st.Fold, st.Reported, true, 1})
		require.NoError(t, err)
		ost, err := runtable.UnmarshalState(old, opts)
		require.NoError(t, err)
		require.False(t, ost.Compact())
		rep, err = split.JSON(runtable.Report(ost))
		require.NoError(t, err)
		require.Equal(t, string(fx.Want), string(rep))
		require.True(t, ost.Compacted().Holds(fx.Decoded[len(fx.Decoded)-1]))
	}
	_, err := runtable.UnmarshalState([]byte(`{"v":3,"origin":{"run_id":"x"}}`), opts)
	require.ErrorContains(t, err, "newer")
}
