package natstest_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
	"unsafe"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gttsplit/gttsplit/internal/natstest"
)

// leftEnv, set, makes this test binary run TestLeftBehind alone, which
// leaves what it names behind (leftStore or leftServer), and check what
// outlived it with natstest.VerifyTestMain.
const leftEnv = "GTTSPLIT_NATSTEST_LEFT"

const (
	leftStore  = "store"
	leftServer = "server"
)

// VerifyTestMain says on stderr, and does not fail, a file store an
// embedded server left behind when it shut down (its state-flush loop and
// the access-time ticker, nothing else of the server); a server left
// running still fails the run. Each case is a run of this test binary of
// its own (TestLeftBehind), so that the failure is observed, not suffered;
// each waits out the check's bound (15 s) before it decides.
func TestVerifyTestMainIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts nats-server")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, tc := range []struct {
		left  string
		fails bool
		says  []string
	}{
		{left: leftStore, says: []string{"natstest: an embedded server's file store outlived its server", "flushStreamStateLoop"}},
		{left: leftServer, fails: true, says: []string{"goleak: Errors on successful test run", "github.com/nats-io/nats-server/v2/server."}},
	} {
		t.Run(tc.left, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, exe, "-test.run=^TestLeftBehind$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), leftEnv+"="+tc.left)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			require.Contains(t, stdout.String(), "--- PASS: TestLeftBehind", "the run's own test passed")
			if tc.fails {
				var exit *exec.ExitError
				require.True(t, errors.As(err, &exit), "the run failed (%v)", err)
				require.Equal(t, 1, exit.ExitCode())
			} else {
				require.NoError(t, err)
			}
			for _, s := range tc.says {
				require.Contains(t, stderr.String(), s)
			}
		})
	}
}

// TestLeftBehind, run by TestVerifyTestMainIntegration, leaves behind what
// leftEnv names: a file store open (what an embedded server leaves when it
// shuts down: leaveStore), or a server still running.
func TestLeftBehind(t *testing.T) {
	switch os.Getenv(leftEnv) {
	case leftStore:
		leaveStore(t)
	case leftServer:
		_, err := natstest.NewServer(t.TempDir(), 0)
		require.NoError(t, err)
	default:
		t.Skip("run by TestVerifyTestMainIntegration")
	}
}

// newFileStore is nats-server's own constructor of a file store, the one
// its streams' stores and an atomic batch's are made with. It is
// unexported, and the server leaves a store behind only in a race (a batch
// taken as its stream stops) or after a crash (a partial batch whose
// staged messages cannot be read at the restart): the test makes the
// store itself. Its result is the store, a *fileStore.
//
//go:linkname newFileStore github.com/nats-io/nats-server/v2/server.newFileStore
func newFileStore(fcfg server.FileStoreConfig, cfg server.StreamConfig) (unsafe.Pointer, error)

// leaveStore leaves a file store open, as the embedded server does with
// one it opens at its start to restore a partial atomic batch whose last
// staged message it cannot read: its state-flush loop and the access-time
// ticker outlive the test, nothing else.
func leaveStore(t *testing.T) {
	fs, err := newFileStore(server.FileStoreConfig{StoreDir: t.TempDir()}, server.StreamConfig{Name: "left", Storage: server.FileStorage})
	require.NoError(t, err)
	require.NotNil(t, fs)
	err = goleak.Find()
	require.Error(t, err, "the file store's goroutines")
	require.Contains(t, err.Error(), "flushStreamStateLoop")
}
