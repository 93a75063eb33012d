package aggregator

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/natstest"
)

// TestStartEmbeddedStoreLocked: a second embedded server on a store in use
// fails at once, naming the store and the holder; once the first shut
// down, the store is free again.
func TestStartEmbeddedStoreLocked(t *testing.T) {
	skipShort(t)
	t.Parallel()
	store := filepath.Join(t.TempDir(), "store")
	ns, err := StartEmbedded("127.0.0.1:0", store, 0, 0, EmbeddedAuth{}, testLogger(t))
	require.NoError(t, err)
	_, err = StartEmbedded("127.0.0.1:0", store, 0, 0, EmbeddedAuth{}, testLogger(t))
	require.ErrorIs(t, err, ErrStoreInUse)
	require.ErrorContains(t, err, store)
	require.ErrorContains(t, err, "pid")
	ns.Shutdown()
	ns.WaitForShutdown()
	eventually(t, "the store's lock released", func() bool {
		ns2, err := StartEmbedded("127.0.0.1:0", store, 0, 0, EmbeddedAuth{}, testLogger(t))
		if err != nil {
			return false
		}
		ns2.Shutdown()
		ns2.WaitForShutdown()
		return true
	})
}

// TestStartEmbeddedPortBusy: a taken listen address is reported as such at
// once (not as a server that does not start), and the store is left free.
func TestStartEmbeddedPortBusy(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	store := filepath.Join(t.TempDir(), "store")
	_, err = StartEmbedded(ln.Addr().String(), store, 0, 0, EmbeddedAuth{}, testLogger(t))
	require.ErrorIs(t, err, syscall.EADDRINUSE)
	require.ErrorContains(t, err, ln.Addr().String())
	require.NotErrorIs(t, err, ErrStoreInUse)
	require.ErrorContains(t, err, fmt.Sprintf("%s: bind: address already in use", ln.Addr()))
	if testing.Short() {
		return
	}
	ns, err := StartEmbedded("127.0.0.1:0", store, 0, 0, EmbeddedAuth{}, testLogger(t))
	require.NoError(t, err, "the failed start released the store")
	ns.Shutdown()
	ns.WaitForShutdown()
}

// TestStartEmbeddedAuth: the configured token is the embedded server's; a
// client without it is refused. Beyond loopback, no auth is refused.
func TestStartEmbeddedAuth(t *testing.T) {
	skipShort(t)
	t.Parallel()
	_, err := StartEmbedded("0.0.0.0:0", filepath.Join(t.TempDir(), "s0"), 0, 0, EmbeddedAuth{}, testLogger(t))
	require.ErrorContains(t, err, "not a loopback address")

	for name, auth := range map[string]EmbeddedAuth{
		"token": {Token: "emb-tok-1"},
		"user":  {User: "agg", Password: "emb-pw-2"},
	} {
		t.Run(name, func(t *testing.T) {
			ns, err := StartEmbedded("127.0.0.1:0", filepath.Join(t.TempDir(), "s"), 0, 0, auth, testLogger(t))
			require.NoError(t, err)
			defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
			_, err = nats.Connect(ns.ClientURL(), nats.NoReconnect())
			require.Error(t, err, "no credentials")
			opt := nats.Token(auth.Token)
			if auth.User != "" {
				opt = nats.UserInfo(auth.User, auth.Password)
			}
			nc, err := nats.Connect(ns.ClientURL(), nats.Timeout(natstest.ConnectTimeout), opt, nats.NoReconnect())
			require.NoError(t, err)
			nc.Close()
		})
	}
}

// TestServeEmbeddedTokenIntegration: serve with no --nats-url and a token
// starts the embedded server demanding it and connects to it with it.
func TestServeEmbeddedTokenIntegration(t *testing.T) {
	skipShort(t)
	cfg := testConfig(t, "")
	cfg.Embedded.Listen = "127.0.0.1:0"
	cfg.NATS.Token = "emb-tok-3"
	s := startServe(t, cfg, ServeOptions{})
	require.NoError(t, s.stop(t))
}

// TestStartEmbeddedBuffersBounded: the embedded server's memory streams
// are bounded from memory_limit_mib (224: a sixteenth, 14 MiB), which the
// server holds to: a memory stream asking for more is refused. Without a
// limit the server keeps its default.
func TestStartEmbeddedBuffersBounded(t *testing.T) {
	skipShort(t)
	t.Parallel()
	const share = 224 << 20 / 16
	require.EqualValues(t, share, embeddedOptions(224).JetStreamMaxMemory)
	require.Zero(t, embeddedOptions(0).JetStreamMaxMemory, "no limit: the server's default")

	ns, err := StartEmbedded("127.0.0.1:0", filepath.Join(t.TempDir(), "s"), 0, 224, EmbeddedAuth{}, testLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	require.EqualValues(t, share, ns.JetStreamConfig().MaxMemory, "the server took the bound")
	nc, err := nats.Connect(ns.ClientURL(), nats.Timeout(natstest.ConnectTimeout))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "BIG", Subjects: []string{"big"}, Storage: jetstream.MemoryStorage, MaxBytes: 2 * share})
	require.Error(t, err, "a memory stream over the bound is refused")
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "SMALL", Subjects: []string{"small"}, Storage: jetstream.MemoryStorage, MaxBytes: share / 2})
	require.NoError(t, err)
}
