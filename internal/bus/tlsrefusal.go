package bus

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// errClosedAfterHandshake is nats.go's error for a server that closed the
// connection right after the TLS handshake: in TLS 1.3 a server that
// refuses the client's certificate (none, or one of a CA it does not
// trust) says why in an alert sent after the client's handshake is done.
// The client sees the alert only when it reads before it writes; when its
// CONNECT is written first (a matter of timing, on a busy machine often)
// the error is a bare "broken pipe" or "connection reset by peer",
// which does not tell the user what to fix.
func closedAfterHandshake(err error) bool {
	return errors.Is(err, nats.ErrTLS) && strings.Contains(err.Error(), "after TLS handshake")
}

// tlsRefusal asks the servers of cfg.URL why they close the connection
// after the TLS handshake: it makes the handshake as the client does (the
// same CA, client certificate and server name) and then only reads, so the
// server's alert ("remote error: tls: certificate required") is read
// rather than lost to a write on a closed connection. It returns the first
// such refusal, or a verification failure of the handshake itself; nil when
// no server refuses (each is given ConnectTimeout).
func tlsRefusal(cfg Config) error {
	timeout := cfg.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConfig().ConnectTimeout
	}
	base, err := probeTLSConfig(cfg.TLS)
	if err != nil {
		return err
	}
	for _, raw := range strings.Split(cfg.URL, ",") {
		if raw = strings.TrimSpace(raw); raw == "" {
			continue
		}
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" {
			continue
		}
		port := u.Port()
		if port == "" {
			port = "4222"
		}
		tc := base.Clone()
		tc.ServerName = u.Hostname()
		if err := refusedBy(net.JoinHostPort(u.Hostname(), port), tc, timeout); err != nil {
			return err
		}
	}
	return nil
}

// probeTLSConfig is the client's TLS configuration as nats.go builds it
// from nats.tls (RootCAs, ClientCert).
func probeTLSConfig(c TLSConfig) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s: no certificate in it", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cert_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// refusedBy dials addr, reads the server's INFO, makes the TLS handshake
// and reads until the server answers, closes, or timeout passes. It
// returns the TLS error seen (a handshake that does not verify, an alert
// after it), else nil.
func refusedBy(addr string, tc *tls.Config, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil
	}
	defer func() { _ = conn.Close() }()
	deadline := time.Now().Add(timeout)
	_ = conn.SetDeadline(deadline)
	// A NATS server says INFO in the clear before the handshake.
	br := bufio.NewReaderSize(conn, 64<<10)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "INFO ") || br.Buffered() > 0 {
		return nil
	}
	tconn := tls.Client(conn, tc)
	if err := tconn.Handshake(); err != nil {
		if isTLSError(err) {
			return err
		}
		return nil
	}
	// Nothing written: an accepting server waits for CONNECT (nothing
	// comes until the deadline), a refusing one sends its alert.
	if _, err := tconn.Read(make([]byte, 1)); err != nil && isTLSError(err) {
		return err
	}
	return nil
}
