package conf

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gttsplit/gttsplit/pkg/redact"
)

// Listen checks a host:port listen address; the host may be empty (every
// interface), the port is a number from 0 to 65535.
func Listen(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	return Port(port)
}

// Port checks a port number from 0 to 65535.
func Port(port string) error {
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// IsLoopbackListen reports whether a host:port listen address is on a
// loopback interface only ("localhost", 127.0.0.0/8, ::1); an empty host
// (every interface) is not.
func IsLoopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Name checks a JetStream stream or consumer name: not empty, and none of
// the characters NATS reserves.
func Name(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if i := strings.IndexAny(s, " \t\r\n.*>/\\"); i >= 0 {
		return fmt.Errorf("%q must not contain %q", s, s[i])
	}
	return nil
}

// Length limits of the ids every event carries (in its id, subject,
// Nats-Msg-Id header and the aggregator's state key): short, so that no
// event is refused by the broker for its headers.
const (
	MaxRunIDLen = 128
	MaxLaneLen  = 64
	MaxHostLen  = 253
)

var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Token checks a value that becomes a NATS subject token and a path
// component (a run id, a lane): letters, digits, '-' and '_', at most max
// bytes.
func Token(s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%q is %d bytes long, at most %d", Clip(s), len(s), max)
	}
	if !tokenRE.MatchString(s) {
		return fmt.Errorf("%q must be letters, digits, '-' or '_'", Clip(s))
	}
	return nil
}

// Host checks a host name given in the configuration: valid UTF-8,
// printable, no whitespace, at most max bytes.
func Host(s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%q is %d bytes long, at most %d", Clip(s), len(s), max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%q is not valid UTF-8", Clip(s))
	}
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("%q must not contain %q", Clip(s), r)
		}
	}
	return nil
}

// HTTPURL checks an http or https base URL with a host; the error shows
// the URL with its credentials masked.
func HTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http or https URL", redact.URL(s))
	}
	return nil
}

// Clip shortens a rejected value quoted in an error to 80 bytes and "…".
func Clip(s string) string {
	if len(s) <= 80 {
		return s
	}
	cut := 80
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
