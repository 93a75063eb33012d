package bus

import (
	"context"
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

// options turns the config into nats.go options.
func (c ConnConfig) options(log zerolog.Logger) ([]nats.Option, error) {
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
			log.Info().Str("url", redactURLs(nc.ConnectedUrl())).Msg("nats connected")
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil { // closed on purpose
				log.Debug().Msg("nats disconnected")
				return
			}
			log.Warn().Err(err).Msg("nats disconnected")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("url", redactURLs(nc.ConnectedUrl())).Msg("nats reconnected")
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
	opts, err := cfg.options(log)
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
		return nil, fmt.Errorf("nats connect %s: %w", redactURLs(cfg.URL), err)
	}
	if err := ctx.Err(); err != nil {
		nc.Close()
		return nil, err
	}
	if !nc.IsConnected() {
		if err := nc.LastError(); isAuthError(err) {
			nc.Close()
			return nil, fmt.Errorf("nats connect %s: %w", redactURLs(cfg.URL), err)
		}
		ev := log.Warn().Str("url", redactURLs(cfg.URL))
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
			shown := redactURLs(raw)
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

// redactURLs drops user information (user:password@, token@) from a
// comma-separated list of URLs.
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if at := strings.LastIndex(p, "@"); at >= 0 {
			if scheme := strings.Index(p, "://"); scheme >= 0 && scheme < at {
				p = p[:scheme+3] + "[redacted]@" + p[at+1:]
			} else {
				p = "[redacted]@" + p[at+1:]
			}
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}

func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
}
