package config

import (
	"errors"
	"fmt"
	"github.com/gttsplit/gttsplit/pkg/redact"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// EnvPrefix is the prefix of every environment variable that sets a key.
const EnvPrefix = "GTTSPLIT"

// ErrInvalid is wrapped by every error that [LoadCollector],
// [LoadAggregator] and the Validate methods return for a bad config.
var ErrInvalid = errors.New("config: invalid configuration")

// FieldError is one configuration problem, attached to the key it concerns.
type FieldError struct {
	// Key is the dotted key path, e.g. "nats.url", or a section ("nats")
	// for a problem that concerns several keys of it.
	Key string
	// Err says what is wrong.
	Err error
}

// Error returns "key: problem".
func (e *FieldError) Error() string { return e.Key + ": " + e.Err.Error() }

// Unwrap returns the problem without its key.
func (e *FieldError) Unwrap() error { return e.Err }

// Problems returns every [*FieldError] inside err, in the order they are
// reported. It returns nil for an error that holds none.
func Problems(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if fe, ok := e.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// invalid joins problems into one error that wraps [ErrInvalid], or returns
// nil when there are none.
func invalid(problems []*FieldError) error {
	if len(problems) == 0 {
		return nil
	}
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = p
	}
	return fmt.Errorf("%w:\n%w", ErrInvalid, errors.Join(errs...))
}

// Secret is a string that is never printed: String, GoString, MarshalText
// and MarshalJSON return "[redacted]" when it is set and "" when it is
// empty. Use [Secret.Reveal] where the value itself is needed.
type Secret string

const redacted = "[redacted]"

// Reveal returns the secret value.
func (s Secret) Reveal() string { return string(s) }

// String returns "[redacted]", or "" for an empty secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString is String, so %#v does not print the value either.
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// MarshalText is String, for YAML, TOML and other text encoders.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// MarshalJSON is String as a JSON string, for encoding/json and loggers.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(s.String())), nil }

// Log configures the root logger that main builds.
type Log struct {
	Level  string `mapstructure:"level" flag:"log-level" desc:"minimum log level: debug, info, warn or error"`
	Format string `mapstructure:"format" desc:"log output format: console or json"`
}

// TLS configures TLS towards the NATS server.
type TLS struct {
	CAFile   string `mapstructure:"ca_file" desc:"CA certificate file that verifies the NATS server"`
	CertFile string `mapstructure:"cert_file" desc:"client certificate file for NATS mutual TLS; needs nats.tls.key_file"`
	KeyFile  string `mapstructure:"key_file" desc:"client private key file for NATS mutual TLS; needs nats.tls.cert_file"`
}

// natsCommon is the part of the NATS settings that both binaries share.
type natsCommon struct {
	URL             string
	Token           Secret
	User            string
	Password        Secret
	NKeySeedFile    string
	CredsFile       string
	TLS             TLS
	Stream          string
	ConnectTimeout  time.Duration
	Replicas        int
	StreamMaxAge    time.Duration
	StreamMaxBytes  int64
	DuplicateWindow time.Duration
}

// MinDuplicateWindow is the shortest nats.duplicate_window: a collector
// restarted within it re-publishes without duplicating.
const MinDuplicateWindow = 2 * time.Minute

// problems is an ordered list of configuration problems.
type problems []*FieldError

func (p *problems) add(key, format string, args ...any) {
	*p = append(*p, &FieldError{Key: key, Err: fmt.Errorf(format, args...)})
}

func (p *problems) oneOf(key, value string, allowed ...string) {
	for _, a := range allowed {
		if value == a {
			return
		}
	}
	p.add(key, "%q is not one of %s", value, strings.Join(allowed, ", "))
}

func (p *problems) positive(key string, d time.Duration) {
	if d <= 0 {
		p.add(key, "must be a positive duration, got %s", d)
	}
}

func (p *problems) atLeast(key string, n, min int64) {
	if n < min {
		p.add(key, "must be at least %d, got %d", min, n)
	}
}

func (p *problems) log(l Log) {
	p.oneOf("log.level", l.Level, "debug", "info", "warn", "error")
	p.oneOf("log.format", l.Format, "console", "json")
}

func (p *problems) nats(n natsCommon) {
	if n.URL != "" {
		if err := checkNATSURLs(n.URL); err != nil {
			p.add("nats.url", "%w", err)
		}
	}
	var methods []string
	if n.Token != "" {
		methods = append(methods, "nats.token")
	}
	if n.User != "" || n.Password != "" {
		methods = append(methods, "nats.user/nats.password")
	}
	if n.NKeySeedFile != "" {
		methods = append(methods, "nats.nkey_seed_file")
	}
	if n.CredsFile != "" {
		methods = append(methods, "nats.creds_file")
	}
	if len(methods) > 1 {
		p.add("nats", "at most one auth method may be set, got %s", strings.Join(methods, ", "))
	}
	if n.User != "" && n.Password == "" {
		p.add("nats.password", "must be set when nats.user is set")
	}
	if n.Password != "" && n.User == "" {
		p.add("nats.user", "must be set when nats.password is set")
	}
	if n.TLS.CertFile != "" && n.TLS.KeyFile == "" {
		p.add("nats.tls.key_file", "must be set when nats.tls.cert_file is set")
	}
	if n.TLS.KeyFile != "" && n.TLS.CertFile == "" {
		p.add("nats.tls.cert_file", "must be set when nats.tls.key_file is set")
	}
	if err := checkName(n.Stream); err != nil {
		p.add("nats.stream", "%w", err)
	}
	p.positive("nats.connect_timeout", n.ConnectTimeout)
	if n.Replicas < 1 || n.Replicas > 5 {
		p.add("nats.replicas", "must be 1 to 5, got %d", n.Replicas)
	}
	if n.DuplicateWindow < MinDuplicateWindow {
		p.add("nats.duplicate_window", "must be at least %s, got %s", MinDuplicateWindow, n.DuplicateWindow)
	}
	if n.StreamMaxAge < 0 {
		p.add("nats.stream_max_age", "must not be negative, got %s", n.StreamMaxAge)
	} else if n.StreamMaxAge > 0 && n.StreamMaxAge < n.DuplicateWindow {
		p.add("nats.stream_max_age", "must be 0 or at least nats.duplicate_window (%s), got %s", n.DuplicateWindow, n.StreamMaxAge)
	}
	p.atLeast("nats.stream_max_bytes", n.StreamMaxBytes, 0)
}

// checkNATSURLs accepts what nats.Connect accepts: a comma-separated list
// of URLs with scheme nats, tls, ws or wss, or bare host[:port] entries.
func checkNATSURLs(s string) error {
	for _, raw := range strings.Split(s, ",") {
		raw = strings.TrimSpace(raw)
		shown := redact.URL(raw) // never echo a token or password
		if raw == "" {
			return fmt.Errorf("empty entry in %q", redact.URL(s))
		}
		withScheme := raw
		if !strings.Contains(raw, "://") {
			withScheme = "nats://" + raw
		}
		u, err := url.Parse(withScheme)
		if err != nil {
			return fmt.Errorf("%q is not a URL", shown)
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("%q: scheme must be nats, tls, ws or wss", shown)
		}
		if u.Hostname() == "" {
			return fmt.Errorf("%q has no host", shown)
		}
		if port := u.Port(); port != "" {
			if err := checkPort(port); err != nil {
				return fmt.Errorf("%q: %w", shown, err)
			}
		}
	}
	return nil
}

// checkListen checks a host:port listen address; the host may be empty.
func checkListen(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	return checkPort(port)
}

func checkPort(port string) error {
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// checkName checks a JetStream stream or consumer name: not empty, and
// none of the characters NATS reserves.
func checkName(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if i := strings.IndexAny(s, " \t\r\n.*>/\\"); i >= 0 {
		return fmt.Errorf("%q must not contain %q", s, s[i])
	}
	return nil
}

var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Length limits of the ids every event carries (in its id, subject,
// Nats-Msg-Id header and the aggregator's state key): short, so that no
// event is refused by the broker for its headers.
const (
	MaxRunIDLen = 128
	MaxLaneLen  = 64
	MaxHostLen  = 253
)

// checkToken checks a value that becomes a NATS subject token and a path
// component: letters, digits, '-' and '_', at most max bytes.
func checkToken(s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%q is %d bytes long, at most %d", clip(s), len(s), max)
	}
	if !tokenRE.MatchString(s) {
		return fmt.Errorf("%q must be letters, digits, '-' or '_'", clip(s))
	}
	return nil
}

// checkHost checks a host name given in the configuration: printable, no
// whitespace or control characters, at most MaxHostLen bytes.
func checkHost(s string) error {
	if len(s) > MaxHostLen {
		return fmt.Errorf("%q is %d bytes long, at most %d", clip(s), len(s), MaxHostLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%q is not valid UTF-8", clip(s))
	}
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("%q must not contain %q", clip(s), r)
		}
	}
	return nil
}

// clip shortens a rejected value quoted in an error.
func clip(s string) string {
	if len(s) <= 80 {
		return s
	}
	cut := 80
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

var issueRE = regexp.MustCompile(`^([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)#([0-9]+)$`)

// ParseIssue parses an issue reference of the form OWNER/REPO#N with N ≥ 1.
func ParseIssue(s string) (owner, repo string, number int, err error) {
	m := issueRE.FindStringSubmatch(s)
	if m == nil {
		return "", "", 0, fmt.Errorf("%q is not OWNER/REPO#N", s)
	}
	n, err := strconv.Atoi(m[3])
	if err != nil || n < 1 {
		return "", "", 0, fmt.Errorf("%q: issue number must be a positive integer", s)
	}
	return m[1], m[2], n, nil
}

// ParsePace parses a replay pace: "instant" (factor 0: no waiting),
// "original" (factor 1: the recorded gaps) or "<N>x" such as "10x" or
// "0.5x" (the recorded gaps divided by N).
func ParsePace(s string) (factor float64, err error) {
	switch s {
	case "instant":
		return 0, nil
	case "original":
		return 1, nil
	}
	num, ok := strings.CutSuffix(s, "x")
	if ok && num != "" && strings.Trim(num, "0123456789.") == "" {
		f, perr := strconv.ParseFloat(num, 64)
		if perr == nil && f > 0 {
			return f, nil
		}
	}
	return 0, fmt.Errorf("%q is not instant, original or <N>x with N > 0 (e.g. 10x)", s)
}

// checkPattern compiles a regular expression that must have exactly one
// capture group.
func checkPattern(s string) error {
	re, err := regexp.Compile(s)
	if err != nil {
		return fmt.Errorf("does not compile: %w", err)
	}
	if n := re.NumSubexp(); n != 1 {
		return fmt.Errorf("%q must have exactly one capture group, has %d", s, n)
	}
	return nil
}

// checkHTTPURL checks an http or https base URL with a host.
func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http or https URL", redact.URL(s))
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
