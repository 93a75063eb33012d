package fleet

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/natstest"
)

// overlapHandler's Release waits (up to a bound) for the Releases of every
// partition held to have begun, and records how many ran at once.
type overlapHandler struct {
	handler
	held int
	wait time.Duration

	mu      sync.Mutex
	running int
	most    int
	begun   chan struct{}
	n       int
}

func (h *overlapHandler) Release(ctx context.Context, l *Lease) {
	h.mu.Lock()
	h.running++
	h.most = max(h.most, h.running)
	h.n++
	if h.n == h.held {
		close(h.begun)
	}
	h.mu.Unlock()
	select {
	case <-h.begun:
	case <-time.After(h.wait):
	}
	h.mu.Lock()
	h.running--
	h.mu.Unlock()
	h.handler.Release(ctx, l)
}

// A stopping member hands every partition over at once: the Handler's
// Releases run side by side (each partition's hand-over is as long as its
// own, not the sum of all), and every lease key is deleted when Run
// returns, so that the next owner takes them without waiting out their
// time to live. Freeze, before, stops the assignment while the leases are
// kept.
func TestStopReleasesEveryLeaseAtOnceIntegration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	s := natstest.Start(t)
	f := newTestFleet(t, s.ClientURL())
	js, kv := memberBucket(t, f.url)
	const parts = 16
	cfg := Config{Group: "g", LeaseTTL: time.Minute}
	set := Settings{Partitions: parts, Bucket: testBucket, KV: kv, Heartbeat: 100 * time.Millisecond}
	// Each Release waits for the others for up to a quarter of the
	// lease's time to live: serial hand-overs would take 16 of them.
	h := &overlapHandler{handler: handler{f: f}, held: parts, wait: cfg.LeaseTTL / 4, begun: make(chan struct{})}
	m := joinAgain(t, js, cfg, set, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, "every partition held", 30*time.Second, func() bool { return f.shares()[m.ID()] == parts })

	m.Freeze()
	cancel()
	<-done
	h.mu.Lock()
	most := h.most
	h.mu.Unlock()
	require.Equal(t, parts, most, "every partition's Release ran at once")
	require.Empty(t, f.shares(), "every partition given back")
	left := map[string]string{}
	keys, err := kv.ListKeys(context.Background(), jetstream.MetaOnly())
	require.NoError(t, err)
	for k := range keys.Keys() {
		e, err := kv.Get(context.Background(), k)
		if err == nil {
			left[k] = string(e.Value())
		}
	}
	require.Empty(t, left, "no lease key left to expire by itself")
}
