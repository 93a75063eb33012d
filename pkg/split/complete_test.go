package split

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A run is complete when everything its collector announced is folded: the
// run-finished event first, then the rest, is not complete until the last
// line and sample arrive (the naive rule, "finished means complete", says
// complete at once).
func TestCompleteByContent(t *testing.T) {
	t.Parallel()
	lines := strings.Split(strings.TrimSuffix(propertyLog, "\n"), "\n")
	samples := propertySamples()
	// stderr holds the odd seqs, stdout the even ones (one counter for both
	// streams, as the collector numbers them).
	stream := func(seq uint64) string {
		if seq%2 == 1 {
			return "stderr"
		}
		return "stdout"
	}
	var nOut, nErr, lastOut, lastErr uint64
	for i := range lines {
		seq := uint64(i + 1)
		if stream(seq) == "stderr" {
			nErr, lastErr = nErr+1, seq
		} else {
			nOut, lastOut = nOut+1, seq
		}
	}
	sent := &Sent{
		Streams:       []StreamSent{{Stream: "stdout", Lines: nOut, LastSeq: lastOut}, {Stream: "stderr", Lines: nErr, LastSeq: lastErr}},
		Samples:       uint64(len(samples)),
		LastSampleSeq: samples[len(samples)-1].Seq,
	}
	f := NewFold(Options{})
	require.False(t, f.Complete(), "an empty fold")
	require.Empty(t, f.Missing(), "a saved log is not a run")
	f.Finish(FinishInfo{ExitCode: new(int), Sent: sent})
	require.False(t, f.Complete(), "finished first: the naive rule says complete")
	require.Equal(t, []string{
		"the run-started event",
		"stream stderr: 13 of 13 lines (the last at seq 25)",
		"stream stdout: 12 of 12 lines (the last at seq 24)",
		"samples: 3 of 3 (the last at seq 3)",
	}, f.Missing())
	r := f.Report()
	require.False(t, r.Run.Complete)
	require.Contains(t, r.Flags, FlagIncomplete)
	require.Equal(t, f.Missing(), r.Detail.Missing)

	f.SetRun(RunInfo{ID: "r", Host: "h"})
	for i, l := range lines[:len(lines)-1] {
		seq := uint64(i + 1)
		f.AddLine(Line{Stream: stream(seq), Seq: seq, Text: l})
	}
	for _, s := range samples[:2] {
		f.AddSample(s)
	}
	require.Equal(t, []string{"stream stderr: 1 of 13 lines (the last at seq 25)", "samples: 1 of 3 (the last at seq 3)"}, f.Missing())
	require.False(t, f.Report().Run.Complete)
	f.AddLine(Line{Stream: "stderr", Seq: uint64(len(lines)), Text: lines[len(lines)-1]})
	f.AddSample(samples[2])
	require.Empty(t, f.Missing())
	require.True(t, f.Complete())
	r = f.Report()
	require.True(t, r.Run.Complete)
	require.NotContains(t, r.Flags, FlagIncomplete)
	require.Empty(t, r.Detail.Missing)
}

// An idle close (no run-finished event) says the finish is missing; a
// run-finished event that announces nothing (an older collector) completes
// the run by itself.
func TestCompleteWithoutAnnouncement(t *testing.T) {
	t.Parallel()
	f := NewFold(Options{})
	f.SetRun(RunInfo{ID: "r", Host: "h"})
	f.AddLine(Line{Stream: "log", Seq: 1, Text: "x"})
	f.Finish(FinishInfo{Incomplete: true})
	require.Equal(t, []string{"the run-finished event"}, f.Missing())
	require.False(t, f.Complete())
	f.Finish(FinishInfo{ExitCode: new(int)})
	require.True(t, f.Complete())
	require.True(t, f.Report().Run.Complete)
}

func TestSeqSetAndFoldSent(t *testing.T) {
	t.Parallel()
	var s SeqSet
	for _, v := range []uint64{5, 3, 4, 9, 4} {
		s.Add(v)
	}
	require.Equal(t, uint64(4), s.Count())
	require.Equal(t, uint64(9), s.Max())
	b, err := s.MarshalJSON()
	require.NoError(t, err)
	require.JSONEq(t, `[[3,5],[9,9]]`, string(b))
	var back SeqSet
	require.NoError(t, back.UnmarshalJSON([]byte(`[[9,9],[5,3],[4,4]]`)))
	require.Equal(t, s, back)
	require.Error(t, back.UnmarshalJSON([]byte(`{}`)))

	f := NewFold(Options{})
	f.AddLine(Line{Stream: "b", Seq: 2, Text: "x"})
	f.AddLine(Line{Stream: "a", Seq: 1, Text: "x"})
	f.AddLine(Line{Stream: "a", Seq: 3, Text: "x"})
	f.AddSample(Sample{Seq: 7})
	require.Equal(t, Sent{Streams: []StreamSent{{Stream: "a", Lines: 2, LastSeq: 3}, {Stream: "b", Lines: 1, LastSeq: 2}}, Samples: 1, LastSampleSeq: 7}, f.Sent())
}
