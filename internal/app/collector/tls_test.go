package collector

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/natstest"
)

// TestRunTLSVerificationFailuresIntegration runs `collector run` against a
// TLS broker it must not trust, or that does not trust it: each failure is
// said once at WARN, naming the server and the cause, not as a broker
// that is merely unreachable; the run's events are spooled and the
// collector exits 75 (they wait for a broker it can trust). The same run
// with the right CA and client certificate is delivered and exits 0.
func TestRunTLSVerificationFailuresIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	pki, other := natstest.NewPKI(t), natstest.NewPKI(t)
	for _, tc := range []struct {
		name     string
		cert     string // the server's certificate and key
		key      string
		clientCA string // demands a client certificate that CA signed
		tls      bus.TLSConfig
		cause    string
	}{
		{"unknown authority", pki.ServerCert, pki.ServerKey, "", bus.TLSConfig{CAFile: other.CA}, "certificate signed by unknown authority"},
		{"no CA given, system roots", pki.ServerCert, pki.ServerKey, "", bus.TLSConfig{}, "certificate signed by unknown authority"},
		{"another name", pki.OtherNameCert, pki.OtherKey, "", bus.TLSConfig{CAFile: pki.CA}, "doesn't contain any IP SANs"},
		{"expired", pki.ExpiredCert, pki.ExpiredKey, "", bus.TLSConfig{CAFile: pki.CA}, "certificate has expired"},
		{"client certificate missing", pki.ServerCert, pki.ServerKey, pki.CA, bus.TLSConfig{CAFile: pki.CA}, "remote error: tls: "},
		{"client certificate of another CA", pki.ServerCert, pki.ServerKey, pki.CA,
			bus.TLSConfig{CAFile: pki.CA, CertFile: other.ClientCert, KeyFile: other.ClientKey}, "remote error: tls: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.StartTLS(t, tc.cert, tc.key, tc.clientCA)
			server := fmt.Sprintf("127.0.0.1:%d", natstest.Port(srv))
			cfg := testConfig(t)
			cfg.NATS.URL = "tls://" + server
			cfg.NATS.TLS = tc.tls
			cfg.ShutdownTimeout = time.Second
			cfg.RunID = "tls-" + strings.ReplaceAll(tc.name, " ", "-")
			var logs syncBuffer
			code, err := Run(testCtx(t), cfg, childArgv(t, "flood=20"), newTestIO().io(), zerolog.New(&logs))
			require.NoError(t, err)
			out := logs.String()
			require.Equal(t, cli.ExitTempFail, code, "the events wait in the spool:\n%s", out)
			require.Equal(t, 1, strings.Count(out, "nats TLS verification failed"), "said once:\n%s", out)
			var said string
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, "nats TLS verification failed") {
					said = line
				}
			}
			require.Contains(t, said, `"level":"warn"`)
			require.Contains(t, said, `"server":"`+server+`"`)
			require.Contains(t, said, tc.cause)
			require.Contains(t, out, "events left undelivered in the spool")
			require.NotContains(t, out, "nats not reachable", "a TLS failure is no unreachable broker")
		})
	}

	t.Run("trusted both ways", func(t *testing.T) {
		t.Parallel()
		srv := natstest.StartTLS(t, pki.ServerCert, pki.ServerKey, pki.CA)
		js, err := jetstream.New(natstest.Connect(t, fmt.Sprintf("tls://127.0.0.1:%d", natstest.Port(srv)),
			nats.RootCAs(pki.CA), nats.ClientCert(pki.ClientCert, pki.ClientKey)))
		require.NoError(t, err)
		_, err = bus.EnsureStream(testCtx(t), js, bus.DefaultStreamConfig(), zerolog.Nop()) // as the aggregator makes it
		require.NoError(t, err)
		cfg := testConfig(t)
		cfg.NATS.URL = fmt.Sprintf("tls://127.0.0.1:%d", natstest.Port(srv))
		cfg.NATS.TLS = bus.TLSConfig{CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
		cfg.RunID = "tls-trusted"
		var logs syncBuffer
		code, err := Run(testCtx(t), cfg, childArgv(t, "flood=20"), newTestIO().io(), zerolog.New(&logs))
		require.NoError(t, err)
		require.Equal(t, 0, code, logs.String())
		require.NotContains(t, logs.String(), "TLS verification failed")
	})
}
