package bus

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/disktest"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

func runWire(i int) events.Wire {
	w := wire(i)
	w.Subject = "gttsplit.run.h.l.r"
	return w
}

func reserveSize(t *testing.T, dir string) int64 {
	t.Helper()
	st, err := os.Stat(filepath.Join(dir, reserveFile))
	require.NoError(t, err)
	return st.Size()
}

// TestSpoolDiskFullUsesReserve: on a disk whose only room is what the
// spool's reserve file frees (the segment write fails with ENOSPC while
// the reserve is whole), an ordinary record fails as a full disk
// (errDiskFull) and a run record frees part of the reserve and is
// written, readable after a reopen.
func TestSpoolDiskFullUsesReserve(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openTest(t, dir, 1<<20, 1<<20)
	require.Equal(t, int64(runReserve), reserveSize(t, dir), "the reserve is allocated at open")
	s.write = func(f *os.File, b []byte) (int, error) {
		if reserveSize(t, dir) >= runReserve {
			return 0, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
		}
		return f.Write(b)
	}
	err := s.append(wire(1), false)
	require.ErrorIs(t, err, errDiskFull)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NoError(t, s.append(runWire(2), true))
	require.NoError(t, s.sync())
	require.Less(t, reserveSize(t, dir), int64(runReserve), "the run record used the reserve")
	require.NoError(t, s.close())

	s2 := openTest(t, dir, 1<<20, 1<<20)
	require.Equal(t, []string{runWire(2).ID}, readIDs(t, s2, 1))
	require.True(t, s2.empty())
	require.Equal(t, int64(runReserve), reserveSize(t, dir), "an emptied spool grows its reserve back")
	require.NoError(t, s2.close())
}

// TestSpoolDiskFullTmpfs does the same on a real full disk: a 2 MiB tmpfs
// filled by another file after the spool opened (it needs root to mount
// one, and skips otherwise).
func TestSpoolDiskFullTmpfs(t *testing.T) {
	t.Parallel()
	fs := disktest.Tmpfs(t, 2<<20)
	dir := filepath.Join(fs, "spool")
	s := openTest(t, dir, 1<<20, 1<<20)
	filler := disktest.Fill(t, fs, "filler")
	err := s.append(wire(1), false)
	require.ErrorIs(t, err, errDiskFull)
	require.ErrorIs(t, err, syscall.ENOSPC)
	for i := range 10 {
		require.NoError(t, s.append(runWire(10+i), true), "run record %d", i)
	}
	require.NoError(t, s.sync())
	// What the run records freed beyond their own blocks is taken (by
	// other files, or by ordinary records): the reserve still serves.
	// (An ordinary record may still fit in the last block of the
	// segment.)
	disktest.Fill(t, fs, "filler2")
	extra := 0
	for ; extra < 100; extra++ {
		if err := s.append(wire(100+extra), false); err != nil {
			require.ErrorIs(t, err, errDiskFull)
			break
		}
	}
	require.Less(t, extra, 100, "ordinary records keep failing on a full disk")
	require.NoError(t, s.append(runWire(20), true))
	require.NoError(t, s.close())

	s2 := openTest(t, dir, 1<<20, 1<<20)
	require.Len(t, readIDs(t, s2, 0), 11+extra)
	require.NoError(t, os.Remove(filler))
	require.NoError(t, os.Remove(filepath.Join(fs, "filler2")))
	s2.rewind()
	readIDs(t, s2, 11+extra)
	require.True(t, s2.empty())
	require.Equal(t, int64(runReserve), reserveSize(t, dir), "room again: the reserve is whole")
	require.NoError(t, s2.close())
}

// heldPublisher is a publisher on a broker that is away, whose spool's
// disk is full with no reserve left: every segment write fails with
// ENOSPC.
func heldPublisher(t *testing.T) (*Publisher, string, int, *lockedWriter) {
	t.Helper()
	dead, err := natstest.NewServer(t.TempDir(), 0)
	require.NoError(t, err)
	url, port := dead.ClientURL(), natstest.Port(dead)
	natstest.Shutdown(dead)
	logs := &lockedWriter{w: &bytes.Buffer{}}
	log := zerolog.New(logs).Level(zerolog.DebugLevel)
	nc, err := Connect(context.Background(), Config{URL: url, ConnectTimeout: time.Second}, DialOptions{ReconnectWait: 20 * time.Millisecond}, log)
	require.NoError(t, err)
	cfg := DefaultPublisherConfig()
	cfg.RetryInterval = 10 * time.Millisecond
	cfg.Spool.Dir = t.TempDir()
	p, err := NewPublisher(nc, cfg, log)
	require.NoError(t, err)
	p.pump.mu.Lock() // the pump reads it under its mu
	p.pump.sp.write = func(f *os.File, _ []byte) (int, error) {
		return 0, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	p.pump.sp.reserve = 0
	p.pump.mu.Unlock()
	return p, url, port, logs
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

// runOfThree is a run-started, a log and a run-finished event of run r.
func runOfThree(t *testing.T, r string) []event.Event {
	t.Helper()
	o := events.Origin{RunID: r, Host: "h", Lane: "l"}
	st, err := events.NewRunStarted(split.RunInfo{ID: r, Host: "h", Lane: "l", Started: time.Now()}, events.StartDetail{})
	require.NoError(t, err)
	lg, err := events.NewLogLines(o, []split.Line{{Stream: "stderr", Seq: 1, Text: "x"}})
	require.NoError(t, err)
	fin, err := events.NewRunFinished(o, split.FinishInfo{Finished: time.Now()}, events.FinishDetail{})
	require.NoError(t, err)
	return []event.Event{st, lg, fin}
}

// TestPublisherDiskFullHoldsRunEvents: with the broker away and the
// spool's disk full (no reserve), a run's log event is dropped but its
// start and finish are kept in memory; when the broker comes back they
// are delivered (and acknowledged), and the run is not lost.
func TestPublisherDiskFullHoldsRunEvents(t *testing.T) {
	skipShortInternal(t)
	t.Parallel()
	p, _, port, logs := heldPublisher(t)
	evs := runOfThree(t, "held-1")
	var acked atomic.Int32
	for _, ev := range evs {
		require.NoError(t, p.Publish(context.Background(), ev, func() { acked.Add(1) }))
	}
	require.NoError(t, p.Flush(context.Background()), "a flush does not wait for the held events")
	require.Equal(t, uint64(1), p.Dropped(), "the log event is dropped")
	require.Zero(t, acked.Load())

	srv := natstest.StartAt(t, t.TempDir(), port)
	js := natstest.JetStream(t, srv.ClientURL())
	_, err := EnsureStream(context.Background(), js, DefaultStreamConfig(), zerolog.Nop())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return acked.Load() == 2 }, 30*time.Second, 10*time.Millisecond, "the held start and finish are delivered")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, p.Close(ctx))
	require.False(t, p.RunLost("held-1"))
	require.Equal(t, uint64(1), p.DroppedOf("held-1"))
	require.Zero(t, p.Leftover().Events)
	s, err := js.Stream(context.Background(), DefaultStream)
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	require.Equal(t, uint64(2), info.State.Msgs)
	require.Contains(t, logs.String(), "spool disk full")
}

// TestPublisherDiskFullLosesRunAtClose: the broker never comes back: at
// Close the held start and finish are lost, counted, and said with their
// run.
func TestPublisherDiskFullLosesRunAtClose(t *testing.T) {
	skipShortInternal(t)
	t.Parallel()
	p, _, _, logs := heldPublisher(t)
	for _, ev := range runOfThree(t, "held-2") {
		require.NoError(t, p.Publish(context.Background(), ev, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, p.Close(ctx))
	require.True(t, p.RunLost("held-2"))
	require.Equal(t, uint64(3), p.DroppedOf("held-2"))
	require.Zero(t, p.Leftover().Events)
	out := logs.String()
	require.Equal(t, 2, strings.Count(out, `"run_id":"held-2"`), out)
	require.Contains(t, out, "that run is lost")
}

func skipShortInternal(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs an embedded nats-server")
	}
}
