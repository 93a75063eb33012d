package config

import (
	"reflect"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/pkg/conf"
	"github.com/gttsplit/gttsplit/pkg/sinks/commentsink"
	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/sources/fdinfo"
	"github.com/gttsplit/gttsplit/pkg/sources/procwrap"
)

// Collector is the configuration of the collector binary. Its root keys
// (the run's identity, out, shutdown_timeout) and the attach.* and
// replay.* sections are the collector commands' own; every other section
// is declared by the package that reads it.
type Collector struct {
	Log       cli.LogConfig       `mapstructure:"log"`
	Host      string              `mapstructure:"host" flag:"host" desc:"host name recorded on every event, at most 253 bytes, no whitespace; empty means the machine's host name"`
	Lane      string              `mapstructure:"lane" flag:"lane" desc:"lane label of the runs, letters, digits, '-' and '_', at most 64; consumers filter by it"`
	RunID     string              `mapstructure:"run_id" flag:"run-id" desc:"run id, letters, digits, '-' and '_', at most 128; empty means generate one"`
	Issue     string              `mapstructure:"issue" flag:"issue" desc:"tracker issue the run reports to, OWNER/REPO#N; empty for none"`
	ControlOf string              `mapstructure:"control_of" flag:"control-of" desc:"run id this run is the control of (the same command with offload off, -ngl 0); the report names it and the comparison of the two is posted with it; empty for none"`
	SourceDir string              `mapstructure:"source_dir" flag:"source-dir" desc:"git checkout whose commit and dirty state are recorded; empty means the working directory"`
	Out       string              `mapstructure:"out" flag:"out" desc:"directory for split.log, gtt.txt, events.jsonl, split.md and split.json; empty writes none"`
	NATS      bus.Config          `mapstructure:"nats" omit:"replicas,stream_max_age,stream_max_bytes,duplicate_window" desc.url:"NATS server URL(s), comma-separated; empty means no broker (then --out is needed); an unreachable broker spools events to disk" desc.stream:"JetStream stream the events are published to"`
	Spool     bus.SpoolConfig     `mapstructure:"spool"`
	Sample    fdinfo.Config       `mapstructure:"sample"`
	Wrap      procwrap.Config     `mapstructure:"wrap"`
	Batch     sources.BatchConfig `mapstructure:"batch"`
	Attach    Attach              `mapstructure:"attach"`
	Replay    Replay              `mapstructure:"replay"`
	HTTP      HTTP                `mapstructure:"http" desc.listen:"listen address (host:port) of the collector's /metrics and /healthz while it runs; empty serves none" desc.token:"token /metrics asks for (Authorization: Bearer) when http.listen is not a loopback address; empty refuses it there unless http.metrics_public; set it through the environment"`
	// ShutdownTimeout bounds flushing events and the spool at shutdown.
	ShutdownTimeout time.Duration `mapstructure:"shutdown_timeout" desc:"deadline for flushing events and the spool at shutdown"`
}

// Attach is the attach.* keys: how "collector attach" follows a running
// process.
type Attach struct {
	PID      int    `mapstructure:"pid" flag:"pid" desc:"process id to attach to; 0 means none"`
	Log      string `mapstructure:"log" flag:"log" desc:"log file of the attached process to follow; empty means none"`
	StateDir string `mapstructure:"state_dir" flag:"state-dir" desc:"directory for the read positions of attach; empty means <user cache dir>/gttsplit/attach"`
}

// Validate reports the problems of the attach.* keys.
func (a Attach) Validate() error {
	var p conf.Problems
	p.AtLeast("pid", int64(a.PID), 0)
	return p.Err()
}

// Replay is the replay.* keys: how "collector replay" publishes a
// recorded stream.
type Replay struct {
	Pace string `mapstructure:"pace" flag:"pace" desc:"replay pace: instant, original or <N>x (e.g. 10x)"`
}

// Validate reports the problems of the replay.* keys.
func (r Replay) Validate() error {
	var p conf.Problems
	_, err := ParsePace(r.Pace)
	p.Check("pace", err)
	return p.Err()
}

// DefaultCollector returns the collector's defaults: each section's
// defaults from its package, and the collector's own.
func DefaultCollector() Collector {
	return Collector{
		Log:             cli.DefaultLogConfig(),
		Lane:            "default",
		NATS:            bus.DefaultConfig(),
		Spool:           bus.DefaultSpoolConfig(),
		Sample:          fdinfo.DefaultConfig(),
		Wrap:            procwrap.DefaultConfig(),
		Batch:           sources.DefaultBatchConfig(),
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
// [ErrInvalid] and each problem is a [*conf.FieldError]. It does no I/O.
func (c Collector) Validate() error { return invalid(c.problems()) }

func (c Collector) problems() []*conf.FieldError {
	var p conf.Problems
	p.Check("lane", conf.Token(c.Lane, conf.MaxLaneLen))
	if c.Host != "" {
		p.Check("host", conf.Host(c.Host, conf.MaxHostLen))
	}
	if c.RunID != "" {
		p.Check("run_id", conf.Token(c.RunID, conf.MaxRunIDLen))
	}
	if c.ControlOf != "" {
		p.Check("control_of", conf.Token(c.ControlOf, conf.MaxRunIDLen))
	}
	if c.Issue != "" {
		_, _, _, err := commentsink.ParseIssue(c.Issue)
		p.Check("issue", err)
	}
	p.Positive("shutdown_timeout", c.ShutdownTimeout)
	return ordered(c, append(p, sections(reflect.ValueOf(c), "")...))
}

// ordered sorts problems in the order of cfg's keys (stable: one key's
// problems keep their order).
func ordered(cfg any, ps []*conf.FieldError) []*conf.FieldError {
	rank := keyRank(leaves(cfg))
	slices.SortStableFunc(ps, func(a, b *conf.FieldError) int { return rank(a.Key) - rank(b.Key) })
	return ps
}

// String renders c as YAML with every secret redacted.
func (c Collector) String() string { return string(render(c, false)) }

// GoString is String, so %#v does not show secrets either.
func (c Collector) GoString() string { return c.String() }
