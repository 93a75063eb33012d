package bus

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gttsplit/gttsplit/pkg/conf"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/redact"
)

// Config is the nats.* keys of both binaries: how to reach NATS, how a
// publisher waits for the broker, and the limits of the events stream the
// aggregator creates when it is missing. The zero Config is not valid: start
// from DefaultConfig. What an empty URL means (no broker, or the embedded
// server) and which of the keys a binary has are the binary's: the
// aggregator has no max_in_flight and ack_timeout (internal/config words
// and picks them).
type Config struct {
	// URL is the server URL, or several separated by commas
	// (nats://host:4222, tls://host:4222, host:4222).
	URL string `mapstructure:"url" flag:"nats-url" desc:"NATS server URL(s), comma-separated"`
	// At most one of Token, User/Password, NKeySeedFile and CredsFile is
	// set.
	Token        conf.Secret `mapstructure:"token" desc:"NATS auth token; set it through the environment"`
	User         string      `mapstructure:"user" desc:"NATS user name; needs nats.password"`
	Password     conf.Secret `mapstructure:"password" desc:"NATS password; set it through the environment"`
	NKeySeedFile string      `mapstructure:"nkey_seed_file" desc:"file holding the NKey seed for NATS auth"`
	CredsFile    string      `mapstructure:"creds_file" desc:"NATS credentials file holding a user JWT and NKey seed"`
	TLS          TLSConfig   `mapstructure:"tls"`
	// Stream is the JetStream stream of the events.
	Stream string `mapstructure:"stream" desc:"JetStream stream of the events"`
	// ConnectTimeout bounds one connection attempt.
	ConnectTimeout time.Duration `mapstructure:"connect_timeout" desc:"timeout for connecting to NATS"`
	// PingInterval is how often the client pings the broker; a connection
	// whose broker answered none of MaxPingsOut+1 pings in a row is cut
	// off (CutOffAfter).
	PingInterval time.Duration `mapstructure:"ping_interval" desc:"how often the client pings the broker; a broker that answers none of 3 pings in a row is taken as cut off (the collector spools, both reconnect) after about 3 intervals"`
	// MaxInFlight and AckTimeout are a Publisher's: see the package doc.
	MaxInFlight int           `mapstructure:"max_in_flight" desc:"maximum published events awaiting the broker's acknowledgement"`
	AckTimeout  time.Duration `mapstructure:"ack_timeout" desc:"time an event waits for the broker's acknowledgement before it goes to the spool (run, attach) or is sent again (replay); a connected broker that answers later gets twice as long, up to 8 times"`
	// Replicas, StreamMaxAge, StreamMaxBytes and DuplicateWindow are
	// what the aggregator creates the stream with (see EnsureStream);
	// Replicas also those of the consumers and buckets it creates. A
	// collector creates nothing (the collector has none of these keys).
	Replicas        int           `mapstructure:"replicas" desc:"replicas of the stream, its consumers and the buckets when the aggregator creates them (1 to 5; 3 on a cluster); an existing stream is raised to it, never lowered"`
	StreamMaxAge    time.Duration `mapstructure:"stream_max_age" desc:"age after which the stream discards events, set when the aggregator creates it: as long as store.retention keeps a closed run, so export and replay reach every run the state bucket holds; 0 keeps them for ever"`
	StreamMaxBytes  int64         `mapstructure:"stream_max_bytes" desc:"size in bytes at which the stream refuses new events (collectors spool them and retry; nothing stored is discarded), set when the aggregator creates it; 0 means no limit"`
	DuplicateWindow time.Duration `mapstructure:"duplicate_window" desc:"JetStream de-duplication window of the stream, set when the aggregator creates it (at least 2m)"`
}

// TLSConfig is the nats.tls.* keys: PEM files. CAFile alone verifies the
// server; CertFile and KeyFile together present a client certificate.
type TLSConfig struct {
	CAFile   string `mapstructure:"ca_file" desc:"CA certificate file that verifies the NATS server"`
	CertFile string `mapstructure:"cert_file" desc:"client certificate file for NATS mutual TLS; needs nats.tls.key_file"`
	KeyFile  string `mapstructure:"key_file" desc:"client private key file for NATS mutual TLS; needs nats.tls.cert_file"`
}

// DefaultConfig returns the defaults of the nats.* keys (no URL).
func DefaultConfig() Config {
	return Config{
		Stream:          DefaultStream,
		ConnectTimeout:  5 * time.Second,
		PingInterval:    2 * time.Second,
		MaxInFlight:     256,
		AckTimeout:      5 * time.Second,
		Replicas:        1,
		DuplicateWindow: MinDuplicateWindow,
		StreamMaxAge:    DefaultStreamMaxAge,
	}
}

// MaxPingsOut is how many pings may go unanswered: the next one declares
// the connection stale.
const MaxPingsOut = 2

// CutOffAfter is the longest a connection whose broker went silent (a
// network cut, a frozen broker) counts as up: the pings of that long went
// unanswered.
func (c Config) CutOffAfter() time.Duration { return time.Duration(MaxPingsOut+1) * c.PingInterval }

// DefaultStreamMaxAge is nats.stream_max_age's default: 30 days, what
// store.retention keeps a closed run by default.
const DefaultStreamMaxAge = 30 * 24 * time.Hour

// Validate reports every problem of c at once, each a conf.FieldError
// keyed relative to nats.* ("" for the auth methods together). It touches
// neither the network nor the files.
func (c Config) Validate() error {
	var p conf.Problems
	if c.URL != "" {
		p.Check("url", checkURLs(c.URL))
	}
	var methods []string
	if c.Token != "" {
		methods = append(methods, "nats.token")
	}
	if c.User != "" || c.Password != "" {
		methods = append(methods, "nats.user/nats.password")
	}
	if c.NKeySeedFile != "" {
		methods = append(methods, "nats.nkey_seed_file")
	}
	if c.CredsFile != "" {
		methods = append(methods, "nats.creds_file")
	}
	if len(methods) > 1 {
		p.Add("", "at most one auth method may be set, got %s", strings.Join(methods, ", "))
	}
	if c.User != "" && c.Password == "" {
		p.Add("password", "must be set when nats.user is set")
	}
	if c.Password != "" && c.User == "" {
		p.Add("user", "must be set when nats.password is set")
	}
	if c.TLS.CertFile != "" && c.TLS.KeyFile == "" {
		p.Add("tls.key_file", "must be set when nats.tls.cert_file is set")
	}
	if c.TLS.KeyFile != "" && c.TLS.CertFile == "" {
		p.Add("tls.cert_file", "must be set when nats.tls.key_file is set")
	}
	p.Check("stream", conf.Name(c.Stream))
	p.Positive("connect_timeout", c.ConnectTimeout)
	p.Positive("ping_interval", c.PingInterval)
	p.AtLeast("max_in_flight", int64(c.MaxInFlight), 1)
	p.Positive("ack_timeout", c.AckTimeout)
	if c.Replicas < 1 || c.Replicas > 5 {
		p.Add("replicas", "must be 1 to 5, got %d", c.Replicas)
	}
	if c.DuplicateWindow < MinDuplicateWindow {
		p.Add("duplicate_window", "must be at least %s, got %s", MinDuplicateWindow, c.DuplicateWindow)
	}
	if c.StreamMaxAge < 0 {
		p.Add("stream_max_age", "must not be negative, got %s", c.StreamMaxAge)
	} else if c.StreamMaxAge > 0 && c.StreamMaxAge < c.DuplicateWindow {
		p.Add("stream_max_age", "must be 0 or at least nats.duplicate_window (%s), got %s", c.DuplicateWindow, c.StreamMaxAge)
	}
	p.AtLeast("stream_max_bytes", c.StreamMaxBytes, 0)
	return p.Err()
}

// StreamConfig is the events stream c asks for, with partitions (0:
// DefaultPartitions) when a client creates it.
func (c Config) StreamConfig(partitions int) StreamConfig {
	return StreamConfig{
		Name:            c.Stream,
		Subjects:        []string{events.StreamSubjects},
		DuplicateWindow: c.DuplicateWindow,
		MaxAge:          c.StreamMaxAge,
		MaxBytes:        c.StreamMaxBytes,
		Replicas:        c.Replicas,
		Partitions:      partitions,
	}
}

// checkURLs accepts what nats.Connect accepts: a comma-separated list of
// URLs with scheme nats, tls, ws or wss, or bare host[:port] entries. An
// error never shows a token or password of a URL.
func checkURLs(s string) error {
	for _, raw := range strings.Split(s, ",") {
		raw = strings.TrimSpace(raw)
		shown := redact.URL(raw)
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
			if err := conf.Port(port); err != nil {
				return fmt.Errorf("%q: %w", shown, err)
			}
		}
	}
	return nil
}

// SpoolConfig is the spool.* keys: where a collector keeps events while no
// broker takes them.
type SpoolConfig struct {
	// Dir holds the spools, one directory each (a publisher's is
	// Dir/<PublisherConfig.Name>); empty is <user cache dir>/gttsplit/spool.
	Dir string `mapstructure:"dir" flag:"spool-dir" desc:"spool directory; empty means <user cache dir>/gttsplit/spool"`
	// MaxBytes bounds one spool on disk; when it is full, new events are
	// dropped and counted (see the package doc).
	MaxBytes int64 `mapstructure:"max_bytes" desc:"maximum size of the spool in bytes"`
}

// DefaultSpoolConfig returns the defaults of the spool.* keys.
func DefaultSpoolConfig() SpoolConfig { return SpoolConfig{MaxBytes: 256 << 20} }

// Validate reports every problem of c (keys relative to spool.*).
func (c SpoolConfig) Validate() error {
	var p conf.Problems
	p.AtLeast("max_bytes", c.MaxBytes, 1)
	return p.Err()
}

// Root returns Dir, or its default when it is empty.
func (c SpoolConfig) Root() string {
	if c.Dir != "" {
		return c.Dir
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return filepath.Join(cache, "gttsplit", "spool")
}

// Partitioning is the consumer.partitions key, which the aggregator
// composes into its consumer.* section: how many partitions the events
// stream is made with when an aggregator creates it or first partitions it
// (Dial's DialOptions.Partitions, EnsurePartitioned). An existing stream
// keeps its own count (Layout.Partitions).
type Partitioning struct {
	Partitions int `mapstructure:"partitions" desc:"partitions of the runs when the events stream is created or first partitioned (an existing one keeps its count); each is owned by one aggregator at a time"`
}

// DefaultPartitioning returns the default of consumer.partitions,
// DefaultPartitions.
func DefaultPartitioning() Partitioning { return Partitioning{Partitions: DefaultPartitions} }

// Validate reports the problem of c (keys relative to consumer.*).
func (c Partitioning) Validate() error {
	var p conf.Problems
	if n := c.Partitions; n < 1 || n > 1024 {
		p.Add("partitions", "must be 1 to 1024, got %d", n)
	}
	return p.Err()
}

// PublisherConfig is what NewPublisher needs: the keys it reads, and what
// the program decides.
type PublisherConfig struct {
	// NATS gives MaxInFlight, the bound on the events awaiting the
	// broker's ack, and AckTimeout, how long one may await it before it
	// counts as lost and goes to the spool.
	NATS Config
	// Spool gives the spools' directory and MaxBytes.
	Spool SpoolConfig
	// Name is this publisher's spool, a directory of Spool.Root() (the
	// collector's lane); "" is Spool.Root() itself. One publisher at a
	// time uses a spool.
	Name string
	// BackPressure, when positive, makes an ack timeout while the
	// connection is up what it is, a slow broker, for that long: the
	// events in flight are sent again (same ids, so a copy the broker
	// already stored is dropped as a duplicate) and waited for longer,
	// and Publish blocks meanwhile, instead of going to the spool. A
	// replay, which has no source to hold up, sets it to its shutdown
	// timeout. Zero spools them at once (run and attach: a child's or a
	// log's output is never held up).
	BackPressure time.Duration
	// RetryInterval is how often the publisher looks for the broker while
	// events are spooled; after failed attempts it backs off up to 10s.
	// Zero is 500ms.
	RetryInterval time.Duration
	// SegmentBytes is the size at which the spool starts a new segment
	// file. Zero is 8 MiB.
	SegmentBytes int64
}

// DefaultPublisherConfig returns the keys' defaults.
func DefaultPublisherConfig() PublisherConfig {
	return PublisherConfig{NATS: DefaultConfig(), Spool: DefaultSpoolConfig()}
}

// Dir is the publisher's spool directory.
func (c PublisherConfig) Dir() string { return filepath.Join(c.Spool.Root(), c.Name) }

// validate checks the keys the publisher reads (their sections' Validate).
func (c PublisherConfig) validate() error {
	var errs []error
	for _, fe := range conf.Within("nats", c.NATS.Validate()) {
		errs = append(errs, fe)
	}
	for _, fe := range conf.Within("spool", c.Spool.Validate()) {
		errs = append(errs, fe)
	}
	return errors.Join(errs...)
}
