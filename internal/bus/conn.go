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
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/pkg/redact"
)

// DialOptions are what the program, not the configuration, decides about
// a connection. The zero value is a collector's: a broker that is away
// is waited for in the background.
type DialOptions struct {
	// Name is the client name the server shows; "" is "gttsplit".
	Name string
	// Required makes the broker mandatory (the aggregator): when no
	// server answers (each tried for ConnectTimeout), Connect fails,
	// naming every URL and why it could not be reached, and Dial fails
	// unless the stream exists or was created. Without it Connect returns
	// a connection that keeps trying in the background (a collector
	// spools meanwhile). Either way a connection that was once up
	// reconnects for ever.
	Required bool
	// Partitions of the events stream when Dial creates it; 0 is
	// DefaultPartitions.
	Partitions int
	// Host is a collector's host: its replies (the broker's
	// acknowledgements) come on InboxPrefix(Host), the only inbox its
	// credential may read. "" keeps nats.go's default inbox, _INBOX (the
	// aggregator).
	Host string
	// ReconnectWait is the pause between reconnection attempts; 0 is 2s.
	ReconnectWait time.Duration
}

// connState is whether a connection made by Connect is up, as its
// handlers say: nats.Conn's own IsConnected takes the connection's lock,
// which a reconnect attempt holds for as long as it dials and waits for
// the server (up to connect_timeout), so a publisher asking it while the
// broker is cut off would stall with it.
type connState struct{ up atomic.Bool }

// states holds the connState of every open connection Connect made.
var states sync.Map // *nats.Conn → *connState

// connected reports whether nc is up without waiting for its lock (for a
// connection Connect made; any other is asked directly).
func connected(nc *nats.Conn) bool {
	if st, ok := states.Load(nc); ok {
		return st.(*connState).up.Load()
	}
	return nc.IsConnected()
}

// options turns the config into nats.go options; tlsWarn says a TLS
// failure of a reconnect attempt, state follows the connection's status.
func options(c Config, opt DialOptions, log zerolog.Logger, tlsWarn *tlsWarning, state *connState) ([]nats.Option, error) {
	name := opt.Name
	if name == "" {
		name = "gttsplit"
	}
	reconnectWait := opt.ReconnectWait
	if reconnectWait <= 0 {
		reconnectWait = 2 * time.Second
	}
	// A refused publish or subscription repeats with every event: said
	// every 10 s at most.
	refusedLog := &LogLimit{Every: 10 * time.Second}
	opts := []nats.Option{
		nats.Name(name),
		// Keep trying for ever, in the background: a collector spools
		// meanwhile, an aggregator waits.
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(!opt.Required),
		nats.ReconnectWait(reconnectWait),
		// No reconnect buffer: a publish while disconnected fails at once
		// (and goes to the spool) instead of being replayed behind the
		// spool's back after the reconnect, which would break the order.
		nats.ReconnectBufSize(-1),
		nats.ConnectHandler(func(nc *nats.Conn) {
			state.up.Store(true)
			tlsWarn.reset()
			log.Info().Str("url", redact.URLList(nc.ConnectedUrl())).Msg("nats connected")
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			// Each failed attempt comes here, the first connection's
			// too; only a TLS failure, which waiting does not cure, is
			// worth saying (once).
			tlsWarn.first(err) // before say, which may ask the server why (tlsRefusal)
			tlsWarn.say(err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			state.up.Store(false)
			if err == nil { // closed on purpose
				log.Debug().Msg("nats disconnected")
				return
			}
			if errors.Is(err, nats.ErrStaleConnection) {
				log.Warn().Err(err).Dur("silent_for", c.CutOffAfter()).
					Msg("nats disconnected: the broker answered no ping (a network cut, or a frozen broker); reconnecting")
				return
			}
			log.Warn().Err(err).Msg("nats disconnected")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			state.up.Store(true)
			tlsWarn.reset()
			log.Info().Str("url", redact.URLList(nc.ConnectedUrl())).Msg("nats reconnected")
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			state.up.Store(false)
			states.Delete(nc)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				if ev := refusedLog.Event(log.Error); ev != nil {
					ev.Err(err).Str("user", c.User).Str("host", opt.Host).
						Msg("the broker refused what this credential may not do: a collector's NATS user is its host's, and may publish only that host's events and read only its own inbox (check nats.user and host against the server's users: aggregator nats-users)")
				}
				return
			}
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
	if opt.Host != "" {
		opts = append(opts, nats.CustomInboxPrefix(InboxPrefix(opt.Host)))
	}
	if c.PingInterval > 0 {
		// A cut-off broker (no RST: a network partition, a frozen
		// server) is noticed by its silence within CutOffAfter, not
		// after the client's default of minutes: the collector spools
		// meanwhile, a reconnect follows.
		opts = append(opts, nats.PingInterval(c.PingInterval), nats.MaxPingsOutstanding(MaxPingsOut))
	}
	switch {
	case c.Token != "":
		opts = append(opts, nats.Token(c.Token.Reveal()))
	case c.User != "":
		opts = append(opts, nats.UserInfo(c.User, c.Password.Reveal()))
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

// Connect connects to NATS as cfg says (as Config.Validate accepts it;
// the keys of the stream and the publisher are not read). When no server
// is reachable it still returns a connection, which keeps reconnecting in
// the background (a Publisher spools meanwhile), unless opt.Required; an
// empty URL, an unreadable key file or a refused authentication is an
// error. The connection has no reconnect buffer, as the Publisher requires.
// Secrets are never logged.
func Connect(ctx context.Context, cfg Config, opt DialOptions, log zerolog.Logger) (*nats.Conn, error) {
	if cfg.URL == "" {
		return nil, errors.New("nats config: url: must not be empty")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	log = log.With().Str("component", "nats").Logger()
	tlsWarn := &tlsWarning{log: log, servers: serverNames(cfg.URL), firstErr: make(chan error, 1),
		refusal: func() error { return tlsRefusal(cfg) }}
	state := &connState{}
	opts, err := options(cfg, opt, log, tlsWarn, state)
	if err != nil {
		return nil, fmt.Errorf("nats connect: %w", err)
	}
	if opt.Required {
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
	// The handlers keep it current from here on (they run after the
	// status changed, in order).
	state.up.Store(nc.IsConnected())
	states.Store(nc, state)
	if err := ctx.Err(); err != nil {
		nc.Close()
		return nil, err
	}
	if !nc.IsConnected() {
		// Why the first attempt failed comes to the reconnect handler
		// (nc.LastError is cleared by the reconnecting goroutine).
		var err error
		select {
		case err = <-tlsWarn.firstErr:
		case <-time.After(max(cfg.ConnectTimeout, time.Second)):
			err = nc.LastError()
		case <-ctx.Done():
			nc.Close()
			return nil, ctx.Err()
		}
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

// Dial connects to NATS (Connect). With opt.Required (the aggregator) it
// makes sure the events stream exists (EnsureStream, with cfg's limits and
// opt.Partitions): each attempt is bounded, one a cluster dropped (a leader
// being elected) is tried again for up to 30 s, and failing that Dial
// fails and closes the connection. Without it (a collector) Dial asks the
// JetStream API nothing: a collector's credential has none of it (the
// stream is the aggregator's, or an operator's, to create), and a
// Publisher spools while no stream takes its events.
func Dial(ctx context.Context, cfg Config, opt DialOptions, log zerolog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := Connect(ctx, cfg, opt, log)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	if !opt.Required {
		return nc, js, nil
	}
	sc := cfg.StreamConfig(opt.Partitions)
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		actx, cancelAttempt := context.WithTimeout(ectx, 5*time.Second)
		_, err = EnsureStream(actx, js, sc, log)
		cancelAttempt()
		if err == nil || ectx.Err() != nil ||
			errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			break
		}
		log.Warn().Err(err).Msg("stream not ready, retrying")
		time.Sleep(time.Second)
	}
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("stream %s: %w", sc.Name, err)
	}
	return nc, js, nil
}

// ErrUnreachable is wrapped by Connect's error when DialOptions.Required is
// set and no server could be reached.
var ErrUnreachable = errors.New("no NATS server reachable")

// probe dials every server of cfg.URL over TCP at once, each within
// ConnectTimeout. It returns why each unreachable one failed ("URL: connection
// refused") and whether any answered.
func probe(cfg Config) (causes []string, up bool) {
	timeout := cfg.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConfig().ConnectTimeout
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
	// firstErr gets the error of the first failed attempt (Connect reads
	// it to say why the broker is not reachable).
	firstErr chan error
	// refusal asks the servers why they close the connection after the
	// handshake (tlsRefusal); nil asks nothing.
	refusal func() error
}

// first hands err to Connect if it is the first attempt's.
func (w *tlsWarning) first(err error) {
	if w.firstErr == nil {
		return
	}
	select {
	case w.firstErr <- err:
	default:
	}
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
		if closedAfterHandshake(err) && w.refusal != nil {
			// "broken pipe" names no certificate: the server's alert does.
			if cause := w.refusal(); cause != nil {
				err = fmt.Errorf("the server refused the connection: %w (%w)", cause, err)
			}
		}
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
// refused (a TLS alert, or, in TLS 1.3, the server closing the connection
// right after the handshake: nats.ErrTLS).
func isTLSError(err error) bool {
	if err == nil {
		return false
	}
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var alert tls.AlertError
	return errors.Is(err, nats.ErrTLS) || errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) ||
		errors.As(err, &invalid) || errors.As(err, &alert) || strings.Contains(err.Error(), "tls: ")
}

func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
}
