package split

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Apply folds each part of an input as its own method does, and says
// whether the input was new: a repeat changes nothing.
func TestApplyFoldsEachPart(t *testing.T) {
	t.Parallel()
	exit := 0
	inputs := []Input{
		{Run: &RunInfo{ID: "r1", Host: "h"}},
		{Lines: []Line{{Stream: "stderr", Seq: 1, Text: load}, {Stream: "stderr", Seq: 2, Text: "load_tensors:        ROCm0 model buffer size =  1000.00 MiB"}}},
		// Lines 3..5 of which a filter kept none: counted as read.
		{Lines: []Line{}, Span: &LineSpan{Stream: "stderr", First: 3, Last: 5}},
		{Sample: &Sample{Seq: 1, Time: time.Unix(10, 0), Procs: []ProcFDs{{PID: 1, FDs: []FDInfo{{FD: 4, Text: fdText("amdgpu", "0000:c5:00.0", "30", "1200 MiB")}}}}}},
		{Finish: &FinishInfo{ExitCode: &exit, DroppedEvents: 2}},
	}
	f := NewFold(Options{})
	for i, in := range inputs {
		require.True(t, f.Apply(in), "input %d is new", i)
		require.False(t, f.Apply(in), "input %d again", i)
	}
	require.False(t, f.Apply(Input{}), "an empty input brings nothing")
	r := f.Report()
	require.Equal(t, "r1", r.Run.ID)
	require.Equal(t, 1000.0, val(r.ModelGTTMiB))
	require.Equal(t, uint64(5), r.Detail.LinesRead)
	require.Equal(t, 1200.0, val(r.PeakGTTMiB))
	require.Contains(t, r.Flags, FlagEventsDropped)
}
