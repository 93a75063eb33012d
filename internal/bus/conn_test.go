package bus_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

func startWith(t *testing.T, mod func(o *server.Options)) *server.Server {
	t.Helper()
	opts := natstest.Options(t.TempDir(), 0)
	mod(opts)
	s, err := natstest.NewServerWithOptions(opts)
	require.NoError(t, err)
	t.Cleanup(func() { natstest.Shutdown(s) })
	return s
}

func connectCfg(t *testing.T, cfg bus.Config) error {
	t.Helper()
	cfg.ConnectTimeout = 2 * time.Second
	nc, err := bus.Connect(context.Background(), cfg, bus.DialOptions{}, testLogger(t))
	if err != nil {
		return err
	}
	defer nc.Close()
	if !nc.IsConnected() {
		// Refused credentials usually come back as Connect's error; on a
		// loaded machine the server may close the socket before the client
		// read its -ERR, and Connect returns a connection still retrying.
		return fmt.Errorf("not connected: %v", nc.LastError())
	}
	require.Equal(t, -1, nc.Opts.ReconnectBufSize)
	return nil
}

func TestConnectAuthIntegration(t *testing.T) {
	skipShort(t)
	t.Run("token", func(t *testing.T) {
		s := startWith(t, func(o *server.Options) { o.Authorization = "s3cret" })
		require.NoError(t, connectCfg(t, bus.Config{URL: s.ClientURL(), Token: "s3cret"}))
		err := connectCfg(t, bus.Config{URL: s.ClientURL(), Token: "wrong"})
		require.Error(t, err)
		require.Contains(t, strings.ToLower(err.Error()), "authorization")
	})
	t.Run("user password", func(t *testing.T) {
		s := startWith(t, func(o *server.Options) { o.Username, o.Password = "agg", "pw" })
		require.NoError(t, connectCfg(t, bus.Config{URL: s.ClientURL(), User: "agg", Password: "pw"}))
		require.Error(t, connectCfg(t, bus.Config{URL: s.ClientURL(), User: "agg", Password: "no"}))
	})
	t.Run("nkey", func(t *testing.T) {
		kp, err := nkeys.CreateUser()
		require.NoError(t, err)
		pub, err := kp.PublicKey()
		require.NoError(t, err)
		seed, err := kp.Seed()
		require.NoError(t, err)
		file := filepath.Join(t.TempDir(), "user.nk")
		require.NoError(t, os.WriteFile(file, seed, 0o600))
		s := startWith(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })
		require.NoError(t, connectCfg(t, bus.Config{URL: s.ClientURL(), NKeySeedFile: file}))
		require.ErrorContains(t, connectCfg(t, bus.Config{URL: s.ClientURL(), NKeySeedFile: filepath.Join(t.TempDir(), "missing.nk")}), "nkey_seed_file")
	})
	t.Run("tls with client certificate", func(t *testing.T) {
		pki := natstest.NewPKI(t)
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CaFile: pki.CA, Verify: true})
		require.NoError(t, err)
		s := startWith(t, func(o *server.Options) { o.TLSConfig, o.TLS, o.TLSVerify = tc, true, true })
		require.NoError(t, connectCfg(t, bus.Config{URL: s.ClientURL(), TLS: bus.TLSConfig{CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}}))
	})
}

// TestConnectUnreachable gets a connection that keeps trying in the
// background, and connects when a server appears.
func TestConnectUnreachableIntegration(t *testing.T) {
	skipShort(t)
	url, port := deadURL(t)
	nc := connect(t, url)
	require.False(t, nc.IsConnected())
	natstest.StartAt(t, t.TempDir(), port)
	require.Eventually(t, nc.IsConnected, 10*time.Second, 10*time.Millisecond)
}

func TestConnectNeedsURL(t *testing.T) {
	t.Parallel()
	_, err := bus.Connect(context.Background(), bus.DefaultConfig(), bus.DialOptions{}, testLogger(t))
	require.ErrorContains(t, err, "url: must not be empty")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = bus.Connect(ctx, bus.Config{URL: "nats://127.0.0.1:1"}, bus.DialOptions{}, testLogger(t))
	require.ErrorIs(t, err, context.Canceled)
}

// TestConnectFailFastUnreachable: with FailFast, an unreachable server is
// one error that names the URL and the cause, for each URL given.
func TestConnectFailFastUnreachable(t *testing.T) {
	t.Parallel()
	ports, err := natstest.FreePorts(1) // nothing listens there
	require.NoError(t, err)
	refused := fmt.Sprintf("nats://127.0.0.1:%d", ports[0])
	cfg := bus.DefaultConfig()
	cfg.URL, cfg.ConnectTimeout = refused+",nats://user:pw@no-such-host.invalid:4222", 2*time.Second
	nc, err := bus.Connect(context.Background(), cfg, bus.DialOptions{Required: true}, testLogger(t))
	require.Nil(t, nc)
	require.ErrorIs(t, err, bus.ErrUnreachable)
	require.ErrorContains(t, err, refused+": connection refused")
	require.ErrorContains(t, err, "nats://user:***@no-such-host.invalid:4222: lookup no-such-host.invalid")
	require.NotContains(t, err.Error(), "pw")
}

// TestConnectFailFastSilentServer: a server that accepts the connection but
// never speaks NATS fails within nats.connect_timeout, naming the URL.
func TestConnectFailFastSilentServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { <-done; c.Close() }()
		}
	}()
	cfg := bus.DefaultConfig()
	cfg.URL, cfg.ConnectTimeout = "nats://"+ln.Addr().String(), 200*time.Millisecond
	nc, err := bus.Connect(context.Background(), cfg, bus.DialOptions{Required: true}, testLogger(t))
	require.Nil(t, nc)
	require.ErrorContains(t, err, cfg.URL)
	require.ErrorContains(t, err, "timeout")
}

// TestConnectLogMasksToken: a token given as the URL's user, or a
// password, never appears in the log.
func TestConnectLogMasksToken(t *testing.T) {
	skipShort(t)
	t.Parallel()
	opts := natstest.Options(t.TempDir(), 0)
	opts.Authorization = "tok-s3cret-1"
	s, err := natstest.NewServerWithOptions(opts)
	require.NoError(t, err)
	t.Cleanup(func() { natstest.Shutdown(s) })
	var logs bytes.Buffer
	var mu sync.Mutex
	w := zerolog.SyncWriter(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) }))
	cfg := bus.DefaultConfig()
	cfg.URL = fmt.Sprintf("nats://tok-s3cret-1@127.0.0.1:%d", natstest.Port(s))
	nc, err := bus.Connect(context.Background(), cfg, bus.DialOptions{}, zerolog.New(w))
	require.NoError(t, err)
	require.True(t, nc.IsConnected())
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return bytes.Contains(logs.Bytes(), []byte("nats connected"))
	}, 10*time.Second, 10*time.Millisecond)
	nc.Close()
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, logs.String(), "nats://***@127.0.0.1")
	require.NotContains(t, logs.String(), "tok-s3cret-1")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestConnectTLSVerifyFailureSaidOnce: a server whose certificate the
// client does not trust is no "unreachable" broker: a collector (no
// FailFast) says once, at WARN, that TLS verification failed, naming the
// server and the cause, and keeps retrying in the background without
// saying it again.
func TestConnectTLSVerifyFailureSaidOnce(t *testing.T) {
	skipShort(t)
	t.Parallel()
	served, other := natstest.NewPKI(t), natstest.NewPKI(t)
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: served.ServerCert, KeyFile: served.ServerKey})
	require.NoError(t, err)
	s := startWith(t, func(o *server.Options) { o.TLSConfig, o.TLS = tc, true })
	var logs bytes.Buffer
	var mu sync.Mutex
	w := zerolog.SyncWriter(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) }))
	cfg := bus.DefaultConfig()
	cfg.URL = fmt.Sprintf("tls://127.0.0.1:%d", natstest.Port(s))
	cfg.TLS.CAFile = other.CA // not the CA that signed the server's certificate
	nc, err := bus.Connect(context.Background(), cfg, bus.DialOptions{ReconnectWait: 20 * time.Millisecond}, zerolog.New(w).Level(zerolog.DebugLevel))
	require.NoError(t, err, "a collector keeps trying in the background")
	defer nc.Close()
	require.False(t, nc.IsConnected())
	time.Sleep(300 * time.Millisecond) // several reconnect attempts
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	require.Equal(t, 1, bytes.Count([]byte(out), []byte("nats TLS verification failed")), "said once:\n%s", out)
	require.Contains(t, out, `"level":"warn"`)
	require.Contains(t, out, fmt.Sprintf(`"server":"127.0.0.1:%d"`, natstest.Port(s)))
	require.Contains(t, out, "certificate signed by unknown authority")
}
