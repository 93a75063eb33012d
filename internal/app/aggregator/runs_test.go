package aggregator

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// A duplicate event changes nothing: it is reported as such and leaves a
// closed run closed; a new event re-opens it.
func TestApplyToReportsDuplicates(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join("..", "..", "..", "testdata", "runs", "4b", "events.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	var ds []events.Decoded
	r := events.NewReader(f)
	for r.Next() {
		d, err := events.Decode(r.Event())
		require.NoError(t, err)
		ds = append(ds, d)
	}
	require.NoError(t, r.Err())
	st := NewRunState(ds[0].Origin, split.Options{})
	for _, d := range ds {
		require.True(t, ApplyTo(st, d), "first time: %s", d.ID)
	}
	want, err := split.JSON(Report(st))
	require.NoError(t, err)
	st.Closed = true
	for _, d := range ds {
		require.False(t, ApplyTo(st, d), "again: %s", d.ID)
	}
	require.True(t, st.Closed, "duplicates leave a closed run closed")
	got, err := split.JSON(Report(st))
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}

// MarshalState splices the fold's encoding into the state's: at every
// point of both recorded runs it is the JSON value encoding/json writes for
// the whole state (fields in another order), and it loads back to a state
// that encodes to the same bytes.
func TestMarshalStateMatchesEncodingJSON(t *testing.T) {
	for _, path := range []string{fixture4B, fixture27B} {
		fx := loadFixture(t, path)
		st := NewRunState(fx.origin, foldOptions(t))
		for i, d := range append(fx.decoded, fx.decoded[0]) {
			ApplyTo(st, d)
			st.LastEvent = time.Date(2026, 11, 7, 15, 0, i, 0, time.UTC)
			st.FinishedSeq, st.Splits, st.Reported = uint64(i), i, fmt.Sprintf("{\"n\": %d, \"<&>\": true}\n", i)
			got, err := MarshalState(st)
			require.NoError(t, err)
			plain, err := json.Marshal(storedState{V: StateVersion, stateFields: (*stateFields)(st)})
			require.NoError(t, err)
			require.JSONEq(t, string(plain), string(got), "event %d", i)
			back, err := UnmarshalState(got, foldOptions(t))
			require.NoError(t, err)
			again, err := MarshalState(back)
			require.NoError(t, err)
			require.Equal(t, string(got), string(again), "event %d: loads back to the same state", i)
		}
	}
}
