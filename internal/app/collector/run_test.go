package collector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/sources/procwrap"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// requireSameBytes fails with the first differing offset instead of a diff
// of 140 kB.
func requireSameBytes(t testing.TB, want, got []byte, what string) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	t.Fatalf("%s: differs at byte %d (want %d bytes, got %d): want %q, got %q", what, i, len(want), len(got),
		want[i:min(len(want), i+60)], got[i:min(len(got), i+60)])
}

// byType returns the events of one type.
func byType(evs []events.Decoded, typ string) []events.Decoded {
	var out []events.Decoded
	for _, d := range evs {
		if d.Type == typ {
			out = append(out, d)
		}
	}
	return out
}

// runChild runs argv through Run with an --out directory and returns the
// exit code, the recorded events and the IO.
func runChild(t *testing.T, argv []string) (int, []events.Decoded, *testIO) {
	t.Helper()
	cfg := testConfig(t)
	cfg.Out = t.TempDir()
	o := newTestIO()
	code, err := Run(testCtx(t), cfg, argv, o.io(), testLogger(t))
	require.NoError(t, err)
	return code, readJSONL(t, filepath.Join(cfg.Out, "events.jsonl")), o
}

// TestRunChildIntegration runs a real child process through Run: its output
// passes through byte for byte, -v and the trace variable are added only
// when missing, exit codes and SIGTERM pass through, and a command that
// cannot start exits 127 with a clear message.
func TestRunChildIntegration(t *testing.T) {
	skipShort(t)
	lines, wantOut, wantErr := fixtureLines(t)
	src := "src=" + absPath(t, fixture4B)

	t.Run("passthrough, -v and trace env added", func(t *testing.T) {
		t.Setenv(procwrap.TraceEnv, "")
		require.NoError(t, os.Unsetenv(procwrap.TraceEnv))
		rec := filepath.Join(t.TempDir(), "record.json")
		argv := childArgv(t, "record="+rec, src, "print=0:")
		code, evs, o := runChild(t, argv)
		require.Equal(t, 0, code)
		requireSameBytes(t, wantOut, o.stdout.Bytes(), "stdout")
		requireSameBytes(t, wantErr, o.stderr.Bytes(), "stderr")

		r := readRecord(t, rec)
		require.Equal(t, append(slices.Clone(argv[1:]), "-v"), r.Args, "-v appended")
		v, ok := r.Lookup(procwrap.TraceEnv)
		require.True(t, ok, "the child has %s", procwrap.TraceEnv)
		require.Equal(t, "1", v)

		st := byType(evs, events.TypeRunStarted)
		require.Len(t, st, 1)
		d := st[0].Started.Detail
		require.Equal(t, append(slices.Clone(argv), "-v"), d.Args)
		require.True(t, d.VerboseAppended)
		require.Equal(t, map[string]string{procwrap.TraceEnv: "1"}, d.Env)
		require.Equal(t, []string{procwrap.TraceEnv}, d.EnvAdded)
		require.Equal(t, r.PID, d.PID, "the run-started event names the child's pid")

		// Every line was captured once, in its stream, in order.
		count, text, stream := lineSeqs(evs)
		requireEachLineOnce(t, count, len(lines))
		var gotOut, gotErr []string
		for seq := uint64(1); seq <= uint64(len(lines)); seq++ {
			if stream[seq] == "stdout" {
				gotOut = append(gotOut, text[seq])
			} else {
				gotErr = append(gotErr, text[seq])
			}
		}
		var wOut, wErr []string
		for i, l := range lines {
			if i%5 == 4 {
				wOut = append(wOut, lineText(l))
			} else {
				wErr = append(wErr, lineText(l))
			}
		}
		require.Equal(t, wOut, gotOut)
		require.Equal(t, wErr, gotErr)
	})

	t.Run("verbosity flag and trace env kept", func(t *testing.T) {
		t.Setenv(procwrap.TraceEnv, "7")
		for _, flag := range [][]string{{"--verbose"}, {"-lv", "3"}, {"--log-verbosity=2"}} {
			rec := filepath.Join(t.TempDir(), "record.json")
			argv := childArgv(t, append([]string{"record=" + rec}, flag...)...)
			code, evs, _ := runChild(t, argv)
			require.Equal(t, 0, code)
			r := readRecord(t, rec)
			require.Equal(t, argv[1:], r.Args, "no -v after %q", flag)
			v, _ := r.Lookup(procwrap.TraceEnv)
			require.Equal(t, "7", v, "the caller's value is kept")
			d := byType(evs, events.TypeRunStarted)[0].Started.Detail
			require.False(t, d.VerboseAppended)
			require.Equal(t, argv, d.Args)
			require.Equal(t, map[string]string{procwrap.TraceEnv: "7"}, d.Env)
			require.Empty(t, d.EnvAdded)
		}
	})

	t.Run("exit code", func(t *testing.T) {
		code, evs, _ := runChild(t, childArgv(t, src, "print=0:10", "exit=3"))
		require.Equal(t, 3, code)
		fin := byType(evs, events.TypeRunFinished)
		require.Len(t, fin, 1)
		require.NotNil(t, fin[0].Finished.Info.ExitCode)
		require.Equal(t, 3, *fin[0].Finished.Info.ExitCode)
		require.Equal(t, evs[len(evs)-1].Type, events.TypeRunFinished, "run-finished is the last event")
	})

	for _, tc := range []struct {
		mode string
		code int
	}{{"die", 128 + int(syscall.SIGTERM)}, {"exit", 42}} {
		t.Run("SIGTERM forwarded, child "+tc.mode+"s", func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Out = t.TempDir()
			o := newTestIO()
			type result struct {
				code int
				err  error
			}
			done := make(chan result, 1)
			go func() {
				code, err := Run(testCtx(t), cfg, childArgv(t, "wait="+tc.mode), o.io(), testLogger(t))
				done <- result{code, err}
			}()
			eventually(t, "the child to be ready", func() bool { return strings.Contains(o.stdout.String(), "ready\n") })
			o.sigs <- syscall.SIGTERM
			res := <-done
			require.NoError(t, res.err)
			require.Equal(t, tc.code, res.code)
			require.Contains(t, o.stderr.String(), "got SIGTERM\n", "the child received the forwarded signal")
			fin := byType(readJSONL(t, filepath.Join(cfg.Out, "events.jsonl")), events.TypeRunFinished)
			require.Len(t, fin, 1)
			if tc.mode == "die" {
				require.Equal(t, "SIGTERM", fin[0].Finished.Info.Signal)
				require.Nil(t, fin[0].Finished.Info.ExitCode)
			} else {
				require.Equal(t, 42, *fin[0].Finished.Info.ExitCode)
			}
		})
	}

	t.Run("missing executable", func(t *testing.T) {
		for _, tc := range []struct{ name, why string }{
			{"gttsplit-no-such-program", "executable file not found in $PATH"},
			{filepath.Join(t.TempDir(), "llama-cli"), "no such file or directory"},
		} {
			cfg := testConfig(t)
			cfg.Out = t.TempDir()
			o := newTestIO()
			code, err := Run(testCtx(t), cfg, []string{tc.name, "-m", "model.gguf"}, o.io(), testLogger(t))
			require.NoError(t, err)
			require.Equal(t, 127, code)
			require.Equal(t, fmt.Sprintf("collector: cannot run %q: %s\n", tc.name, tc.why), o.stderr.String())
			require.Empty(t, o.stdout.String())
			left, err := os.ReadDir(cfg.Out)
			require.NoError(t, err)
			require.Empty(t, left, "no empty split.log, gtt.txt or events.jsonl is left")
		}
	})
}

// TestRunOutOfflineIntegration runs the 4B log through Run with --out and no
// NATS URL: every file is written, the local split is the 4B answer, and
// nothing touched a broker or a spool.
func TestRunOutOfflineIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	lines, _, _ := fixtureLines(t)
	cfg := testConfig(t)
	cfg.Out = filepath.Join(t.TempDir(), "out")
	rec := filepath.Join(t.TempDir(), "record.json")
	var logBuf syncBuffer
	log := zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), &logBuf)).Level(zerolog.DebugLevel)
	o := newTestIO()
	// llama.cpp logs to stderr; a little delay leaves time for samples.
	argv := childArgv(t, "record="+rec, "delay=200us", "err="+absPath(t, fixture4B))
	code, err := Run(testCtx(t), cfg, argv, o.io(), log)
	require.NoError(t, err)
	require.Equal(t, 0, code)
	r := readRecord(t, rec)

	// split.log holds the child's output lines.
	b, err := os.ReadFile(filepath.Join(cfg.Out, "split.log"))
	require.NoError(t, err)
	want := make([]string, len(lines))
	for i, l := range lines {
		want[i] = lineText(l)
	}
	require.Equal(t, want, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"))

	// events.jsonl decodes: started, every line once, samples, finished last.
	evs := readJSONL(t, filepath.Join(cfg.Out, "events.jsonl"))
	n := countTypes(evs)
	require.Equal(t, 1, n[events.TypeRunStarted])
	require.Equal(t, 1, n[events.TypeRunFinished])
	require.Equal(t, events.TypeRunFinished, evs[len(evs)-1].Type)
	count, text, _ := lineSeqs(evs)
	requireEachLineOnce(t, count, len(lines))
	for i := range lines {
		require.Equal(t, want[i], text[uint64(i+1)])
	}
	samples := byType(evs, events.TypeFDInfoSample)
	require.NotEmpty(t, samples)
	for i, s := range samples {
		require.Equal(t, uint64(i+1), s.Sample.Seq)
		require.Equal(t, r.PID, s.Sample.Procs[0].PID, "samples are of the child")
	}
	// The run-finished event announces exactly what went before it, and
	// the run's wall time.
	fin := evs[len(evs)-1].Finished
	// It also says how it sampled: the child's log lines asked for
	// samples between the ticks.
	sm := fin.Info.Sent.Sampling
	require.NotNil(t, sm)
	require.Equal(t, 100*time.Millisecond, sm.Interval)
	require.Positive(t, sm.Triggered, "memory-relevant lines asked for samples")
	require.Positive(t, sm.LargestGap)
	fin.Info.Sent.Sampling = nil
	require.Equal(t, &split.Sent{
		Streams:       []split.StreamSent{{Stream: "stderr", Lines: uint64(len(lines)), LastSeq: uint64(len(lines))}},
		Samples:       uint64(len(samples)),
		LastSampleSeq: uint64(len(samples)),
	}, fin.Info.Sent)
	require.Positive(t, fin.Detail.Duration)
	// A sample asked for by the child's first lines may be emitted before
	// the run-started event: the fold is order-free, so only its presence
	// matters.
	runStarted := byType(evs, events.TypeRunStarted)
	require.Len(t, runStarted, 1)
	started := runStarted[0].Started.Info.Started
	require.InDelta(t, fin.Info.Finished.Sub(started), fin.Detail.Duration, float64(time.Millisecond))

	// gtt.txt parses into the same samples.
	gtt, err := os.ReadFile(filepath.Join(cfg.Out, "gtt.txt"))
	require.NoError(t, err)
	parsed, st, err := split.ParseSamples(gtt)
	require.NoError(t, err)
	require.Zero(t, st.SkippedLines)
	require.Len(t, parsed, len(samples))
	for i, p := range parsed {
		require.True(t, p.Time.Equal(samples[i].Sample.Time), "sample %d time", i+1)
		require.Equal(t, r.PID, p.Procs[0].PID)
	}

	// The split: the 4B log's rows.
	md, err := os.ReadFile(filepath.Join(cfg.Out, "split.md"))
	require.NoError(t, err)
	require.NotEmpty(t, md)
	js, err := os.ReadFile(filepath.Join(cfg.Out, "split.json"))
	require.NoError(t, err)
	var rep struct {
		Run struct {
			ID       string `json:"id"`
			ExitCode *int   `json:"exit_code"`
			Complete bool   `json:"complete"`
		} `json:"run"`
		Model         *float64 `json:"model_gtt_mib"`
		Packed        *float64 `json:"packed_mib"`
		PackedWeights *int     `json:"packed_weights"`
		State         *float64 `json:"state_mib"`
		Compute       *float64 `json:"compute_mib"`
		Flags         []string `json:"flags"`
	}
	require.NoError(t, json.Unmarshal(js, &rep))
	require.Equal(t, evs[0].Origin.RunID, rep.Run.ID)
	require.True(t, rep.Run.Complete)
	require.Equal(t, 0, *rep.Run.ExitCode)
	for name, v := range map[string]*float64{"model": rep.Model, "packed": rep.Packed, "state": rep.State, "compute": rep.Compute} {
		require.NotNil(t, v, name)
	}
	require.InDelta(t, 2375.91, *rep.Model, 1e-9)
	require.InDelta(t, 795.8, *rep.Packed, 1e-9)
	require.Equal(t, 38, *rep.PackedWeights)
	require.InDelta(t, 36.0, *rep.State, 1e-9)
	require.InDelta(t, 43.21, *rep.Compute, 1e-9)
	require.NotContains(t, rep.Flags, split.FlagNotVerbose)
	require.NotContains(t, rep.Flags, split.FlagNoTrace)

	// Offline: no spool, no connection attempt.
	_, err = os.Stat(cfg.Spool.Dir)
	require.ErrorIs(t, err, os.ErrNotExist, "no spool is created offline")
	for _, word := range []string{"nats", "spool", "retry", "publish"} {
		require.NotContains(t, strings.ToLower(logBuf.String()), word)
	}
	require.NotContains(t, logBuf.String(), `"level":"error"`)
	for _, l := range strings.Split(logBuf.String(), "\n") {
		if strings.Contains(l, `"level":"warn"`) {
			// The test's --source-dir is a temporary directory, not a checkout.
			require.Contains(t, l, "--source-dir is not a git checkout", "the only warning")
		}
	}
}

// TestRunNotLlamaIntegration: a command that prints no llama.cpp line
// (collector run -- ls) gets a warning naming it, on the collector's log
// and in its split, and a failing one is flagged: exited with status 3.
func TestRunNotLlamaIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	cfg := testConfig(t)
	cfg.Out = filepath.Join(t.TempDir(), "out")
	var logBuf syncBuffer
	log := zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), &logBuf)).Level(zerolog.DebugLevel)
	argv := childArgv(t, "flood=5", "exit=3")
	code, err := Run(testCtx(t), cfg, argv, newTestIO().io(), log)
	require.NoError(t, err)
	require.Equal(t, 3, code, "the child's exit status is passed through")

	var warned bool
	for _, l := range strings.Split(logBuf.String(), "\n") {
		if strings.Contains(l, `"level":"warn"`) && strings.Contains(l, "printed no llama.cpp line") {
			warned = true
			require.Contains(t, l, "flood=5 exit=3 -v", "the warning names the command as run")
		}
	}
	require.True(t, warned, "a warning says the command printed no llama.cpp line:\n%s", logBuf.String())

	js, err := os.ReadFile(filepath.Join(cfg.Out, "split.json"))
	require.NoError(t, err)
	var rep split.Report
	require.NoError(t, json.Unmarshal(js, &rep))
	require.Contains(t, rep.Flags, split.FlagChildFailed)
	require.Contains(t, strings.Join(rep.Detail.Warnings, "\n"), "does not look like a llama.cpp run")
	md, err := os.ReadFile(filepath.Join(cfg.Out, "split.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "child_failed: the command exited with status 3")
}

// requireExactlyOnce checks a run's messages in the stream against the
// events the collector recorded under --out: the same ids, each once, with
// Nats-Msg-Id set to it; ids of the form <runid>/<position>/<n>; every line
// and sample once; run-finished last.
func requireExactlyOnce(t *testing.T, msgs []streamMsg, recorded []events.Decoded, runID string, nLines int) {
	t.Helper()
	require.NotEmpty(t, msgs)
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.ID]++
		require.Equal(t, m.ID, m.MsgID, "Nats-Msg-Id is the event id")
		var want string
		switch m.Type {
		case events.TypeRunStarted:
			want = runID + "/started/0"
		case events.TypeRunFinished:
			want = runID + "/finished/0"
		case events.TypeFDInfoSample:
			want = fmt.Sprintf("%s/fdinfo/%d", runID, m.Sample.Seq)
		case events.TypeLogLines:
			want = fmt.Sprintf("%s/%s/%d-%d", runID, m.Lines[0].Stream, m.Lines[0].Seq, m.Lines[len(m.Lines)-1].Seq)
		}
		require.Equal(t, want, m.ID, "deterministic id")
	}
	for id, n := range seen {
		require.Equal(t, 1, n, "event %s is in the stream %d times", id, n)
	}
	var wantIDs, gotIDs []string
	for _, d := range recorded {
		wantIDs = append(wantIDs, d.ID)
	}
	for id := range seen {
		gotIDs = append(gotIDs, id)
	}
	sort.Strings(wantIDs)
	sort.Strings(gotIDs)
	require.Equal(t, wantIDs, gotIDs, "the stream holds every event the collector built, nothing else")
	require.Equal(t, countTypes(recorded), countTypes(decodedOf(msgs)))

	count, _, _ := lineSeqs(decodedOf(msgs))
	requireEachLineOnce(t, count, nLines)
	var seqs []uint64
	for _, m := range msgs {
		if m.Sample != nil {
			seqs = append(seqs, m.Sample.Seq)
		}
	}
	slices.Sort(seqs)
	require.NotEmpty(t, seqs)
	for i, s := range seqs {
		require.Equal(t, uint64(i+1), s, "samples are numbered 1..n, each once")
	}
	require.Equal(t, events.TypeRunFinished, msgs[len(msgs)-1].Type, "run-finished is the run's last event in the stream")
	require.Equal(t, 1, countTypes(decodedOf(msgs))[events.TypeRunFinished])
	require.Zero(t, msgs[len(msgs)-1].Finished.Detail.DroppedEvents)
}

// TestRunNATSIntegration publishes a run to an embedded nats-server: every
// line and sample arrives exactly once under its deterministic id, and the
// run-finished event is the run's last.
func TestRunNATSIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	lines, _, _ := fixtureLines(t)
	srv := startBroker(t)
	cfg := testConfig(t)
	cfg.NATS.URL = srv.ClientURL()
	cfg.RunID = "nats-run-1"
	cfg.Out = t.TempDir()
	o := newTestIO()
	argv := childArgv(t, "src="+absPath(t, fixture4B), "delay=200us", "print=0:")
	code, err := Run(testCtx(t), cfg, argv, o.io(), testLogger(t))
	require.NoError(t, err)
	require.Equal(t, 0, code)

	msgs := streamOf(t, jsConn(t, srv.ClientURL()), cfg.RunID)
	requireExactlyOnce(t, msgs, readJSONL(t, filepath.Join(cfg.Out, "events.jsonl")), cfg.RunID, len(lines))
	for _, m := range msgs {
		require.Equal(t, events.Origin{RunID: cfg.RunID, Host: "testhost", Lane: "gpu0"}, m.Origin)
	}
}

// TestRunBrokerRestartIntegration shuts the broker down mid-run while the
// child keeps printing, and starts it again on the same store and port:
// the events of the outage go to the spool and are drained from it, and the
// stream ends up with every event exactly once.
func TestRunBrokerRestartIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	lines, _, _ := fixtureLines(t)
	store := t.TempDir()
	srv := startBrokerAt(t, store, -1)
	port := natstest.Port(srv)
	url := srv.ClientURL()

	cfg := testConfig(t)
	cfg.NATS.URL = url
	cfg.RunID = "restart-run-1"
	cfg.Out = t.TempDir()
	gates := t.TempDir()
	g := func(name string) string { return filepath.Join(gates, name) }
	argv := childArgv(t, "src="+absPath(t, fixture4B),
		"print=0:400", "mark="+g("m1"), "gate="+g("down"),
		"delay=2ms", "print=400:900", "mark="+g("m2"), "gate="+g("back"),
		"delay=0s", "print=900:", "exit=0")
	o := newTestIO()
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := Run(testCtx(t), cfg, argv, o.io(), testLogger(t))
		done <- result{code, err}
	}()
	linesIn := func(js func() []streamMsg, n int) func() bool {
		return func() bool {
			count, _, _ := lineSeqs(decodedOf(js()))
			return len(count) >= n
		}
	}
	js := jsConn(t, url)
	eventually(t, "the first 400 lines in the stream", linesIn(func() []streamMsg { return streamOf(t, js, cfg.RunID) }, 400))

	natstest.Shutdown(srv)
	require.NoError(t, os.WriteFile(g("down"), nil, 0o644))
	eventually(t, "the child to print while the broker is down", func() bool {
		_, err := os.Stat(g("m2"))
		return err == nil
	})
	eventually(t, "events in the spool", func() bool { return segmentBytes(cfg.Spool.Dir) > 0 })

	srv2 := startBrokerAt(t, store, port)
	js2 := jsConn(t, srv2.ClientURL())
	eventually(t, "the outage's lines drained from the spool", linesIn(func() []streamMsg { return streamOf(t, js2, cfg.RunID) }, 900))
	require.NoError(t, os.WriteFile(g("back"), nil, 0o644))

	var res result
	select {
	case res = <-done:
	case <-testCtx(t).Done():
		t.Fatal("Run did not return")
	}
	require.NoError(t, res.err)
	require.Equal(t, 0, res.code)
	requireExactlyOnce(t, streamOf(t, js2, cfg.RunID), readJSONL(t, filepath.Join(cfg.Out, "events.jsonl")), cfg.RunID, len(lines))
}
