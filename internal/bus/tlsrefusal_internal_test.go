package bus

import (
	"bytes"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/natstest"
)

// TestTLSRefusalNamedAfterBrokenPipe: a server that refuses the client's
// certificate after a TLS 1.3 handshake is seen by nats.go as a "broken
// pipe" when the client's CONNECT was written before the server's alert was
// read (timing: on a loaded machine, often). The warning names the
// server's alert, the certificate problem, not the broken pipe alone.
func TestTLSRefusalNamedAfterBrokenPipe(t *testing.T) {
	skipShortInternal(t)
	t.Parallel()
	pki, other := natstest.NewPKI(t), natstest.NewPKI(t)
	srv := natstest.StartTLS(t, pki.ServerCert, pki.ServerKey, pki.CA)
	server := fmt.Sprintf("127.0.0.1:%d", natstest.Port(srv))
	// What nats.go returns when the write came first.
	pipe := fmt.Errorf("%w: connection closed by remote after TLS handshake: write tcp: %w", nats.ErrTLS, syscall.EPIPE)
	for _, tc := range []struct {
		name string
		tls  TLSConfig
	}{
		{"client certificate missing", TLSConfig{CAFile: pki.CA}},
		{"client certificate of another CA", TLSConfig{CAFile: pki.CA, CertFile: other.ClientCert, KeyFile: other.ClientKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.URL = "tls://" + server
			cfg.TLS = tc.tls
			var mu sync.Mutex
			var logs bytes.Buffer
			w := &tlsWarning{
				log: zerolog.New(zerolog.SyncWriter(writerFunc(func(p []byte) (int, error) {
					mu.Lock()
					defer mu.Unlock()
					return logs.Write(p)
				}))),
				servers: server,
				refusal: func() error { return tlsRefusal(cfg) },
			}
			require.True(t, w.say(pipe))
			mu.Lock()
			out := logs.String()
			mu.Unlock()
			require.Contains(t, out, "nats TLS verification failed")
			require.Contains(t, out, "remote error: tls: ", "the server's alert is named:\n%s", out)
			require.Contains(t, out, "broken pipe", "and what nats.go saw")
		})
	}

	t.Run("trusted: no refusal", func(t *testing.T) {
		t.Parallel()
		cfg := DefaultConfig()
		cfg.URL = "tls://" + server
		cfg.ConnectTimeout = time.Second // an accepting server is silent until then
		cfg.TLS = TLSConfig{CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
		require.NoError(t, tlsRefusal(cfg))
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
