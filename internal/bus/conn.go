package bus

import (
	"context"
	"errors"
	"fmt"
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
		nats.RetryOnFailedConnect(true),
		// No reconnect buffer: a publish while disconnected fails at once
		// (and goes to the spool) instead of being replayed behind the
		// spool's back after the reconnect, which would break the order.
		nats.ReconnectBufSize(-1),
		nats.ConnectHandler(func(nc *nats.Conn) {
			log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("nats connected")
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil { // closed on purpose
				log.Debug().Msg("nats disconnected")
				return
			}
			log.Warn().Err(err).Msg("nats disconnected")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("nats reconnected")
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
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats connect: %w", err)
	}
	if err := ctx.Err(); err != nil {
		nc.Close()
		return nil, err
	}
	if !nc.IsConnected() {
		if err := nc.LastError(); isAuthError(err) {
			nc.Close()
			return nil, fmt.Errorf("nats connect: %w", err)
		}
		log.Warn().Err(nc.LastError()).Msg("nats not reachable, retrying in the background")
	}
	return nc, nil
}

func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
}
