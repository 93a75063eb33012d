package config

import (
	"strings"
	"time"

	"github.com/gttsplit/gttsplit/pkg/split"

	"github.com/spf13/pflag"
)

// Aggregator is the configuration of the aggregator binary.
type Aggregator struct {
	Log             Log            `mapstructure:"log"`
	NATS            AggregatorNATS `mapstructure:"nats"`
	Embedded        Embedded       `mapstructure:"embedded"`
	Consumer        Consumer       `mapstructure:"consumer"`
	IdleTimeout     time.Duration  `mapstructure:"idle_timeout" flag:"idle-timeout" desc:"a run with no event for this long is folded and reported as incomplete"`
	HTTP            HTTP           `mapstructure:"http"`
	Store           Store          `mapstructure:"store"`
	Split           Split          `mapstructure:"split"`
	Sinks           Sinks          `mapstructure:"sinks"`
	Format          string         `mapstructure:"format" flag:"format" desc:"format of the splits printed by serve, parse, replay and quickstart: text, md or json (JSON Lines)"`
	ShutdownTimeout time.Duration  `mapstructure:"shutdown_timeout" desc:"deadline for draining, folding and writing the sinks at shutdown"`
	MemoryLimitMiB  int            `mapstructure:"memory_limit_mib" desc:"soft memory limit of serve in MiB (the Go runtime's, as GOMEMLIMIT, which wins when set): near it the garbage collector runs more often instead of letting the heap grow to twice what is live; 0 means none"`
}

// AggregatorNATS is how the aggregator consumes from NATS JetStream.
type AggregatorNATS struct {
	URL             string        `mapstructure:"url" flag:"nats-url" desc:"NATS server URL(s), comma-separated; empty means start the embedded server; a server not reachable at start is an error"`
	Token           Secret        `mapstructure:"token" desc:"NATS auth token; set it through the environment"`
	User            string        `mapstructure:"user" desc:"NATS user name; needs nats.password"`
	Password        Secret        `mapstructure:"password" desc:"NATS password; set it through the environment"`
	NKeySeedFile    string        `mapstructure:"nkey_seed_file" desc:"file holding the NKey seed for NATS auth"`
	CredsFile       string        `mapstructure:"creds_file" desc:"NATS credentials file holding a user JWT and NKey seed"`
	TLS             TLS           `mapstructure:"tls"`
	Stream          string        `mapstructure:"stream" desc:"JetStream stream the events are consumed from"`
	ConnectTimeout  time.Duration `mapstructure:"connect_timeout" desc:"timeout for connecting to NATS"`
	Replicas        int           `mapstructure:"replicas" desc:"replicas of the stream, its consumers and the state bucket when a client creates them (1 to 5; 3 on a cluster); an existing stream is raised to it, never lowered"`
	StreamMaxAge    time.Duration `mapstructure:"stream_max_age" desc:"age after which the stream discards events, set when a client creates it; 0 keeps them until stream_max_bytes"`
	StreamMaxBytes  int64         `mapstructure:"stream_max_bytes" desc:"size in bytes above which the stream discards its oldest events, set when a client creates it; 0 means no limit"`
	DuplicateWindow time.Duration `mapstructure:"duplicate_window" desc:"JetStream de-duplication window of the stream, set when a client creates it (at least 2m)"`
}

// Embedded is the in-process NATS server started when nats.url is empty.
type Embedded struct {
	Listen string `mapstructure:"listen" flag:"embedded-listen" desc:"client listen address (host:port) of the embedded NATS server; it requires nats.token or nats.user/nats.password (which the server then demands) unless it is a loopback address"`
	Store  string `mapstructure:"store" flag:"store" desc:"JetStream store directory of the embedded NATS server"`
}

// Consumer is the durable JetStream consumer the aggregators share.
type Consumer struct {
	Durable       string        `mapstructure:"durable" desc:"name of the aggregators' group: aggregators with the same name share the partitions (consumers <durable>-pNN, leases lease.<durable>.N)"`
	AckWait       time.Duration `mapstructure:"ack_wait" desc:"time after which an unacknowledged message is redelivered"`
	MaxAckPending int           `mapstructure:"max_ack_pending" desc:"maximum messages of a partition delivered and not yet acknowledged; a checkpoint starts once half of them wait"`
	// CheckpointInterval is how often the changed runs' states are written
	// (and their messages acknowledged).
	CheckpointInterval time.Duration `mapstructure:"checkpoint_interval" desc:"how often a partition's changed runs' states are written to the state bucket and their messages acknowledged (also when a run is complete, or half of max_ack_pending messages wait); a longer one writes each busy run less often, a shorter one folds less again after a crash; at most half of ack_wait"`
	Partitions         int           `mapstructure:"partitions" desc:"partitions of the runs when the events stream is created or first partitioned (an existing one keeps its count); each is owned by one aggregator at a time"`
	LeaseTTL           time.Duration `mapstructure:"lease_ttl" desc:"time to live of a partition's lease: a killed or cut-off aggregator's partitions are taken over this long after its last renewal (a stopping one hands them over at once); it must outlast a cluster electing a new leader (about 10 s)"`
	Lanes              string        `mapstructure:"lanes" desc:"lanes whose runs this aggregator folds, comma-separated; empty means every lane"`
}

// LaneList returns the lanes of Lanes (nil: every lane).
func (c Consumer) LaneList() []string {
	var out []string
	for _, l := range strings.Split(c.Lanes, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// Store is how long the state bucket keeps what.
type Store struct {
	Retention    time.Duration `mapstructure:"retention" desc:"closed runs whose split was written longer ago are deleted from the state bucket (checked hourly); 0 keeps them"`
	CompactAfter time.Duration `mapstructure:"compact_after" desc:"a closed run keeps its full fold state this long (a late event re-opens it and folds as before), then only a compact record (its split and what it folded); a new event after that is dead-lettered with reason late; 0 keeps the full state"`
}

// HTTP is the aggregator's HTTP endpoint.
type HTTP struct {
	Listen string `mapstructure:"listen" flag:"http" desc:"listen address (host:port) of the HTTP endpoint; empty disables it"`
	Token  Secret `mapstructure:"token" desc:"token every path but /healthz and /readyz asks for when http.listen is not a loopback address (the page, /events, /runs, /runs/{id}, /partitions, /metrics; open the page once with ?token=, or send Authorization: Bearer); empty refuses them there; set it through the environment"`
	// MetricsPublic leaves /metrics open on a non-loopback listener.
	MetricsPublic bool `mapstructure:"metrics_public" desc:"serve /metrics without http.token on a non-loopback address (counters only, no run data), for a scraper that cannot send a bearer token"`
}

// Split tunes how events are folded into a split.
type Split struct {
	UnattributedThresholdPct float64 `mapstructure:"unattributed_threshold_pct" flag:"threshold" desc:"unattributed share of peak GTT, in percent (0-100], above which the check is raised"`
	TracePattern             string  `mapstructure:"trace_pattern" desc:"regexp with one capture group: the resident MiB of a host-weight trace line"`
	TraceNamePattern         string  `mapstructure:"trace_name_pattern" desc:"regexp with one capture group: the tensor name of a host-weight trace line"`
}

// Sinks configures where splits are written. A sink with an empty
// directory or API is disabled.
type Sinks struct {
	File         FileSink         `mapstructure:"file"`
	JSON         JSONSink         `mapstructure:"json"`
	IssueComment IssueCommentSink `mapstructure:"issue_comment"`
	Retry        Retry            `mapstructure:"retry"`
	MaxPending   int              `mapstructure:"max_pending" desc:"splits each sink holds in memory while it is behind; past it serve keeps only their run ids (up to 64 times as many) and reads each split back from the state bucket in its turn, replay recomputes it"`
}

// Count returns how many sinks the configuration enables.
func (s Sinks) Count() int {
	n := 0
	for _, on := range []bool{s.File.Dir != "", s.JSON.Dir != "", s.IssueComment.API != ""} {
		if on {
			n++
		}
	}
	return n
}

// FileSink writes one Markdown report per run.
type FileSink struct {
	Dir string `mapstructure:"dir" flag:"file-dir" desc:"directory for one Markdown report per run; empty disables the file sink"`
}

// JSONSink writes one JSON document per run and splits.jsonl.
type JSONSink struct {
	Dir string `mapstructure:"dir" flag:"json-dir" desc:"directory for one JSON report per run and splits.jsonl; empty disables the JSON sink"`
}

// IssueCommentSink posts the report as a comment on the run's issue.
type IssueCommentSink struct {
	API          string        `mapstructure:"api" flag:"comment-api" desc:"issue tracker API base URL (e.g. https://api.github.com), the token read from GTTSPLIT_COMMENT_TOKEN; empty disables the comment sink"`
	DefaultIssue string        `mapstructure:"default_issue" flag:"comment-issue" desc:"issue OWNER/REPO#N for runs that name none"`
	DryRun       bool          `mapstructure:"dry_run" flag:"comment-dry-run" desc:"print what would be posted instead of posting it"`
	Token        Secret        `mapstructure:"token" env:"GTTSPLIT_COMMENT_TOKEN" desc:"API token of the comment sink; never printed"`
	Timeout      time.Duration `mapstructure:"timeout" desc:"time one request to the tracker API may take"`
}

// Retry bounds how sinks retry transient errors.
type Retry struct {
	MaxBackoff time.Duration `mapstructure:"max_backoff" desc:"cap on the exponential backoff between retries of a sink write"`
}

// Default patterns of a host-weight trace line: the core's own.
const (
	defaultTracePattern     = split.DefaultTracePattern
	defaultTraceNamePattern = split.DefaultTraceNamePattern
)

// DefaultAggregator returns the aggregator's defaults. It is the only place
// they are written.
func DefaultAggregator() Aggregator {
	return Aggregator{
		Log:         Log{Level: "info", Format: "console"},
		NATS:        AggregatorNATS{Stream: "GTTSPLIT", ConnectTimeout: 5 * time.Second, Replicas: 1, DuplicateWindow: 2 * time.Minute},
		Embedded:    Embedded{Listen: "127.0.0.1:4222", Store: "./data"},
		Consumer:    Consumer{Durable: "gttsplit-aggregator", AckWait: 10 * time.Second, MaxAckPending: 4096, Partitions: 16, CheckpointInterval: 2 * time.Second, LeaseTTL: 15 * time.Second},
		IdleTimeout: 10 * time.Minute,
		HTTP:        HTTP{Listen: "127.0.0.1:8080"},
		Store:       Store{Retention: 30 * 24 * time.Hour, CompactAfter: time.Hour},
		Split: Split{
			UnattributedThresholdPct: 10,
			TracePattern:             defaultTracePattern,
			TraceNamePattern:         defaultTraceNamePattern,
		},
		Sinks: Sinks{
			IssueComment: IssueCommentSink{Timeout: 30 * time.Second},
			Retry:        Retry{MaxBackoff: 5 * time.Minute},
			MaxPending:   1024,
		},
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
// [ErrInvalid] and each problem is a [*FieldError]. It does no I/O.
func (a Aggregator) Validate() error { return invalid(a.problems()) }

func (a Aggregator) problems() []*FieldError {
	var p problems
	p.log(a.Log)
	p.nats(natsCommon{
		URL: a.NATS.URL, Token: a.NATS.Token, User: a.NATS.User, Password: a.NATS.Password,
		NKeySeedFile: a.NATS.NKeySeedFile, CredsFile: a.NATS.CredsFile, TLS: a.NATS.TLS,
		Stream: a.NATS.Stream, ConnectTimeout: a.NATS.ConnectTimeout,
		Replicas: a.NATS.Replicas, StreamMaxAge: a.NATS.StreamMaxAge, StreamMaxBytes: a.NATS.StreamMaxBytes,
		DuplicateWindow: a.NATS.DuplicateWindow,
	})
	if err := checkListen(a.Embedded.Listen); err != nil {
		p.add("embedded.listen", "%w", err)
	} else if a.NATS.URL == "" && !IsLoopbackListen(a.Embedded.Listen) && a.NATS.Token == "" && a.NATS.User == "" {
		p.add("embedded.listen", "%q is not a loopback address and the embedded server would have no authentication: set nats.token (GTTSPLIT_NATS_TOKEN) or nats.user and nats.password, or listen on 127.0.0.1", a.Embedded.Listen)
	}
	if a.Embedded.Store == "" {
		p.add("embedded.store", "must not be empty")
	}
	if err := checkName(a.Consumer.Durable); err != nil {
		p.add("consumer.durable", "%w", err)
	}
	p.positive("consumer.ack_wait", a.Consumer.AckWait)
	if c, w := a.Consumer.CheckpointInterval, a.Consumer.AckWait; c <= 0 {
		p.positive("consumer.checkpoint_interval", c)
	} else if w > 0 && c > w/2 {
		// A message is acknowledged after the checkpoint that holds it:
		// well before the server would deliver it again.
		p.add("consumer.checkpoint_interval", "must be at most half of consumer.ack_wait (%s), got %s", w, c)
	}
	if n := a.Consumer.Partitions; n < 1 || n > 1024 {
		p.add("consumer.partitions", "must be 1 to 1024, got %d", n)
	}
	for _, l := range a.Consumer.LaneList() {
		if err := checkToken(l, MaxLaneLen); err != nil {
			p.add("consumer.lanes", "%w", err)
		}
	}
	p.atLeast("consumer.max_ack_pending", int64(a.Consumer.MaxAckPending), 1)
	if l := a.Consumer.LeaseTTL; l < 3*time.Second {
		p.add("consumer.lease_ttl", "must be at least 3s, got %s", l)
	}
	p.positive("idle_timeout", a.IdleTimeout)
	p.atLeast("memory_limit_mib", int64(a.MemoryLimitMiB), 0)
	if a.Store.Retention < 0 {
		p.add("store.retention", "must not be negative, got %s", a.Store.Retention)
	}
	if a.Store.CompactAfter < 0 {
		p.add("store.compact_after", "must not be negative, got %s", a.Store.CompactAfter)
	}
	if a.HTTP.Listen != "" {
		if err := checkListen(a.HTTP.Listen); err != nil {
			p.add("http.listen", "%w", err)
		}
	}
	if t := a.Split.UnattributedThresholdPct; !(t > 0 && t <= 100) {
		p.add("split.unattributed_threshold_pct", "must be in (0, 100], got %v", t)
	}
	if err := checkPattern(a.Split.TracePattern); err != nil {
		p.add("split.trace_pattern", "%w", err)
	}
	if err := checkPattern(a.Split.TraceNamePattern); err != nil {
		p.add("split.trace_name_pattern", "%w", err)
	}
	if a.Sinks.IssueComment.API != "" {
		if err := checkHTTPURL(a.Sinks.IssueComment.API); err != nil {
			p.add("sinks.issue_comment.api", "%w", err)
		}
		if a.Sinks.IssueComment.Token == "" && !a.Sinks.IssueComment.DryRun {
			p.add("sinks.issue_comment.token", "must be set when sinks.issue_comment.api is (GTTSPLIT_COMMENT_TOKEN), unless sinks.issue_comment.dry_run")
		}
	}
	if a.Sinks.IssueComment.DefaultIssue != "" {
		if _, _, _, err := ParseIssue(a.Sinks.IssueComment.DefaultIssue); err != nil {
			p.add("sinks.issue_comment.default_issue", "%w", err)
		}
	}
	p.positive("sinks.issue_comment.timeout", a.Sinks.IssueComment.Timeout)
	p.positive("sinks.retry.max_backoff", a.Sinks.Retry.MaxBackoff)
	p.atLeast("sinks.max_pending", int64(a.Sinks.MaxPending), 1)
	p.oneOf("format", a.Format, "text", "md", "json")
	p.positive("shutdown_timeout", a.ShutdownTimeout)
	return p
}

// String renders a as YAML with every secret redacted.
func (a Aggregator) String() string { return string(render(a, false)) }

// GoString is String, so %#v does not show secrets either.
func (a Aggregator) GoString() string { return a.String() }
