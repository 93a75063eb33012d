package collector

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/sources/procwrap/procwraptest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// TestAttachIntegration attaches to a real process that writes the 4B log
// to a file slowly, rotating it by rename twice. The first collector is
// stopped mid-file while the broker's acknowledgements of its last events
// are held back (a proxy on the way); the process writes on and rotates the
// file while no collector is attached; a second collector with the same
// state dir resumes the same run. The stream ends up with every log line
// exactly once, and one run-finished event, after the process exited, as
// the run's last event.
func TestAttachIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	lines, _, _ := fixtureLines(t)
	srv := startBroker(t)
	proxy := natstest.StartProxy(t, srv.Addr().String())
	js := jsConn(t, srv.ClientURL())

	dir := t.TempDir()
	logPath := filepath.Join(dir, "llama-server.log")
	g := func(name string) string { return filepath.Join(dir, name) }
	exists := func(name string) func() bool {
		return func() bool { _, err := os.Stat(g(name)); return err == nil }
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	// The child writes its first line and waits until the collector read
	// it: a file created and renamed away between two of the follower's
	// polls is never read (a limit the follower states), and on a loaded
	// machine the first 300 lines and the rotation took less than the
	// collector's start.
	child := exec.Command(exe, procwraptest.Arg, "src="+absPath(t, fixture4B), "logto="+logPath, "delay=1ms",
		"print=0:1", "mark="+g("m0"), "gate="+g("g0"),
		"print=1:300", "rotate", "print=300:600", "mark="+g("m1"), "gate="+g("g1"),
		"print=600:700", "mark="+g("m2"), "gate="+g("g2"),
		"print=700:900", "rotate", "print=900:1000", "mark="+g("m3"), "gate="+g("g3"),
		"print=1000:", "exit=0")
	require.NoError(t, child.Start())
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	t.Cleanup(func() {
		_ = child.Process.Kill()
		<-exited
	})
	pid := child.Process.Pid
	start, err := procStartTime("/proc", pid)
	require.NoError(t, err)
	runID := fmt.Sprintf("testhost-pid%d-%d", pid, start)

	cfg := testConfig(t)
	cfg.NATS.URL = proxy.URL()
	cfg.Attach.PID = pid
	cfg.Attach.Log = logPath
	// The acks are held below for as long as the test's waits take, on a
	// loaded machine longer than the default cut-off (3 unanswered pings,
	// 6 s) and the default ack timeout (5 s, then the events go to the
	// spool): here they are late acks of a present broker, so both bounds
	// lie beyond every wait of the test.
	cfg.NATS.PingInterval = waitFor
	cfg.NATS.AckTimeout = waitFor
	// The second collector connects through the proxy while the child
	// runs to its end: on a loaded machine its first connection took
	// longer than the default 5 s, its events went to the spool, and the
	// child exited before the connection came back (the spool is the next
	// collector's to deliver, as the collector says). The broker is up:
	// the connection gets as long as the test's waits.
	cfg.NATS.ConnectTimeout = waitFor
	var logs syncBuffer
	attach := func(ctx context.Context) <-chan error {
		ch := make(chan error, 1)
		log := zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), &logs)).Level(zerolog.DebugLevel)
		go func() { ch <- Attach(ctx, cfg, newTestIO().io(), log) }()
		return ch
	}
	wait := func(ch <-chan error, what string) error {
		t.Helper()
		select {
		case err := <-ch:
			return err
		case <-time.After(waitFor):
			t.Fatalf("%s did not return", what)
			return nil
		}
	}
	linesIn := func(n int) func() bool {
		return func() bool {
			count, _, _ := lineSeqs(decodedOf(streamOf(t, js, runID)))
			return len(count) >= n
		}
	}

	// The first collector follows the file across a rotation.
	ctx1, stop1 := context.WithCancel(testCtx(t))
	defer stop1()
	first := attach(ctx1)
	eventually(t, "the child's first line", exists("m0"))
	eventually(t, "its first line in the stream", linesIn(1))
	require.NoError(t, os.WriteFile(g("g0"), nil, 0o644))
	eventually(t, "the child to write and rotate", exists("m1"))
	eventually(t, "600 lines in the stream", linesIn(600))

	// Its last events reach the broker, their acks do not (yet), and it is
	// stopped.
	proxy.HoldServer()
	require.NoError(t, os.WriteFile(g("g1"), nil, 0o644))
	eventually(t, "the child to write 100 more lines", exists("m2"))
	eventually(t, "700 lines in the stream", linesIn(700))
	stop1()
	eventually(t, "the first attach to detach while the acks are held", func() bool {
		return strings.Contains(logs.String(), "detaching: new log records are left to the next attach")
	})
	proxy.ReleaseServer()
	require.NoError(t, wait(first, "the first attach"))
	msgs := streamOf(t, js, runID)
	require.Zero(t, countTypes(decodedOf(msgs))[events.TypeRunFinished], "a detached collector does not finish the run")

	// Unobserved, the child writes on and rotates the file again.
	require.NoError(t, os.WriteFile(g("g2"), nil, 0o644))
	eventually(t, "the child to write and rotate while detached", exists("m3"))

	// The second collector resumes the run and sees the process exit.
	second := attach(testCtx(t))
	require.NoError(t, os.WriteFile(g("g3"), nil, 0o644))
	require.NoError(t, wait(second, "the second attach"))
	select {
	case err := <-exited:
		require.NoError(t, err)
		exited <- nil // for the cleanup
	case <-time.After(waitFor):
		t.Fatal("the child did not exit")
	}

	msgs = streamOf(t, js, runID)
	evs := decodedOf(msgs)
	count, text, stream := lineSeqs(evs)
	requireEachLineOnce(t, count, len(lines))
	for i, l := range lines {
		seq := uint64(i + 1)
		require.Equal(t, lineText(l), text[seq], "line %d", seq)
		require.Equal(t, "log", stream[seq])
	}
	ids := map[string]int{}
	for _, m := range msgs {
		ids[m.ID]++
		require.Equal(t, m.ID, m.MsgID)
	}
	for id, n := range ids {
		require.Equal(t, 1, n, "event %s", id)
	}
	n := countTypes(evs)
	require.Equal(t, 1, n[events.TypeRunStarted], "the second attach's run-started is a duplicate")
	require.Equal(t, 1, n[events.TypeRunFinished])
	require.NotZero(t, n[events.TypeFDInfoSample])
	last := msgs[len(msgs)-1]
	require.Equal(t, events.TypeRunFinished, last.Type, "run-finished is the run's last event")
	require.Zero(t, last.Finished.Detail.DroppedEvents)
	require.Equal(t, runID+"/finished/0", last.ID)

	// The run-finished event announces what both attaches sent, which is
	// exactly what the stream holds, and the run's wall time.
	sent := last.Finished.Info.Sent
	require.NotNil(t, sent)
	samples := map[uint64]bool{}
	var lastSample uint64
	for _, d := range evs {
		if d.Sample != nil {
			samples[d.Sample.Seq] = true
			lastSample = max(lastSample, d.Sample.Seq)
		}
	}
	require.Equal(t, []split.StreamSent{{Stream: "log", Lines: uint64(len(lines)), LastSeq: uint64(len(lines))}}, sent.Streams)
	require.Equal(t, uint64(len(samples)), sent.Samples)
	require.Equal(t, lastSample, sent.LastSampleSeq)
	require.Positive(t, last.Finished.Detail.Duration)
	f := split.NewFold(split.Options{})
	for _, d := range evs {
		f.Apply(d.Input())
	}
	require.Empty(t, f.Missing(), "the stream is complete by content")
	_, err = os.Stat(filepath.Join(cfg.Attach.StateDir, sentLogName(runID)))
	require.True(t, os.IsNotExist(err), "the sent log is removed once the run finished")
}
