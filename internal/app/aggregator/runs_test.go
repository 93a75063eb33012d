package aggregator

import (
	"os"
	"path/filepath"
	"testing"

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
