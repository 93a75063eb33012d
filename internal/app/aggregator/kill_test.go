package aggregator

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/config"
)

// aggregatorBin is cmd/aggregator built once for the package's tests
// (each build took 20-30 s of a loaded machine): in dir, removed when the
// tests end (TestMain).
var aggregatorBin struct {
	once      sync.Once
	dir, path string
	err       error
}

// buildAggregator builds cmd/aggregator, once for all the package's
// tests, and returns its path.
func buildAggregator(t testing.TB) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain to build cmd/aggregator")
	}
	b := &aggregatorBin
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "aggregator-bin-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "aggregator")
		if out, err := exec.Command(gobin, "build", "-o", b.path, "github.com/gttsplit/gttsplit/cmd/aggregator").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./cmd/aggregator: %w\n%s", err, out)
		}
	})
	require.NoError(t, b.err)
	return b.path
}

// removeAggregatorBin removes what buildAggregator built.
func removeAggregatorBin() {
	if aggregatorBin.dir != "" {
		_ = os.RemoveAll(aggregatorBin.dir)
	}
}

// child is one `aggregator serve` process.
type child struct {
	cmd  *exec.Cmd
	done chan error
}

// startChild runs `aggregator serve` against the test's NATS server (as
// GTTSPLIT_NATS_URL) with a JSON sink in jsonDir; its output goes to
// files under logDir.
func startChild(t testing.TB, bin, url, jsonDir, logDir, name string) *child {
	t.Helper()
	return startChildEnv(t, bin, url, jsonDir, logDir, name, "GTTSPLIT_CONSUMER_ACK_WAIT=2s", "GTTSPLIT_CONSUMER_CHECKPOINT_INTERVAL=500ms")
}

// startChildEnv is startChild with more environment variables.
func startChildEnv(t testing.TB, bin, url, jsonDir, logDir, name string, env ...string) *child {
	t.Helper()
	return startServeChild(t, bin, url, logDir, name, []string{"--json-dir", jsonDir, "--format", "json", "--log-level", "debug"}, env...)
}

// startServeChild runs `aggregator serve --http 127.0.0.1:0 --store
// <logDir>/store` with args and env added; its output goes to files under
// logDir.
func startServeChild(t testing.TB, bin, url, logDir, name string, args []string, env ...string) *child {
	t.Helper()
	stdout, err := os.Create(filepath.Join(logDir, name+".stdout"))
	require.NoError(t, err)
	stderr, err := os.Create(filepath.Join(logDir, name+".stderr"))
	require.NoError(t, err)
	cmd := exec.Command(bin, append([]string{"serve", "--http", "127.0.0.1:0", "--store", filepath.Join(logDir, "store")}, args...)...)
	cmd.Env = append(append(os.Environ(), "GTTSPLIT_NATS_URL="+url), env...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, done: make(chan error, 1)}
	go func() {
		c.done <- cmd.Wait()
		stdout.Close()
		stderr.Close()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(logDir, name+".stderr"))
			t.Logf("%s stderr:\n%s", name, b)
		}
	})
	return c
}

// wait waits for the process to exit and returns its error.
func (c *child) wait(t testing.TB) error {
	t.Helper()
	select {
	case err := <-c.done:
		c.done <- err // for the cleanup
		return err
	case <-time.After(waitFor):
		t.Fatal("aggregator did not exit")
		return nil
	}
}

// TestServeKill9Integration runs `aggregator serve` as a real process,
// SIGKILLs it mid-run (after a third of the 4B run was acknowledged and
// while it holds the second third), starts another on the same server and
// state bucket, and publishes the rest: after a SIGTERM (which must drain
// and exit 0) the JSON sink holds the uninterrupted split, byte for byte,
// written once.
func TestServeKill9Integration(t *testing.T) {
	skipShort(t)
	bin := buildAggregator(t)
	fx := loadFixture(t, fixture4B)
	// The split the tests compare with is what the command prints.
	out, err := exec.Command(bin, "replay", "--format", "json", fx.Path).Output()
	require.NoError(t, err)
	require.Equal(t, string(compact(t, fx.Want))+"\n", string(out), "aggregator replay --format json: one JSON line")
	b := startBroker(t)
	durable := config.DefaultAggregator().Consumer.Fleet.Group
	jsonDir, logDir := t.TempDir(), t.TempDir()
	third := len(fx.Wires) / 3

	first := startChild(t, bin, b.url, jsonDir, logDir, "first")
	eventually(t, "the first aggregator's consumer", func() bool {
		_, err := b.consumerInfo(durable)
		return err == nil
	})
	b.publish(t, fx.Wires[:third]...)
	b.waitAcked(t, durable)
	b.publish(t, fx.Wires[third:2*third]...)
	eventually(t, "the second third delivered", func() bool {
		ci, err := b.consumerInfo(durable)
		return err == nil && ci.Delivered.Stream >= uint64(2*third)
	})
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	err = first.wait(t)
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())
	ci, err := b.consumerInfo(durable)
	require.NoError(t, err)
	t.Logf("killed with %d messages unacknowledged", ci.NumAckPending)

	second := startChild(t, bin, b.url, jsonDir, logDir, "second")
	b.publish(t, fx.Wires[2*third:]...)
	eventually(t, "the split", func() bool {
		_, err := os.Stat(filepath.Join(jsonDir, "splits.jsonl"))
		return err == nil && len(sinkLines(t, jsonDir)) > 0
	})
	b.waitAcked(t, durable)
	require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, second.wait(t), "SIGTERM drains and exits 0")

	docs := sinkDocs(t, jsonDir)
	require.Len(t, docs, 1)
	require.Equal(t, string(fx.Want), string(docs[fx.Origin.RunID]))
	lines := sinkLines(t, jsonDir)
	require.Len(t, lines, 1, "one split, not an early one and a late one")
	require.Equal(t, string(compact(t, fx.Want)), string(lines[0].raw))
	st := b.state(t, fx.Origin.RunID)
	require.True(t, st.Closed)
	require.Equal(t, 1, st.Splits)
	printed, err := os.ReadFile(filepath.Join(logDir, "second.stdout"))
	require.NoError(t, err)
	require.Equal(t, string(compact(t, fx.Want))+"\n", string(printed))
}
