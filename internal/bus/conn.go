package bus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/pkg/redact"
)

// ConnConfig says how to reach NATS. At most one of Token, User/Password,
// NKeySeedFile and CredsFile is set.
type ConnConfig struct {
	// URL is the server URL, or several separated by commas
	// (nats://host:4222, tls://host:4222).
	URL string `mapstructure:"url"`
	// Name is the client name the server shows (default "gttsplit").
	Name string `mapstructure:"name"`
	// Token authenticates with a bearer token.
	Token string `mapstructure:"token"`
	// User and Password authenticate with a user name and password.
	User     string `mapstructure:"user"`
	Password string `mapstructure:"password"`
	// NKeySeedFile is a file holding an NKey user seed (SU...).
	NKeySeedFile string `mapstructure:"nkey_seed_file"`
	// CredsFile is a decentralised-auth credentials file (JWT and seed).
	CredsFile string `mapstructure:"creds_file"`
	// TLS configures the server's CA and a client certificate.
	TLS TLSConfig `mapstructure:"tls"`
	// ConnectTimeout bounds one connection attempt (default 5s).
	ConnectTimeout time.Duration `mapstructure:"connect_timeout"`
	// ReconnectWait is the pause between reconnection attempts (default 2s).
	ReconnectWait time.Duration `mapstructure:"reconnect_wait"`
	// FailFast makes the first connection mandatory: when no server
	// answers (each tried for ConnectTimeout), Connect fails, naming every
	// URL and why it could not be reached. Without it Connect returns a
	// connection that keeps trying in the background (a collector spools
	// meanwhile). Either way a connection that was once up reconnects for
	// ever.
	FailFast bool `mapstructure:"-"`
}

// TLSConfig names PEM files. CAFile alone verifies the server; CertFile and
// KeyFile together present a client certificate.
type TLSConfig struct {
	CAFile   string `mapstructure:"ca_file"`
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
}

// DefaultConnConfig returns the defaults (no URL: offline).
func DefaultConnConfig() ConnConfig {
	return ConnConfig{Name: "gttsplit", ConnectTimeout: 5 * time.Second, ReconnectWait: 2 * time.Second}
}

// Validate reports every problem at once, each prefixed with its key. It
// does not touch the network or the files.
func (c ConnConfig) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("url: must not be empty"))
	}
	auth := 0
	for _, set := range []bool{c.Token != "", c.User != "" || c.Password != "", c.NKeySeedFile != "", c.CredsFile != ""} {
		if set {
			auth++
		}
	}
	if auth > 1 {
		errs = append(errs, errors.New("token, user/password, nkey_seed_file, creds_file: set at most one"))
	}
	if c.Password != "" && c.User == "" {
		errs = append(errs, errors.New("user: must be set with password"))
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		errs = append(errs, errors.New("tls.cert_file, tls.key_file: set both or neither"))
	}
	if c.ConnectTimeout < 0 {
		errs = append(errs, errors.New("connect_timeout: must not be negative"))
	}
	if c.ReconnectWait < 0 {
		errs = append(errs, errors.New("reconnect_wait: must not be negative"))
	}
	return errors.Join(errs...)
}

// options turns the config into nats.go options; tlsWarn says a TLS
// failure of a reconnect attempt.
func (c ConnConfig) options(log zerolog.Logger, tlsWarn *tlsWarning) ([]nats.Option, error) {
	name := c.Name
	if name == "" {
		name = "gttsplit"
	}
	opts := []nats.Option{
		nats.Name(name),
		// Keep trying for ever, in the background: a collector spools
		// meanwhile, an aggregator waits.
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(!c.FailFast),
		// No reconnect buffer: a publish while disconnected fails at once
		// (and goes to the spool) instead of being replayed behind the
		// spool's back after the reconnect, which would break the order.
		nats.ReconnectBufSize(-1),
		nats.ConnectHandler(func(nc *nats.Conn) {
			tlsWarn.reset()
			log.Info().Str("url", redact.URLList(nc.ConnectedUrl())).Msg("nats connected")
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			// Each failed attempt comes here; only a TLS failure, which
			// waiting does not cure, is worth saying (once).
			tlsWarn.say(err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil { // closed on purpose
				log.Debug().Msg("nats disconnected")
				return
			}
			log.Warn().Err(err).Msg("nats disconnected")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			tlsWarn.reset()
			log.Info().Str("url", redact.URLList(nc.ConnectedUrl())).Msg("nats reconnected")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Warn().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("nats async error")
		}),
	}
	if c.ConnectTimeout > 0 {
		opts = append(opts, nats.Timeout(c.ConnectTimeout))
	}
	if c.ReconnectWait > 0 {
		opts = append(opts, nats.ReconnectWait(c.ReconnectWait))
	}
	switch {
	case c.Token != "":
		opts = append(opts, nats.Token(c.Token))
	case c.User != "":
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	case c.NKeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(c.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nkey_seed_file %s: %w", c.NKeySeedFile, err)
		}
		opts = append(opts, o)
	case c.CredsFile != "":
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	if c.TLS.CAFile != "" {
		opts = append(opts, nats.RootCAs(c.TLS.CAFile))
	}
	if c.TLS.CertFile != "" {
		opts = append(opts, nats.ClientCert(c.TLS.CertFile, c.TLS.KeyFile))
	}
	return opts, nil
}

// Connect connects to NATS. When no server is reachable it still returns a
// connection, which keeps reconnecting in the background (a Publisher
// spools meanwhile); an invalid config, an unreadable key file or a refused
// authentication is an error. The connection has no reconnect buffer, as
// the Publisher requires. Secrets are never logged.
func Connect(ctx context.Context, cfg ConnConfig, log zerolog.Logger) (*nats.Conn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("nats config: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	log = log.With().Str("component", "nats").Logger()
	tlsWarn := &tlsWarning{log: log, servers: serverNames(cfg.URL)}
	opts, err := cfg.options(log, tlsWarn)
	if err != nil {
		return nil, fmt.Errorf("nats connect: %w", err)
	}
	if cfg.FailFast {
		// nats.go reports a refused connection only as "no servers
		// available": dial every server first (at once, within
		// ConnectTimeout) to say which is unreachable and why.
		if causes, up := probe(cfg); !up {
			return nil, fmt.Errorf("nats connect: %w: %s", ErrUnreachable, strings.Join(causes, "; "))
		}
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats connect %s: %w", redact.URLList(cfg.URL), err)
	}
	if err := ctx.Err(); err != nil {
		nc.Close()
		return nil, err
	}
	if !nc.IsConnected() {
		err := nc.LastError()
		if isAuthError(err) {
			nc.Close()
			return nil, fmt.Errorf("nats connect %s: %w", redact.URLList(cfg.URL), err)
		}
		if tlsWarn.say(err) {
			return nc, nil
		}
		ev := log.Warn().Str("url", redact.URLList(cfg.URL))
		if causes, _ := probe(cfg); len(causes) > 0 {
			ev = ev.Str("cause", strings.Join(causes, "; "))
		}
		ev.Msg("nats not reachable, retrying in the background")
	}
	return nc, nil
}

// ErrUnreachable is wrapped by Connect's error when FailFast is set and no
// server could be reached.
var ErrUnreachable = errors.New("no NATS server reachable")

// probe dials every server of cfg.URL over TCP at once, each within
// ConnectTimeout. It returns why each unreachable one failed ("URL: connection
// refused") and whether any answered.
func probe(cfg ConnConfig) (causes []string, up bool) {
	timeout := cfg.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConnConfig().ConnectTimeout
	}
	var urls []string
	for _, raw := range strings.Split(cfg.URL, ",") {
		if raw = strings.TrimSpace(raw); raw != "" {
			urls = append(urls, raw)
		}
	}
	results := make([]string, len(urls))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, raw := range urls {
		wg.Go(func() {
			shown := redact.URLList(raw)
			withScheme := raw
			if !strings.Contains(raw, "://") {
				withScheme = "nats://" + raw
			}
			u, err := url.Parse(withScheme)
			if err != nil || u.Hostname() == "" {
				results[i] = shown + ": not a URL"
				return
			}
			port := u.Port()
			if port == "" {
				port = "4222"
			}
			conn, err := net.DialTimeout("tcp", net.JoinHostPort(u.Hostname(), port), timeout)
			if err != nil {
				results[i] = fmt.Sprintf("%s: %v", shown, dialCause(err))
				return
			}
			_ = conn.Close()
			mu.Lock()
			up = true
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, r := range results {
		if r != "" {
			causes = append(causes, r)
		}
	}
	return causes, up
}

// dialCause keeps the meaningful part of a dial error: "connection
// refused", "no such host", "i/o timeout".
func dialCause(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		var sys *os.SyscallError
		if errors.As(op.Err, &sys) {
			return sys.Err
		}
		return op.Err
	}
	return err
}

// serverNames lists the host:port of every URL of a comma-separated list.
func serverNames(list string) string {
	var names []string
	for _, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw
		}
		if u, err := url.Parse(raw); err == nil && u.Host != "" {
			names = append(names, u.Host)
		}
	}
	return strings.Join(names, ",")
}

// tlsWarning says a TLS failure (a certificate the client does not trust,
// a name that does not match, a certificate the server refused) once, at
// WARN, with the servers and the cause: retrying cannot cure it, and the
// connection would otherwise look merely unreachable. It says it again
// only after a connection succeeded meanwhile.
type tlsWarning struct {
	log     zerolog.Logger
	servers string
	mu      sync.Mutex
	said    bool
}

// say logs err if it is a TLS failure not said yet; it reports whether err
// is a TLS failure.
func (w *tlsWarning) say(err error) bool {
	if !isTLSError(err) {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.said {
		w.said = true
		w.log.Warn().Str("server", w.servers).Err(err).
			Msg("nats TLS verification failed; retrying in the background (check nats.tls.ca_file and the server's certificate)")
	}
	return true
}

func (w *tlsWarning) reset() {
	w.mu.Lock()
	w.said = false
	w.mu.Unlock()
}

// isTLSError reports a failed TLS handshake: a certificate that does not
// verify (unknown authority, wrong name, expired), or one the server
// refused (a TLS alert).
func isTLSError(err error) bool {
	if err == nil {
		return false
	}
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var alert tls.AlertError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) ||
		errors.As(err, &invalid) || errors.As(err, &alert) || strings.Contains(err.Error(), "tls: ")
}

func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
}
