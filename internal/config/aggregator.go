package config

import (
	"reflect"
	"time"

	"github.com/spf13/pflag"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/fleet"
	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/conf"
	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/commentsink"
	"github.com/gttsplit/gttsplit/pkg/sinks/filesink"
	"github.com/gttsplit/gttsplit/pkg/sinks/jsonsink"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// Aggregator is the configuration of the aggregator binary. Its root keys,
// the embedded.* and http.* sections and the composition of the sinks are
// the aggregator commands' own; every other section is declared by the
// package that reads it. It has no nats.max_in_flight and nats.ack_timeout:
// it publishes no events of its own through a Publisher.
type Aggregator struct {
	Log         cli.LogConfig        `mapstructure:"log"`
	NATS        bus.Config           `mapstructure:"nats" omit:"max_in_flight,ack_timeout" desc.url:"NATS server URL(s), comma-separated; empty means start the embedded server; a server not reachable at start is an error" desc.stream:"JetStream stream the events are consumed from"`
	Embedded    Embedded             `mapstructure:"embedded"`
	Consumer    Consumer             `mapstructure:"consumer"`
	IdleTimeout time.Duration        `mapstructure:"idle_timeout" flag:"idle-timeout" desc:"a run with no event for this long is folded and reported as incomplete"`
	HTTP        HTTP                 `mapstructure:"http"`
	Store       runtable.StoreConfig `mapstructure:"store"`
	Split       split.Config         `mapstructure:"split"`
	Sinks       Sinks                `mapstructure:"sinks"`
	LaneChanges regress.Config       `mapstructure:"lane_changes"`
	Format      string               `mapstructure:"format" flag:"format" desc:"format of the splits printed by serve, parse, replay and quickstart: text, md or json (JSON Lines)"`
	// ShutdownTimeout bounds draining, folding and writing the sinks at
	// shutdown.
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout" desc:"deadline for draining, folding and writing the sinks at shutdown"`
	MemoryLimitMiB  int           `mapstructure:"memory_limit_mib" desc:"memory limit of serve in MiB, its resident set with the embedded broker: the Go runtime gets it as its soft limit less what the runtime does not manage (GOMEMLIMIT, when set, wins), so near it the garbage collector runs more often instead of letting the heap grow to twice what is live; the open runs take at most half of it, counting what each costs wherever its state is (with the embedded broker each closed run kept too), those beyond wait in the state bucket (shedding); the sinks' queues hold at most a sixteenth of splits (by their JSON size), the rest deferred; the embedded broker's memory streams a sixteenth; 0 means none"`
}

// Consumer is the consumer.* keys: the aggregators' group and how it
// consumes the events stream. Each package declares the keys it reads
// (their type, defaults and Validate), and they are squashed into one
// section here, as a collector's configuration composes its components':
//
//	Fleet   durable, lease_ttl                                     fleet.Config            internal/fleet
//	Stream  partitions                                             bus.Partitioning        internal/bus
//	Table   ack_wait, max_ack_pending, checkpoint_interval, lanes  runtable.ConsumerConfig internal/runtable
type Consumer struct {
	Fleet  fleet.Config            `mapstructure:",squash"`
	Stream bus.Partitioning        `mapstructure:",squash"`
	Table  runtable.ConsumerConfig `mapstructure:",squash"`
}

// DefaultConsumer returns the consumer.* keys' defaults, each from the
// package that declares the key.
func DefaultConsumer() Consumer {
	return Consumer{
		Fleet:  fleet.DefaultConfig(),
		Stream: bus.DefaultPartitioning(),
		Table:  runtable.DefaultConsumerConfig(),
	}
}

// Embedded is the embedded.* keys: the in-process NATS server serve and
// export start when nats.url is empty.
type Embedded struct {
	Listen string `mapstructure:"listen" flag:"embedded-listen" desc:"client listen address (host:port) of the embedded NATS server; it requires nats.token or nats.user/nats.password (which the server then demands) unless it is a loopback address"`
	Store  string `mapstructure:"store" flag:"store" desc:"JetStream store directory of the embedded NATS server"`
	// MaxStore is the embedded server's max_file_store.
	MaxStore int64 `mapstructure:"max_store" desc:"most bytes the embedded NATS server's JetStream store may hold (events, run states, leases); when full nothing more is written; 0 means 75 % of the disk's free space at start, as nats-server does"`
}

// Validate reports the problems of the embedded.* keys; whether a listener
// beyond loopback has the authentication it needs is the Aggregator's
// check (it reads nats.* too).
func (e Embedded) Validate() error {
	var p conf.Problems
	p.Check("listen", conf.Listen(e.Listen))
	p.NotEmpty("store", e.Store)
	p.AtLeast("max_store", e.MaxStore, 0)
	return p.Err()
}

// HTTP is the http.* keys of both binaries: the aggregator's HTTP endpoint,
// a collector's /metrics (each binary words listen and token for itself
// with desc.listen and desc.token on its field).
type HTTP struct {
	// Listen is host:port; empty serves no HTTP.
	Listen string `mapstructure:"listen" flag:"http" desc:"listen address (host:port) of the HTTP endpoint; empty disables it"`
	// Token guards every path but /healthz and /readyz beyond loopback.
	Token conf.Secret `mapstructure:"token" desc:"token every path but /healthz and /readyz asks for when http.listen is not a loopback address (the page, /events, /runs, /runs/{id}, /partitions, /metrics; open the page once with ?token=, or send Authorization: Bearer); empty refuses them there; set it through the environment"`
	// MetricsPublic leaves /metrics open on a non-loopback listener.
	MetricsPublic bool `mapstructure:"metrics_public" desc:"serve /metrics without http.token on a non-loopback address (counters only, no run data), for a scraper that cannot send a bearer token"`
	// Pprof serves the Go runtime's profiles at /debug/pprof/.
	Pprof bool `mapstructure:"pprof" desc:"serve the Go runtime's profiles (heap, goroutines, CPU) at /debug/pprof/, on a loopback address to anyone, elsewhere only with http.token (metrics_public does not open them); off by default"`
}

// Validate reports the problems of the http.* keys.
func (h HTTP) Validate() error {
	var p conf.Problems
	if h.Listen != "" {
		p.Check("listen", conf.Listen(h.Listen))
	}
	return p.Err()
}

// Sinks is the sinks.* keys: where splits are written, each sink's keys
// declared by its package, and how the fanout retries and queues. A sink
// is on when its section names where it writes (file.dir, json.dir,
// issue_comment.api); empty, the default, is off.
type Sinks struct {
	File         filesink.Config    `mapstructure:"file"`
	JSON         jsonsink.Config    `mapstructure:"json"`
	IssueComment commentsink.Config `mapstructure:"issue_comment"`
	Retry        sinks.RetryPolicy  `mapstructure:"retry"`
	// MaxPending is sinks.FanoutConfig.MaxPending.
	MaxPending int `mapstructure:"max_pending" desc:"splits each sink holds in memory while it is behind; past it serve keeps only their run ids (up to 64 times as many) and reads each split back from the state bucket in its turn, replay recomputes it"`
}

// Validate reports the problems of the sinks.* keys of its own.
func (s Sinks) Validate() error {
	var p conf.Problems
	p.AtLeast("max_pending", int64(s.MaxPending), 1)
	return p.Err()
}

// DefaultAggregator returns the aggregator's defaults: each section's
// defaults from its package, and the aggregator's own.
func DefaultAggregator() Aggregator {
	return Aggregator{
		Log:         cli.DefaultLogConfig(),
		NATS:        bus.DefaultConfig(),
		Embedded:    Embedded{Listen: "127.0.0.1:4222", Store: "./data"},
		Consumer:    DefaultConsumer(),
		IdleTimeout: 10 * time.Minute,
		HTTP:        HTTP{Listen: "127.0.0.1:8080"},
		Store:       runtable.DefaultStoreConfig(),
		Split:       split.DefaultConfig(),
		Sinks: Sinks{
			IssueComment: commentsink.DefaultConfig(),
			Retry:        sinks.DefaultRetryPolicy(),
			MaxPending:   1024,
		},
		LaneChanges:     regress.DefaultConfig(),
		Format:          "text",
		ShutdownTimeout: 30 * time.Second,
		MemoryLimitMiB:  224,
	}
}

// LoadAggregator loads the aggregator's configuration: defaults, then the
// YAML file at path (none when path is ""), then GTTSPLIT_* environment
// variables, then the flags of fs that were set (fs may be nil). Flags are
// matched to keys by [FlagKeys]. It returns the validated config, or an
// error wrapping [ErrInvalid] that lists every problem.
func LoadAggregator(path string, fs *pflag.FlagSet) (Aggregator, error) {
	cfg := DefaultAggregator()
	if err := load(path, fs, &cfg); err != nil {
		return Aggregator{}, err
	}
	return cfg, nil
}

// Validate reports every problem of a at once; the error wraps
// [ErrInvalid] and each problem is a [*conf.FieldError]. It does no I/O.
func (a Aggregator) Validate() error { return invalid(a.problems()) }

func (a Aggregator) problems() []*conf.FieldError {
	var p conf.Problems
	if conf.Listen(a.Embedded.Listen) == nil && a.NATS.URL == "" && !conf.IsLoopbackListen(a.Embedded.Listen) &&
		a.NATS.Token == "" && a.NATS.User == "" {
		p.Add("embedded.listen", "%q is not a loopback address and the embedded server would have no authentication: set nats.token (GTTSPLIT_NATS_TOKEN) or nats.user and nats.password, or listen on 127.0.0.1", a.Embedded.Listen)
	}
	p.Positive("idle_timeout", a.IdleTimeout)
	p.AtLeast("memory_limit_mib", int64(a.MemoryLimitMiB), 0)
	p.OneOf("format", a.Format, "text", "md", "json")
	p.Positive("shutdown_timeout", a.ShutdownTimeout)
	return ordered(a, append(p, sections(reflect.ValueOf(a), "")...))
}

// String renders a as YAML with every secret redacted.
func (a Aggregator) String() string { return string(render(a, false)) }

// GoString is String, so %#v does not show secrets either.
func (a Aggregator) GoString() string { return a.String() }
