package collector

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// TestCheckRunIsTheReferenceRun: the run `collector check` publishes is
// the recorded 4B run of testdata (gzip -9 -n of it writes the file again).
func TestCheckRunIsTheReferenceRun(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "runs", "4b", "events.jsonl"))
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(checkRun))
	require.NoError(t, err)
	got, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "internal/app/collector/checkrun/4b.jsonl.gz is stale: gzip -9 -n -c testdata/runs/4b/events.jsonl > internal/app/collector/checkrun/4b.jsonl.gz")
}

// TestReidentify: the check's run is the 4B run under the new id, host
// and lane, started at the given time, with every event valid, no issue
// named, and the split of the reference run.
func TestReidentify(t *testing.T) {
	t.Parallel()
	start := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	o := events.Origin{RunID: "check-strix09-20270102T030405", Host: "strix09", Lane: "check"}
	stream, err := reidentify(checkRun, o, start)
	require.NoError(t, err)
	require.NotContains(t, string(stream), "strix01")
	require.NotContains(t, string(stream), "example/engine#856")

	fold := func(b []byte) split.Report {
		runs := runtable.NewRuns(split.Options{})
		r := events.NewReader(bytes.NewReader(b))
		n := 0
		for r.Next() {
			d, err := events.Decode(r.Event())
			require.NoError(t, err)
			require.Equal(t, o.RunID == d.Origin.RunID, strings.HasPrefix(d.ID, o.RunID+"/"))
			runs.Apply(d, time.Time{})
			n++
		}
		require.NoError(t, r.Err())
		require.Equal(t, 25, n)
		ids := runs.IDs()
		require.Len(t, ids, 1)
		return runtable.Report(runs.Get(ids[0]))
	}
	zr, err := gzip.NewReader(bytes.NewReader(checkRun))
	require.NoError(t, err)
	ref, err := io.ReadAll(zr)
	require.NoError(t, err)
	got, want := fold(stream), fold(ref)
	require.Equal(t, o.RunID, got.Run.ID)
	require.Equal(t, "strix09", got.Run.Host)
	require.Equal(t, "check", got.Run.Lane)
	require.Empty(t, got.Run.Issue)
	require.True(t, got.Run.Complete)
	require.Equal(t, start.Format(time.RFC3339Nano), got.Run.Started)
	require.Equal(t, *want.PeakGTTMiB, *got.PeakGTTMiB)
	require.Equal(t, *want.PackedMiB, *got.PackedMiB)
	require.Equal(t, want.Flags, got.Flags)
}

// TestCheckWaitNamesWhatItSawBeforeTheDeadline: when time runs out while
// an attempt is still under way (a busy machine), the error names what
// the attempt before it saw (a refused connection), not the deadline
// that cut the last one short.
func TestCheckWaitNamesWhatItSawBeforeTheDeadline(t *testing.T) {
	c := checker{opt: CheckOptions{Timeout: 200 * time.Millisecond, Poll: time.Millisecond}}
	tries := 0
	err := c.wait(t.Context(), "ready", func(ctx context.Context) (bool, string, error) {
		tries++
		if tries == 1 {
			return false, "", errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
		}
		<-ctx.Done()
		return false, "", ctx.Err()
	})
	require.EqualError(t, err, "not ready after 200ms: dial tcp 127.0.0.1:1: connect: connection refused")

	// With nothing seen before, the deadline is what it says.
	err = c.wait(t.Context(), "ready", func(ctx context.Context) (bool, string, error) {
		<-ctx.Done()
		return false, "", ctx.Err()
	})
	require.EqualError(t, err, "not ready after 200ms: context deadline exceeded")

	// A plain answer seen last is said as it is.
	err = c.wait(t.Context(), "ready", func(ctx context.Context) (bool, string, error) {
		return false, "503 not ready: partitions without an owner: 3", nil
	})
	require.EqualError(t, err, "not ready after 200ms: 503 not ready: partitions without an owner: 3")
}
