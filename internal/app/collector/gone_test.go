package collector

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/conservation"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// attachDetached attaches to fs as run runID (derived from the process
// when ""), writes lines, waits until they are all in the broker, and
// detaches (as a SIGTERM does): the run stays unfinished, its sent log
// and read position in the state dir.
func attachDetached(t *testing.T, b *conservationBroker, fs *fakeServer, stateDir, runID string, lines [][]byte) {
	t.Helper()
	cfg := attachCfg(t, b, fs)
	cfg.Attach.StateDir, cfg.RunID = stateDir, runID
	ctx, stop := context.WithCancel(testCtx(t))
	defer stop()
	done := attachAsync(ctx, t, cfg)
	fs.writeLines(lines)
	waitLines(t, fs, len(fs.written))
	stop()
	require.NoError(t, waitErr(t, done, "attach"))
	_, err := os.Stat(filepath.Join(stateDir, sentLogName(fs.runID)))
	require.NoError(t, err, "a detached run keeps its sent log")
}

// TestAttachFinishesRunsOfAGoneProcessIntegration: a process's two runs
// (two run ids) are left unfinished by detached attaches; the process
// writes on and exits while no collector watches it. `attach --pid P
// --run-id X` finishes run X alone (every line once, its finish, its sent
// log removed), `attach --pid P` then the other, and a third attach finds
// no unfinished run of P: exit 2, saying so and naming the state dir.
func TestAttachFinishesRunsOfAGoneProcessIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	lines, _, _ := fixtureLines(t)
	b := startConservationBroker(t, 0)
	fs := startFakeServer(t)
	stateDir := filepath.Join(t.TempDir(), "state")
	runX, runY := "run-x", "run-y"
	k := len(lines) / 3

	fs.runID = runX
	fs.lines = watchLines(t, b, runX)
	attachDetached(t, b, fs, stateDir, runX, lines[:k])
	fs.runID = runY
	fs.lines = watchLines(t, b, runY)
	attachDetached(t, b, fs, stateDir, runY, nil)
	fs.writeLines(lines[k:])
	fs.exit()

	attach := func(runID string) error {
		cfg := attachCfg(t, b, fs)
		cfg.Attach.StateDir, cfg.RunID = stateDir, runID
		return waitErr(t, attachAsync(testCtx(t), t, cfg), "attach")
	}
	sentOf := func(runID string) error {
		_, err := os.Stat(filepath.Join(stateDir, sentLogName(runID)))
		return err
	}

	require.NoError(t, attach(runX))
	fs.runID = runX
	var row conservation.Row
	checkConservation(t, b, fs, &row)
	require.Zero(t, row.Flagged, "run X complete")
	require.True(t, os.IsNotExist(sentOf(runX)), "run X's sent log is removed once it finished")
	require.NoError(t, sentOf(runY), "--run-id X leaves run Y alone")
	require.Zero(t, countTypes(decodedOf(streamOf(t, jsConn(t, b.url), runY)))[events.TypeRunFinished])

	require.NoError(t, attach(""))
	fs.runID = runY
	checkConservation(t, b, fs, &row)
	require.Zero(t, row.Flagged)
	require.True(t, os.IsNotExist(sentOf(runY)))

	for _, runID := range []string{"", runX} {
		err := attach(runID)
		require.Error(t, err)
		require.Equal(t, cli.ExitUsage, cli.Code(err), err.Error())
		want := "no unfinished run of pid " + strconv.Itoa(fs.pid)
		if runID != "" {
			want = "no unfinished run " + runID + " of pid " + strconv.Itoa(fs.pid)
		}
		require.Contains(t, err.Error(), want)
		require.Contains(t, err.Error(), "in the state dir "+stateDir)
	}
}

// TestAttachFinishesTheRunOfAReusedPidIntegration: a run of process A is
// left unfinished by a detached attach, A writes on and exits; its pid
// now names process B (the test gives A's sent log B's pid: a pid is
// reused only after the kernel went round its pids). `attach --pid B`
// finishes A's run first (every line once, its finish), then measures B
// as a run of its own to B's exit.
func TestAttachFinishesTheRunOfAReusedPidIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	lines, _, _ := fixtureLines(t)
	b := startConservationBroker(t, 0)
	stateDir := filepath.Join(t.TempDir(), "state")
	a := startFakeServer(t)
	a.lines = watchLines(t, b, a.runID)
	k := len(lines) / 2
	attachDetached(t, b, a, stateDir, "", lines[:k])
	a.writeLines(lines[k:])
	a.exit()

	bs := startFakeServer(t)
	bs.lines = watchLines(t, b, bs.runID)
	sentPath := filepath.Join(stateDir, sentLogName(a.runID))
	raw, err := os.ReadFile(sentPath)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	require.Equal(t, float64(a.pid), m["pid"], "the sent log names the run's pid")
	m["pid"] = bs.pid
	raw, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(sentPath, raw, 0o644))

	cfg := attachCfg(t, b, bs)
	cfg.Attach.StateDir = stateDir
	done := attachAsync(testCtx(t), t, cfg)
	bs.writeLines(lines[:1])
	waitLines(t, bs, 1) // B's attach runs: A's run was finished before it
	_, err = os.Stat(sentPath)
	require.True(t, os.IsNotExist(err), "A's sent log is removed once its run finished")
	var row conservation.Row
	checkConservation(t, b, a, &row)
	bs.writeLines(lines[1:])
	bs.exit()
	require.NoError(t, waitErr(t, done, "attach"))
	checkConservation(t, b, bs, &row)
	require.Zero(t, row.Flagged)
}

// TestSentLogOfAnEarlierVersion: a sent log without whose run it counts
// (written before they were recorded) is not found by pid, is resumed by
// its run's attach as before, and says whose run it is from then on.
func TestSentLogOfAnEarlierVersion(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, sentLogName("old-run"))
	old := `{"streams":{"log":[[1,300]]},"samples":4,"last_sample_seq":1764000000000000000,"started":"2026-12-01T10:00:00Z"}`
	require.NoError(t, os.WriteFile(path, []byte(old), 0o644))
	require.Empty(t, goneRuns(dir, "testhost", 4242, 0, "", ""), "an old sent log is not found by pid")

	s, err := openSentLog(path)
	require.NoError(t, err)
	require.Equal(t, uint64(4), s.Samples)
	a := attachedRun{RunID: "old-run", Host: "testhost", PID: 4242, StartTicks: 77, Log: "/var/log/llama.log"}
	require.NoError(t, s.identify(a))
	got := goneRuns(dir, "testhost", 4242, 0, "", "")
	require.Len(t, got, 1)
	require.Equal(t, "old-run", got[0].RunID)
	require.Equal(t, "/var/log/llama.log", got[0].Log)
	require.Equal(t, uint64(4), got[0].Samples, "what the old log counted is kept")
	require.Empty(t, goneRuns(dir, "otherhost", 4242, 0, "", ""), "another host's run")
	require.Empty(t, goneRuns(dir, "testhost", 4242, 77, "", ""), "the process runs: not gone")
	require.Len(t, goneRuns(dir, "testhost", 4242, 78, "", ""), 1, "pid 4242 is another process now")
	require.Empty(t, goneRuns(dir, "testhost", 4242, 0, "", "other-run"), "--run-id names another run")
}
