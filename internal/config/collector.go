package config

import (
	"github.com/gttsplit/gttsplit/pkg/redact"
	"time"

	"github.com/spf13/pflag"
)

// Collector is the configuration of the collector binary.
type Collector struct {
	Log             Log           `mapstructure:"log"`
	Host            string        `mapstructure:"host" flag:"host" desc:"host name recorded on every event, at most 253 bytes, no whitespace; empty means the machine's host name"`
	Lane            string        `mapstructure:"lane" flag:"lane" desc:"lane label of the runs, letters, digits, '-' and '_', at most 64; consumers filter by it"`
	RunID           string        `mapstructure:"run_id" flag:"run-id" desc:"run id, letters, digits, '-' and '_', at most 128; empty means generate one"`
	Issue           string        `mapstructure:"issue" flag:"issue" desc:"tracker issue the run reports to, OWNER/REPO#N; empty for none"`
	ControlOf       string        `mapstructure:"control_of" flag:"control-of" desc:"run id this run is the control of (the same command with offload off, -ngl 0); the report names it and the comparison of the two is posted with it; empty for none"`
	SourceDir       string        `mapstructure:"source_dir" flag:"source-dir" desc:"git checkout whose commit and dirty state are recorded; empty means the working directory"`
	Out             string        `mapstructure:"out" flag:"out" desc:"directory for split.log, gtt.txt, events.jsonl, split.md and split.json; empty writes none"`
	NATS            CollectorNATS `mapstructure:"nats"`
	Spool           Spool         `mapstructure:"spool"`
	Sample          Sample        `mapstructure:"sample"`
	Wrap            Wrap          `mapstructure:"wrap"`
	Batch           Batch         `mapstructure:"batch"`
	Attach          Attach        `mapstructure:"attach"`
	Replay          Replay        `mapstructure:"replay"`
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout" desc:"deadline for flushing events and the spool at shutdown"`
}

// CollectorNATS is how the collector publishes to NATS JetStream.
type CollectorNATS struct {
	URL             string        `mapstructure:"url" flag:"nats-url" desc:"NATS server URL(s), comma-separated; empty means no broker (then --out is needed); an unreachable broker spools events to disk"`
	Token           Secret        `mapstructure:"token" desc:"NATS auth token; set it through the environment"`
	User            string        `mapstructure:"user" desc:"NATS user name; needs nats.password"`
	Password        Secret        `mapstructure:"password" desc:"NATS password; set it through the environment"`
	NKeySeedFile    string        `mapstructure:"nkey_seed_file" desc:"file holding the NKey seed for NATS auth"`
	CredsFile       string        `mapstructure:"creds_file" desc:"NATS credentials file holding a user JWT and NKey seed"`
	TLS             TLS           `mapstructure:"tls"`
	Stream          string        `mapstructure:"stream" desc:"JetStream stream the events are published to"`
	ConnectTimeout  time.Duration `mapstructure:"connect_timeout" desc:"timeout for connecting to NATS"`
	MaxInFlight     int           `mapstructure:"max_in_flight" desc:"maximum published events awaiting the broker's acknowledgement"`
	AckTimeout      time.Duration `mapstructure:"ack_timeout" desc:"time an event waits for the broker's acknowledgement before it goes to the spool (run, attach) or is sent again (replay); a connected broker that answers later gets twice as long, up to 8 times"`
	Replicas        int           `mapstructure:"replicas" desc:"replicas of the stream, its consumers and the state bucket when a client creates them (1 to 5; 3 on a cluster); an existing stream is raised to it, never lowered"`
	StreamMaxAge    time.Duration `mapstructure:"stream_max_age" desc:"age after which the stream discards events, set when a client creates it; 0 keeps them until stream_max_bytes"`
	StreamMaxBytes  int64         `mapstructure:"stream_max_bytes" desc:"size in bytes above which the stream discards its oldest events, set when a client creates it; 0 means no limit"`
	DuplicateWindow time.Duration `mapstructure:"duplicate_window" desc:"JetStream de-duplication window of the stream, set when a client creates it (at least 2m)"`
}

// Spool is where the collector keeps events while no broker is reachable.
type Spool struct {
	Dir      string `mapstructure:"dir" flag:"spool-dir" desc:"spool directory; empty means <user cache dir>/gttsplit/spool"`
	MaxBytes int64  `mapstructure:"max_bytes" desc:"maximum size of the spool in bytes"`
}

// Sample is how the collector samples /proc/<pid>/fdinfo and the cards.
type Sample struct {
	Interval       time.Duration `mapstructure:"interval" flag:"interval" desc:"time between two fdinfo samples"`
	ProcRoot       string        `mapstructure:"proc_root" flag:"proc-root" desc:"root of the proc file system"`
	SysRoot        string        `mapstructure:"sys_root" desc:"root of the sys file system, read for the GPU cards' GTT totals"`
	RescanInterval time.Duration `mapstructure:"rescan_interval" desc:"time between rescans for new processes and file descriptors"`
	TriggerMinGap  time.Duration `mapstructure:"trigger_min_gap" desc:"least time between a sample taken at once at a memory-relevant log line and the sample before it"`
}

// Wrap is how "collector run" starts its child.
type Wrap struct {
	SetTraceEnv bool          `mapstructure:"set_trace_env" desc:"set GGML_HRX_HOST_WEIGHT_TRACE=1 for the child unless it is set"`
	AddVerbose  bool          `mapstructure:"add_verbose" desc:"append -v to the child's arguments unless a verbosity flag is there"`
	KillGrace   time.Duration `mapstructure:"kill_grace" desc:"time the child gets after a forwarded signal before it is killed"`
	RedactFlags string        `mapstructure:"redact_flags" desc:"regexp on the names of flags (without dashes) and of NAME=VALUE arguments whose values are masked in the recorded command (--name VALUE, --name=VALUE, name=VALUE); Authorization credentials (Bearer, Basic) and URL credentials are always masked"`
}

// Batch is how log lines are grouped into events.
type Batch struct {
	MaxLines int           `mapstructure:"max_lines" desc:"maximum log lines in one event"`
	MaxDelay time.Duration `mapstructure:"max_delay" desc:"maximum time a log line waits for its batch to be published"`
}

// Attach is how "collector attach" follows a running process.
type Attach struct {
	PID      int    `mapstructure:"pid" flag:"pid" desc:"process id to attach to; 0 means none"`
	Log      string `mapstructure:"log" flag:"log" desc:"log file of the attached process to follow; empty means none"`
	StateDir string `mapstructure:"state_dir" flag:"state-dir" desc:"directory for the read positions of attach; empty means <user cache dir>/gttsplit/attach"`
}

// Replay is how "collector replay" publishes a recorded stream.
type Replay struct {
	Pace string `mapstructure:"pace" flag:"pace" desc:"replay pace: instant, original or <N>x (e.g. 10x)"`
}

// DefaultCollector returns the collector's defaults. It is the only place
// they are written.
func DefaultCollector() Collector {
	return Collector{
		Log:  Log{Level: "info", Format: "console"},
		Lane: "default",
		NATS: CollectorNATS{
			Stream:          "GTTSPLIT",
			ConnectTimeout:  5 * time.Second,
			MaxInFlight:     256,
			AckTimeout:      5 * time.Second,
			Replicas:        1,
			DuplicateWindow: 2 * time.Minute,
		},
		Spool: Spool{MaxBytes: 256 << 20},
		Sample: Sample{
			Interval:       100 * time.Millisecond,
			ProcRoot:       "/proc",
			SysRoot:        "/sys",
			RescanInterval: time.Second,
			TriggerMinGap:  5 * time.Millisecond,
		},
		Wrap:            Wrap{SetTraceEnv: true, AddVerbose: true, KillGrace: 10 * time.Second, RedactFlags: redact.DefaultFlagPattern},
		Batch:           Batch{MaxLines: 256, MaxDelay: 50 * time.Millisecond},
		Attach:          Attach{},
		Replay:          Replay{Pace: "instant"},
		ShutdownTimeout: 30 * time.Second,
	}
}

// LoadCollector loads the collector's configuration: defaults, then the
// YAML file at path (none when path is ""), then GTTSPLIT_* environment
// variables, then the flags of fs that were set (fs may be nil). Flags are
// matched to keys by [FlagKeys]. It returns the validated config, or an
// error wrapping [ErrInvalid] that lists every problem.
func LoadCollector(path string, fs *pflag.FlagSet) (Collector, error) {
	cfg := DefaultCollector()
	if err := load(path, fs, &cfg); err != nil {
		return Collector{}, err
	}
	return cfg, nil
}

// Validate reports every problem of c at once; the error wraps
// [ErrInvalid] and each problem is a [*FieldError]. It does no I/O.
func (c Collector) Validate() error { return invalid(c.problems()) }

func (c Collector) problems() []*FieldError {
	var p problems
	p.log(c.Log)
	if err := checkToken(c.Lane, MaxLaneLen); err != nil {
		p.add("lane", "%w", err)
	}
	if c.Host != "" {
		if err := checkHost(c.Host); err != nil {
			p.add("host", "%w", err)
		}
	}
	if c.RunID != "" {
		if err := checkToken(c.RunID, MaxRunIDLen); err != nil {
			p.add("run_id", "%w", err)
		}
	}
	if c.ControlOf != "" {
		if err := checkToken(c.ControlOf, MaxRunIDLen); err != nil {
			p.add("control_of", "%w", err)
		}
	}
	if c.Issue != "" {
		if _, _, _, err := ParseIssue(c.Issue); err != nil {
			p.add("issue", "%w", err)
		}
	}
	p.nats(natsCommon{
		URL: c.NATS.URL, Token: c.NATS.Token, User: c.NATS.User, Password: c.NATS.Password,
		NKeySeedFile: c.NATS.NKeySeedFile, CredsFile: c.NATS.CredsFile, TLS: c.NATS.TLS,
		Stream: c.NATS.Stream, ConnectTimeout: c.NATS.ConnectTimeout,
		Replicas: c.NATS.Replicas, StreamMaxAge: c.NATS.StreamMaxAge, StreamMaxBytes: c.NATS.StreamMaxBytes,
		DuplicateWindow: c.NATS.DuplicateWindow,
	})
	p.atLeast("nats.max_in_flight", int64(c.NATS.MaxInFlight), 1)
	p.positive("nats.ack_timeout", c.NATS.AckTimeout)
	p.atLeast("spool.max_bytes", c.Spool.MaxBytes, 1)
	p.positive("sample.interval", c.Sample.Interval)
	if c.Sample.ProcRoot == "" {
		p.add("sample.proc_root", "must not be empty")
	}
	if c.Sample.SysRoot == "" {
		p.add("sample.sys_root", "must not be empty")
	}
	p.positive("sample.rescan_interval", c.Sample.RescanInterval)
	if c.Sample.TriggerMinGap < 0 {
		p.add("sample.trigger_min_gap", "must not be negative")
	}
	p.positive("wrap.kill_grace", c.Wrap.KillGrace)
	if _, err := redact.New(c.Wrap.RedactFlags); err != nil {
		p.add("wrap.redact_flags", "does not compile: %w", err)
	}
	p.atLeast("batch.max_lines", int64(c.Batch.MaxLines), 1)
	p.positive("batch.max_delay", c.Batch.MaxDelay)
	p.atLeast("attach.pid", int64(c.Attach.PID), 0)
	if _, err := ParsePace(c.Replay.Pace); err != nil {
		p.add("replay.pace", "%w", err)
	}
	p.positive("shutdown_timeout", c.ShutdownTimeout)
	return p
}

// String renders c as YAML with every secret redacted.
func (c Collector) String() string { return string(render(c, false)) }

// GoString is String, so %#v does not show secrets either.
func (c Collector) GoString() string { return c.String() }
