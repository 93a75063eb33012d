package collector

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/disktest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// diskFullConfig is a collector config whose spool is on a small tmpfs of
// the test (a real disk that fills up: it skips where it cannot mount
// one), with no broker where its NATS URL points; it returns the tmpfs
// and that broker's port.
func diskFullConfig(t *testing.T, runID string) (config.Collector, string, int) {
	t.Helper()
	fs := disktest.Tmpfs(t, 4<<20)
	url, port := deadBroker(t)
	cfg := testConfig(t)
	cfg.NATS.URL = url
	cfg.RunID = runID
	cfg.Spool.Dir = filepath.Join(fs, "spool")
	cfg.ShutdownTimeout = 2 * time.Second
	return cfg, fs, port
}

// TestRunSpoolDiskFullIntegration runs the 4B log with the broker away
// and the spool's disk full (a real ENOSPC: a tmpfs filled by another
// file after the lane's spool was first opened, so it holds its reserve):
// every log event is dropped, but the run's start and finish are spooled
// from the reserve; the exit code is 75 (events wait), a WARN names the
// run; once the broker is back and the spool delivered, the run's split
// says events_dropped.
func TestRunSpoolDiskFullIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	cfg, fs, port := diskFullConfig(t, "disk-full-1")
	// A collector of the lane ran here before: the lane's spool exists.
	_, err := Replay(testCtx(t), cfg, nil, newTestIO().io(), testLogger(t))
	require.NoError(t, err)
	disktest.Fill(t, fs, "filler")

	var logs syncBuffer
	argv := childArgv(t, "src="+absPath(t, fixture4B), "print=0:", "exit=0")
	code, err := Run(testCtx(t), cfg, argv, newTestIO().io(), zerolog.New(&logs))
	require.NoError(t, err)
	out := logs.String()
	require.Equal(t, cli.ExitTempFail, code, "events wait in the spool:\n%s", out)
	require.Contains(t, out, `"level":"warn","run_id":"disk-full-1"`)
	require.Contains(t, out, "events of this run were dropped")
	require.Contains(t, out, "spool disk full")

	require.NoError(t, os.Remove(filepath.Join(fs, "filler")))
	srv := startBrokerAt(t, t.TempDir(), port)
	st, err := Replay(testCtx(t), cfg, nil, newTestIO().io(), testLogger(t))
	require.NoError(t, err)
	require.Zero(t, st.Left)
	msgs := decodedOf(streamOf(t, jsConn(t, srv.ClientURL()), cfg.RunID))
	n := countTypes(msgs)
	require.Equal(t, 1, n[events.TypeRunStarted], "the run's start survived the full disk")
	require.Equal(t, 1, n[events.TypeRunFinished], "the run's finish survived the full disk")
	fold := split.NewFold(split.Options{})
	for _, d := range msgs {
		fold.Apply(d.Input())
		if d.Finished != nil {
			require.Positive(t, d.Finished.Detail.DroppedEvents)
		}
	}
	require.Contains(t, fold.Report().Flags, split.FlagEventsDropped)
}

// TestRunSpoolDiskFullNoReserveIntegration: the spool's disk was full
// before the lane's spool ever opened (no reserve) and the broker never
// comes back: the run's start and finish, kept in memory, are lost at the
// exit, which says so (an ERROR and a WARN with the run) and exits 1.
func TestRunSpoolDiskFullNoReserveIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	cfg, fs, _ := diskFullConfig(t, "disk-full-2")
	require.NoError(t, os.MkdirAll(cfg.Spool.Dir, 0o700))
	disktest.Fill(t, fs, "filler")

	var logs syncBuffer
	argv := childArgv(t, "src="+absPath(t, fixture4B), "print=0:100", "exit=0")
	code, err := Run(testCtx(t), cfg, argv, newTestIO().io(), zerolog.New(&logs))
	require.NoError(t, err)
	out := logs.String()
	require.Equal(t, cli.ExitFailure, code, out)
	require.Contains(t, out, "no room on the spool's disk for its reserve")
	require.Contains(t, out, `"level":"warn","run_id":"disk-full-2"`)
	require.Contains(t, out, "this run is lost")
}
