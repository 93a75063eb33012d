package events_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// A run-finished event from a collector that did not announce what it sent
// (written before `sent` was added) still decodes: Sent is nil, and it
// completes its run by itself.
func TestRunFinishedBeforeSentDecodes(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("testdata", "run.finished.v1-before-sent.json"))
	require.NoError(t, err)
	require.NotContains(t, string(b), `"sent"`)
	d, err := events.DecodeBytes(b)
	require.NoError(t, err)
	require.NotNil(t, d.Finished)
	require.Nil(t, d.Finished.Info.Sent)
	f := split.NewFold(split.Options{})
	f.Apply(d.Input())
	require.Equal(t, []string{"the run-started event"}, f.Missing(), "only the start is missing")
}

// The announcement round-trips, and one the contract does not allow is an
// error from the constructor and from Decode.
func TestRunFinishedSent(t *testing.T) {
	t.Parallel()
	o := events.Origin{RunID: "r1", Host: "h"}
	sent := &split.Sent{Streams: []split.StreamSent{{Stream: "stderr", Lines: 3, LastSeq: 5}}, Samples: 2, LastSampleSeq: 9}
	ev, err := events.NewRunFinished(o, split.FinishInfo{Sent: sent}, events.FinishDetail{})
	require.NoError(t, err)
	b, err := events.Marshal(ev)
	require.NoError(t, err)
	d, err := events.DecodeBytes(b)
	require.NoError(t, err)
	require.Equal(t, sent, d.Finished.Info.Sent)

	for _, bad := range []*split.Sent{
		{Streams: []split.StreamSent{{Stream: "finished", Lines: 1}}},
		{Streams: []split.StreamSent{{Stream: "a"}, {Stream: "a"}}},
		{Streams: []split.StreamSent{{Stream: ""}}},
	} {
		_, err := events.NewRunFinished(o, split.FinishInfo{Sent: bad}, events.FinishDetail{})
		require.ErrorIs(t, err, events.ErrInvalid, "%+v", bad)
	}
	twice := strings.Replace(string(b), `"streams":[{"stream":"stderr","lines":3,"last_seq":5}]`,
		`"streams":[{"stream":"stderr","lines":3,"last_seq":5},{"stream":"stderr","lines":1,"last_seq":1}]`, 1)
	require.NotEqual(t, string(b), twice)
	_, err = events.DecodeBytes([]byte(twice))
	require.ErrorIs(t, err, events.ErrInvalid)
}

// A run-finished event's Input carries the collector's drop count into the
// fold's FinishInfo; a split event brings nothing.
func TestInputOfEachEvent(t *testing.T) {
	t.Parallel()
	o := events.Origin{RunID: "r1", Host: "h"}
	ev, err := events.NewRunFinished(o, split.FinishInfo{}, events.FinishDetail{DroppedEvents: 3})
	require.NoError(t, err)
	b, err := events.Marshal(ev)
	require.NoError(t, err)
	d, err := events.DecodeBytes(b)
	require.NoError(t, err)
	in := d.Input()
	require.NotNil(t, in.Finish)
	require.Equal(t, uint64(3), in.Finish.DroppedEvents)
	require.Zero(t, d.Finished.Info.DroppedEvents, "the decoded event is not changed")
	require.Equal(t, split.Input{}, events.Decoded{Type: events.TypeSplit, Split: &split.Report{}}.Input())
}
