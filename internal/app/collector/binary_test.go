package collector

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/sources/procwrap"
)

// binRun is one run of the built collector binary.
type binRun struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
}

// startCollector starts the built cmd/collector with args and env added to
// this process's environment (without the trace variable).
func startCollector(t testing.TB, env []string, args ...string) *binRun {
	t.Helper()
	bin, err := collectorBinary()
	require.NoError(t, err)
	r := &binRun{cmd: exec.Command(bin, args...)}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, procwrap.TraceEnv+"=") && !strings.HasPrefix(kv, "GTTSPLIT_") {
			r.cmd.Env = append(r.cmd.Env, kv)
		}
	}
	r.cmd.Env = append(r.cmd.Env, env...)
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	require.NoError(t, r.cmd.Start())
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
			_ = r.cmd.Wait()
		}
	})
	return r
}

// wait returns the collector's exit code.
func (r *binRun) wait(t *testing.T) int {
	t.Helper()
	return r.waitWithin(t, waitFor)
}

// waitWithin returns the collector's exit code, failing the test when it
// did not exit within d.
func (r *binRun) waitWithin(t *testing.T, d time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return r.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatal("the collector did not exit")
		return -1
	}
}

// TestCollectorBinaryIntegration runs the built `collector run` around a
// real child: passthrough byte for byte, -v and the trace variable, the exit
// code, SIGTERM sent to the collector process, a missing executable, and
// publishing to an embedded nats-server.
func TestCollectorBinaryIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	_, wantOut, wantErr := fixtureLines(t)
	src := "src=" + absPath(t, fixture4B)
	quiet := []string{"--log-level", "error", "--source-dir", t.TempDir()}

	t.Run("passthrough, -v, trace env, exit code", func(t *testing.T) {
		rec := filepath.Join(t.TempDir(), "record.json")
		out := t.TempDir()
		child := childArgv(t, "record="+rec, src, "print=0:", "exit=3")
		r := startCollector(t, nil, append(append(slices.Clone(quiet), "run", "--out", out, "--"), child...)...)
		require.Equal(t, 3, r.wait(t))
		requireSameBytes(t, wantOut, r.stdout.Bytes(), "stdout")
		requireSameBytes(t, wantErr, r.stderr.Bytes(), "stderr")
		rc := readRecord(t, rec)
		require.Equal(t, append(slices.Clone(child[1:]), "-v"), rc.Args)
		v, ok := rc.Lookup(procwrap.TraceEnv)
		require.True(t, ok)
		require.Equal(t, "1", v)
		evs := readJSONL(t, filepath.Join(out, "events.jsonl"))
		require.Equal(t, events.TypeRunFinished, evs[len(evs)-1].Type)
		require.Equal(t, 3, *evs[len(evs)-1].Finished.Info.ExitCode)
	})

	t.Run("verbosity flag and trace env kept", func(t *testing.T) {
		rec := filepath.Join(t.TempDir(), "record.json")
		child := childArgv(t, "record="+rec, "--verbose")
		r := startCollector(t, []string{procwrap.TraceEnv + "=0"},
			append(append(slices.Clone(quiet), "run", "--out", t.TempDir(), "--"), child...)...)
		require.Equal(t, 0, r.wait(t), r.stderr.String())
		rc := readRecord(t, rec)
		require.Equal(t, child[1:], rc.Args)
		v, _ := rc.Lookup(procwrap.TraceEnv)
		require.Equal(t, "0", v)
	})

	t.Run("SIGTERM forwarded", func(t *testing.T) {
		child := childArgv(t, "wait=die")
		r := startCollector(t, nil, append(append(slices.Clone(quiet), "run", "--out", t.TempDir(), "--"), child...)...)
		eventually(t, "the child to be ready", func() bool { return strings.Contains(r.stdout.String(), "ready\n") })
		require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 128+int(syscall.SIGTERM), r.wait(t))
		require.Equal(t, "got SIGTERM\n", r.stderr.String())
	})

	t.Run("missing executable", func(t *testing.T) {
		r := startCollector(t, nil, append(slices.Clone(quiet), "run", "--out", t.TempDir(), "--", "gttsplit-no-such-program", "-m", "x.gguf")...)
		require.Equal(t, 127, r.wait(t))
		require.Equal(t, `collector: cannot run "gttsplit-no-such-program": executable file not found in $PATH`+"\n", r.stderr.String())
	})

	t.Run("publishes to NATS", func(t *testing.T) {
		srv := startBroker(t)
		out := t.TempDir()
		child := childArgv(t, src, "delay=100us", "print=0:")
		// The broker is this test process's, as loaded as the machine: an
		// event it acknowledges late goes to the spool, drained (with
		// back-off) before the collector exits. The default 30 s for that
		// is a production host's; here the drain gets waitFor, and the
		// warnings (spooling, what was left) come with a failure.
		const shutdown = waitFor
		args := []string{"--log-level", "warn", "--source-dir", t.TempDir(),
			"run", "--spool-dir", t.TempDir(), "--run-id", "binary-run-1", "--out", out, "--"}
		r := startCollector(t, []string{"GTTSPLIT_NATS_URL=" + srv.ClientURL(), "GTTSPLIT_SHUTDOWN_TIMEOUT=" + shutdown.String()},
			append(args, child...)...)
		require.Equal(t, 0, r.waitWithin(t, waitFor+shutdown), r.stderr.String())
		msgs := streamOf(t, jsConn(t, srv.ClientURL()), "binary-run-1")
		requireExactlyOnce(t, msgs, readJSONL(t, filepath.Join(out, "events.jsonl")), "binary-run-1", 1564)
	})
}
