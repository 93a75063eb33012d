package main

import (
	"errors"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gttsplit/gttsplit/internal/app/collector"
	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/config"
)

func newRoot(stdin io.Reader, stdout, stderr io.Writer, sigs <-chan os.Signal) *cobra.Command {
	root := &cobra.Command{
		Use:   "collector",
		Short: "Measure llama.cpp processes' GPU memory and publish it as CloudEvents",
		Long: `collector runs on every GPU host. It wraps (run) or attaches to (attach) a
llama.cpp process, reads its verbose log lines, samples /proc/<pid>/fdinfo of
its process tree, and publishes both as CloudEvents on NATS JetStream (or,
with --out, writes them to a directory); replay publishes recorded streams.

Settings are flags, keys of the --config file and GTTSPLIT_<KEY> variables
(flags win, then the environment); every key: docs/configuration.md.`,
		Version: cli.Version(),
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().String("config", "", "YAML config file (see configs/collector.yaml)")
	io := collector.IO{Stdin: stdin, Stdout: stdout, Stderr: stderr, Signals: sigs, InForeground: cli.InForeground()}
	root.AddCommand(newRun(io), newAttach(io), newReplay(io), newCheck(io), newValidate(stdout))
	return root
}

// loadConfig loads the collector config with cmd's flags on top, and
// warns of the GTTSPLIT_* variables that set no key.
func loadConfig(cmd *cobra.Command) (config.Collector, error) {
	path, _ := cmd.Flags().GetString("config")
	cfg, err := config.LoadCollector(path, cmd.Flags())
	if err == nil {
		cli.WarnUnknownEnv(cmd.ErrOrStderr(), cfg.Log, config.UnknownEnvNow())
	}
	return cfg, err
}

func addFlags(fs *pflag.FlagSet, names ...string) {
	if err := config.AddFlags(fs, config.DefaultCollector(), names...); err != nil {
		panic(err) // a programming error: the names are constants of this file
	}
}

var natsFlags = []string{"nats-url", "spool-dir", "host", "lane", "log-level"}

func newRun(io collector.IO) *cobra.Command {
	c := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Run a llama.cpp command and measure it",
		Long: `run starts CMD, passes its output through unchanged, and measures it: it
sets GGML_HRX_HOST_WEIGHT_TRACE=1 and appends -v (unless already there),
and samples /proc/<pid>/fdinfo of the child's process tree every --interval
and at once at a memory-relevant log line. Signals go to the child.

Events go to NATS (--nats-url; spooled to disk while the broker is away)
and, with --out DIR, to split.log, gtt.txt, events.jsonl, split.md and
split.json (with no URL, fully offline). It exits with the child's code,
but 75 when the child exited 0 and events wait in the spool, 1 when some
were dropped or lost. Details: docs/collector.md.`,
		Example: `  collector run --out split-4b -- llama-cli -m model.gguf -ngl 99 -c 256 -n 16
  collector run --nats-url nats://nats:4222 --lane gpu1 --issue org/repo#856 -- llama-server -m model.gguf`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cli.Usage(errors.New("no command to measure: give it after --, as in 'collector run --out DIR -- llama-cli -m model.gguf ...' (see 'collector run --help')"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			log := cli.Logger(cmd.ErrOrStderr(), cfg.Log.Level, cfg.Log.Format)
			code, err := collector.Run(cmd.Context(), cfg, args, io, log)
			if err != nil {
				return err
			}
			if code != 0 {
				return &cli.ExitError{Code: code}
			}
			return nil
		},
	}
	c.Flags().SetInterspersed(false) // everything after CMD is the child's
	addFlags(c.Flags(), append(natsFlags, "out", "run-id", "issue", "control-of", "interval", "source-dir", "proc-root", "http")...)
	return c
}

func newAttach(io collector.IO) *cobra.Command {
	c := &cobra.Command{
		Use:   "attach --pid PID [--log FILE] [flags]",
		Short: "Measure a running llama.cpp process (llama-server)",
		Long: `attach samples /proc/PID/fdinfo of a running process and its descendants
and, with --log, follows its log file (llama-server --log-file) through
rotation and copytruncate. It ends when the process exits (the run is
finished) or on SIGINT/SIGTERM (the process goes on, and the same command
resumes the run from the read position kept in --state-dir). The run id is
derived from the process unless --run-id names one. If the process exited
while no collector watched it, the same command finishes its unfinished
runs from --state-dir (the log read to its end) and exits 0.
Details: docs/collector.md.`,
		Example: `  collector attach --pid 4242 --log /var/log/llama-server.log --lane gpu0 --nats-url nats://nats:4222`,
		Args:    cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			log := cli.Logger(cmd.ErrOrStderr(), cfg.Log.Level, cfg.Log.Format)
			return collector.Attach(cmd.Context(), cfg, io, log)
		},
	}
	addFlags(c.Flags(), append(natsFlags, "pid", "log", "state-dir", "out", "run-id", "issue", "control-of", "interval", "source-dir", "proc-root", "http")...)
	return c
}

func newReplay(io collector.IO) *cobra.Command {
	c := &cobra.Command{
		Use:   "replay [flags] [FILE...]",
		Short: "Deliver the spool and publish recorded event streams (events.jsonl) to NATS",
		Long: `replay first delivers what waits in the lane's spool (--lane, --spool-dir),
then publishes recorded streams (events.jsonl, from 'collector run --out'
or 'aggregator export') with their ids unchanged, so events the stream
already holds change nothing; with no FILE it only delivers the spool.
--pace: instant, original (the events' own time gaps) or Nx. With --host
(and that host's NATS user) only that host's events are sent.

It exits 0 when everything was delivered, 75 when events were left in the
spool, 1 when some were dropped or lost, another host's were not sent, or
there was nothing to send, 128+N on signal N. Details: docs/collector.md.`,
		Example: `  collector replay --nats-url nats://127.0.0.1:4222 testdata/runs/4b/events.jsonl
  collector replay --nats-url nats://nats:4222 --pace 10x run1.jsonl run2.jsonl
  collector replay --nats-url nats://nats:4222 --lane gpu1`,
		Args: cli.Args(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			log := cli.Logger(cmd.ErrOrStderr(), cfg.Log.Level, cfg.Log.Format)
			_, err = collector.Replay(cmd.Context(), cfg, args, io, log)
			return err
		},
	}
	addFlags(c.Flags(), "nats-url", "pace", "spool-dir", "lane", "host", "log-level")
	// replay has no --out: the key's own text says it is needed without a
	// URL.
	c.Flags().Lookup("nats-url").Usage = "NATS server URL(s), comma-separated; replay needs one (nats.url: GTTSPLIT_NATS_URL)"
	c.Flags().Lookup("lane").Usage = "lane whose spool (<spool-dir>/<lane>) is delivered first; the replayed events keep their own lanes (lane: GTTSPLIT_LANE)"
	c.Flags().Lookup("host").Usage = "host whose events are sent (its NATS user may publish no other host's); empty sends every host's (host: GTTSPLIT_HOST)"
	return c
}

func newCheck(io collector.IO) *cobra.Command {
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "check [flags] AGGREGATOR_URL...",
		Short: "Check a new fleet end to end: the aggregators, their partitions, a run on the page",
		Long: `check is the last step of a deployment, run on a GPU host with its collector's
settings (NATS URL, user, password, host): every aggregator answers
/readyz, the partitions are owned and shared by the aggregators given,
and the recorded 4B run, under a new id of this host (lane check, or
--lane), published through the broker shows closed on every aggregator's
page. Off loopback, GTTSPLIT_HTTP_TOKEN must be the aggregators'
http.token. It exits 0 when all holds, 1 naming the first step that does
not. Details: docs/deploy.md.`,
		Example: `  collector check --nats-url nats://nats-1:4222 http://agg-1:8080 http://agg-2:8080`,
		Args:    cli.Args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			// Its steps are its output; the publishing's own lines are
			// at debug.
			log := cli.QuietLogger(cmd.ErrOrStderr(), cfg.Log.Level, cfg.Log.Format, nil)
			return collector.Check(cmd.Context(), cfg, collector.CheckOptions{Aggregators: args, Timeout: timeout}, io.Stdout, log)
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long each step may wait (an aggregator ready, the partitions shared, the run on a page)")
	addFlags(c.Flags(), "nats-url", "spool-dir", "host", "lane", "log-level")
	return c
}

func newValidate(stdout io.Writer) *cobra.Command {
	return cli.NewValidate("collector", stdout, func(cmd *cobra.Command) error {
		path, _ := cmd.Flags().GetString("config")
		_, err := config.LoadCollector(path, cmd.Flags())
		return config.CheckEnv(err, os.Environ())
	})
}
