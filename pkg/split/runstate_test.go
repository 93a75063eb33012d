package split

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// wordsOf is everything a report says in words (words: its flags as
// FlagWords words them, its checks, its warnings and its expected line).
func wordsOf(r Report) string { return words(r) }

// An open run (started, no run-finished event yet) says what it has not
// seen yet as not seen yet: the collector set the trace variable and the
// load's buffer lines may still come. Closed, the same lines blame the
// run: naive, the open run already says "run with
// GGML_HRX_HOST_WEIGHT_TRACE=1" and "the load printed no model buffer line
// (it failed ...)".
func TestOpenRunSaysNotSeenYet(t *testing.T) {
	t.Parallel()
	log := verbose + load // the load began; no buffer line, no trace yet
	f := NewFold(Options{})
	for i, l := range strings.Split(log, "\n") {
		f.AddLine(Line{Stream: "stderr", Seq: uint64(i + 1), Text: l})
	}
	f.SetRun(RunInfo{ID: "r1", Host: "h", Command: "llama-cli -m m.gguf -v", Started: time.Date(2026, 11, 7, 10, 0, 0, 0, time.UTC)})
	f.AddSample(sample(1, fdText("amdgpu", "0000:c5:00.0", "30", "300 MiB")))

	open := f.Report()
	require.True(t, open.Run.Open)
	w := wordsOf(open)
	require.NotContains(t, w, "GGML_HRX_HOST_WEIGHT_TRACE=1", "the collector set it; the trace has not come yet")
	require.NotContains(t, w, "it failed")
	require.NotContains(t, w, "did not finish")
	require.Contains(t, w, "no host-weight trace line seen yet (the run is still open)")
	require.Contains(t, w, "no model buffer line seen yet (the run is still open)")
	require.Contains(t, w, "the run is still open (its run-finished event has not come)")
	require.Contains(t, open.Flags, FlagNoTrace, "the flag stays: the row is unknown")

	// Closed: absent evidence is absent.
	zero := 0
	f.Finish(FinishInfo{Finished: time.Date(2026, 11, 7, 10, 1, 0, 0, time.UTC), ExitCode: &zero})
	closed := f.Report()
	require.False(t, closed.Run.Open)
	w = wordsOf(closed)
	require.Contains(t, w, "run with GGML_HRX_HOST_WEIGHT_TRACE=1")
	require.Contains(t, w, "the load printed no model buffer line (it failed")
	require.NotContains(t, w, "seen yet")

	// A saved log is no run: never open.
	require.False(t, foldLog(t, log).Run.Open)
}

// A command that exited non-zero or was stopped by a signal is flagged,
// in words that give the status or the signal; naive, a plain closed run.
func TestFailedCommandIsFlagged(t *testing.T) {
	t.Parallel()
	fold := func(fi FinishInfo) Report {
		f := NewFold(Options{})
		f.AddLine(Line{Stream: "stderr", Seq: 1, Text: strings.TrimSuffix(load, "\n")})
		f.SetRun(RunInfo{ID: "r1", Started: time.Date(2026, 11, 7, 10, 0, 0, 0, time.UTC)})
		f.Finish(fi)
		return f.Report()
	}
	code := func(n int) *int { return &n }
	r := fold(FinishInfo{Finished: time.Now(), ExitCode: code(3)})
	require.Contains(t, r.Flags, FlagChildFailed)
	require.NotContains(t, r.Flags, FlagChildSignalled)
	require.Equal(t, FlagChildFailed, r.Flags[0], "said first")
	require.Contains(t, words(r), "child_failed: the command exited with status 3:")

	r = fold(FinishInfo{Finished: time.Now(), Signal: "SIGINT"})
	require.Contains(t, r.Flags, FlagChildSignalled)
	require.NotContains(t, r.Flags, FlagChildFailed)
	require.Contains(t, words(r), "child_signalled: the command was stopped by SIGINT:")

	r = fold(FinishInfo{Finished: time.Now(), ExitCode: code(0)})
	require.NotContains(t, r.Flags, FlagChildFailed)
	require.NotContains(t, r.Flags, FlagChildSignalled)
}

// A run with no log (collector attach without --log) is flagged no_log,
// not "not a -v log" and "no model load"; a log with lines none of which
// is llama.cpp's says so, naming the command.
func TestNoLogAndNoLlamaLine(t *testing.T) {
	t.Parallel()
	s := sample(1, fdText("amdgpu", "0000:c5:00.0", "30", "300 MiB"))
	f := NewFold(Options{})
	f.SetRun(RunInfo{ID: "a1", Command: "llama-server -m m.gguf", NoLog: true})
	f.AddSample(s)
	r := f.Report()
	require.Contains(t, r.Flags, FlagNoLog)
	require.NotContains(t, r.Flags, FlagNotVerbose, "there is no log to judge")
	require.NotContains(t, r.Flags, FlagNotModelLoad)
	require.InDelta(t, 300, val(r.PeakGTTMiB), 1e-9)

	// The same run without the no-log mark blames the log (the old words).
	f = NewFold(Options{})
	f.SetRun(RunInfo{ID: "a1", Command: "llama-server -m m.gguf"})
	f.AddSample(s)
	r = f.Report()
	require.NotContains(t, r.Flags, FlagNoLog)
	require.Contains(t, r.Flags, FlagNotVerbose)

	// collector run -- ls: lines, none of them llama.cpp's.
	f = NewFold(Options{})
	f.SetRun(RunInfo{ID: "l1", Command: "ls -v"})
	for i, l := range []string{"bin", "docs", "go.mod"} {
		f.AddLine(Line{Stream: "stdout", Seq: uint64(i + 1), Text: l})
	}
	r = f.Report()
	require.Contains(t, strings.Join(r.Detail.Warnings, "\n"), "none of the 3 log lines is a llama.cpp line (no build, model load, buffer, breakdown or -v line): `ls -v` does not look like a llama.cpp run")
	// A llama.cpp log has no such warning.
	r = foldLog(t, load)
	require.NotContains(t, strings.Join(r.Detail.Warnings, "\n"), "does not look like a llama.cpp run")
}

// A control (offload off) has no weights in GTT to pack: it carries no
// no_trace flag and no "run with GGML_HRX_HOST_WEIGHT_TRACE=1"; its packed
// row stays unknown. The same log judged as any run still asks for the
// trace.
func TestControlDoesNotAskForTheTrace(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "..", "testdata", "controls", "4b-ngl0")
	fold := func(ri RunInfo) Report {
		f := foldFiles(t, filepath.Join(dir, "split.log"), filepath.Join(dir, "gtt.txt"))
		f.SetRun(ri)
		zero := 0
		f.Finish(FinishInfo{Finished: time.Date(2026, 11, 7, 14, 15, 20, 0, time.UTC), ExitCode: &zero})
		return f.Report()
	}
	ctl := fold(RunInfo{ID: "ctl", ControlOf: "strix01-20261107T140311-4b"})
	require.Contains(t, ctl.Flags, FlagControl)
	require.NotContains(t, ctl.Flags, FlagNoTrace)
	require.Nil(t, ctl.PackedMiB, "unknown, not 0")
	w := wordsOf(ctl)
	require.NotContains(t, w, "GGML_HRX_HOST_WEIGHT_TRACE=1")
	require.NotContains(t, w, "the packed copy is unknown (no trace)")
	for _, c := range ctl.Checks {
		if c.Name == "trace_vs_model" {
			require.Equal(t, StatusOK, c.Status, c.Detail)
			require.Contains(t, c.Detail, "this run is a control (offload off)")
		}
	}

	plain := fold(RunInfo{ID: "ctl"})
	require.Contains(t, plain.Flags, FlagNoTrace)
	require.Contains(t, wordsOf(plain), "run with GGML_HRX_HOST_WEIGHT_TRACE=1")
}
