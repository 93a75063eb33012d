package collector

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// TestRunAfterPoisonedSpoolIntegration leaves in the lane's spool an
// event the broker refuses for good (an id over 64 KB, spooled while the
// broker was away); a later ordinary run of the same lane, with the broker
// up, sets it aside in rejected/ and publishes every one of its own events.
func TestRunAfterPoisonedSpoolIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	srv := startBroker(t)
	cfg := testConfig(t)

	// The poison, spooled in the lane's spool with no broker.
	deadURL, _ := deadBroker(t)
	cc := bus.DefaultConfig()
	cc.URL = deadURL
	nc, err := bus.Connect(testCtx(t), cc, bus.DialOptions{}, testLogger(t))
	require.NoError(t, err)
	pc := bus.DefaultPublisherConfig()
	pc.Spool.Dir, pc.Name = cfg.Spool.Dir, cfg.Lane
	p, err := bus.NewPublisher(nc, pc, testLogger(t))
	require.NoError(t, err)
	o := events.Origin{RunID: strings.Repeat("r", 70<<10), Host: "testhost", Lane: cfg.Lane}
	poison, err := events.NewLogLines(o, []split.Line{{Stream: "stderr", Seq: 1, Text: "x"}})
	require.NoError(t, err)
	require.NoError(t, p.Publish(testCtx(t), poison, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, p.Close(ctx))
	require.Positive(t, segmentBytes(pc.Dir()))

	cfg.NATS.URL = srv.ClientURL()
	cfg.RunID = "after-poison-1"
	cfg.Out = t.TempDir()
	// 2 ms a line: the child outlives the sampler's first sample even on
	// a loaded machine (a child gone before it leaves the run without
	// one, which the check below refuses).
	argv := childArgv(t, "src="+absPath(t, fixture4B), "delay=2ms", "print=0:40", "exit=0")
	code, err := Run(testCtx(t), cfg, argv, newTestIO().io(), testLogger(t))
	require.NoError(t, err)
	require.Equal(t, 0, code)

	recorded := readJSONL(t, filepath.Join(cfg.Out, "events.jsonl"))
	requireExactlyOnce(t, streamOf(t, jsConn(t, srv.ClientURL()), cfg.RunID), recorded, cfg.RunID, 40)
	files, err := filepath.Glob(filepath.Join(pc.Dir(), bus.RejectedDir, "*.json"))
	require.NoError(t, err)
	require.Len(t, files, 1, "the refused event is set aside")
	b, err := os.ReadFile(files[0])
	require.NoError(t, err)
	require.Contains(t, string(b), "header")
}

// TestRunFullSpoolFlaggedIntegration runs with the broker away and a spool
// that holds a fraction of the run: the rest is dropped, the run's finish
// still goes to the spool (its reserve), the exit warns what waits where
// and that events of the run were dropped, and exits 75 (events wait);
// once a broker is there the split folded from the stream, like the local
// --out split, is flagged events_dropped.
func TestRunFullSpoolFlaggedIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	url, port := deadBroker(t)

	cfg := testConfig(t)
	cfg.NATS.URL = url
	cfg.RunID = "full-spool-1"
	cfg.Out = t.TempDir()
	cfg.Spool.MaxBytes = 20 << 10
	cfg.ShutdownTimeout = 2 * time.Second
	var logs syncBuffer
	argv := childArgv(t, "src="+absPath(t, fixture4B), "print=0:", "exit=0")
	code, err := Run(testCtx(t), cfg, argv, newTestIO().io(), zerolog.New(&logs))
	require.NoError(t, err)
	require.Equal(t, cli.ExitTempFail, code, "the child exited 0, events wait in the spool")
	require.Contains(t, logs.String(), `"message":"events left undelivered in the spool"`)
	require.Contains(t, logs.String(), "events of this run were dropped")

	local, err := os.ReadFile(filepath.Join(cfg.Out, "split.json"))
	require.NoError(t, err)
	require.Contains(t, string(local), `"events_dropped"`)

	srv := startBrokerAt(t, t.TempDir(), port)
	pc := bus.DefaultPublisherConfig()
	pc.Spool.Dir, pc.Name = cfg.Spool.Dir, cfg.Lane
	cc := bus.DefaultConfig()
	cc.URL = srv.ClientURL()
	nc, err := bus.Connect(testCtx(t), cc, bus.DialOptions{}, testLogger(t))
	require.NoError(t, err)
	p, err := bus.NewPublisher(nc, pc, testLogger(t))
	require.NoError(t, err)
	js := jsConn(t, srv.ClientURL())
	_, err = bus.EnsureStream(testCtx(t), js, bus.DefaultStreamConfig(), testLogger(t))
	require.NoError(t, err)
	eventually(t, "the run's finish drained", func() bool {
		return countTypes(decodedOf(streamOf(t, js, cfg.RunID)))[events.TypeRunFinished] == 1
	})
	require.NoError(t, p.Close(testCtx(t)))

	fold := split.NewFold(split.Options{})
	var fin *events.Decoded
	for _, m := range streamOf(t, js, cfg.RunID) {
		fold.Apply(m.Input())
		if m.Finished != nil {
			fin = &m.Decoded
		}
	}
	require.NotNil(t, fin)
	require.Positive(t, fin.Finished.Detail.DroppedEvents)
	require.Contains(t, fold.Report().Flags, split.FlagEventsDropped)
}
