package main

import (
	"io"
	"os"

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
llama.cpp process, reads its verbose log lines and samples /proc/<pid>/fdinfo of
its process tree, and publishes both as CloudEvents on NATS JetStream for the
aggregator to fold into a GTT split. It can also write everything to a
directory (--out), which needs no broker at all, and publish a recorded
stream (replay).

Every setting is a key of the YAML file given with --config and an
environment variable GTTSPLIT_<KEY> (dots become underscores); the common
ones are flags too (see each command's --help). Flags win over the
environment, the environment over the file, the file over the defaults.`,
		Version: cli.Version(),
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().String("config", "", "YAML config file (see configs/collector.yaml)")
	io := collector.IO{Stdin: stdin, Stdout: stdout, Stderr: stderr, Signals: sigs, InForeground: cli.InForeground()}
	root.AddCommand(newRun(io), newAttach(io), newReplay(io), newValidate(stdout))
	return root
}

func loadConfig(cmd *cobra.Command) (config.Collector, error) {
	path, _ := cmd.Flags().GetString("config")
	return config.LoadCollector(path, cmd.Flags())
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
		Long: `run starts CMD, passes its output through unchanged, and measures it:

  - it sets GGML_HRX_HOST_WEIGHT_TRACE=1 unless the environment sets it, and
    appends -v unless a verbosity flag is there (wrap.* keys turn both off);
  - it captures every output line and samples /proc/<pid>/fdinfo of the
    child and its descendants every --interval;
  - it forwards SIGTERM and SIGHUP to the child (and SIGINT, unless the
    collector runs in the foreground of a terminal, where Ctrl-C reaches
    the child itself); a child still running wrap.kill_grace after a
    SIGTERM or SIGINT is killed (SIGKILL);
  - it exits with the child's exit code (128+N when a signal N killed it,
    127 when it could not be started), except when the child exited 0 but
    the run's events did not all reach the broker: 75 when they wait in the
    spool (the next collector of the lane delivers them), 1 when some were
    dropped (a full spool or spool disk, refused by the broker) and none
    wait, or when the run's start or finish was lost.

Events go to NATS (--nats-url), and to DIR with --out: split.log (the child's
output), gtt.txt (the samples), events.jsonl (every event), split.md and
split.json (the split computed locally). With --out and no NATS URL it runs
fully offline. With a URL but no reachable broker, events are spooled to disk
and published when the broker is back.`,
		Example: `  collector run --out split-4b -- llama-cli -m model.gguf -ngl 99 -c 256 -n 16
  collector run --nats-url nats://nats:4222 --lane gpu1 --issue org/repo#856 -- llama-server -m model.gguf`,
		Args: cli.Args(cobra.MinimumNArgs(1)),
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
	addFlags(c.Flags(), append(natsFlags, "out", "run-id", "issue", "control-of", "interval", "source-dir", "proc-root")...)
	return c
}

func newAttach(io collector.IO) *cobra.Command {
	c := &cobra.Command{
		Use:   "attach --pid PID [--log FILE] [flags]",
		Short: "Measure a running llama.cpp process (llama-server)",
		Long: `attach samples /proc/PID/fdinfo of a running process and its descendants and,
with --log, follows its log file (llama-server --log-file): appends, rotation
by rename, copytruncate, and a partial last line held until its newline. It
ends when the process exits (then the run is finished) or on SIGINT/SIGTERM
(then the process goes on, and the same attach command resumes the run: the
log's read position is saved only after the broker acknowledged what was read).

The run id is derived from the process (host, pid and start time) unless
--run-id names one.`,
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
	addFlags(c.Flags(), append(natsFlags, "pid", "log", "state-dir", "out", "run-id", "issue", "control-of", "interval", "source-dir", "proc-root")...)
	return c
}

func newReplay(io collector.IO) *cobra.Command {
	c := &cobra.Command{
		Use:   "replay [flags] [FILE...]",
		Short: "Deliver the spool and publish recorded event streams (events.jsonl) to NATS",
		Long: `replay first delivers what waits in the lane's spool (events a collector of
the lane could not deliver: the broker was away), then publishes recorded
streams of gttsplit CloudEvents (the events.jsonl that 'collector run'
records in its output directory, or what 'aggregator export' writes) to
NATS, ids unchanged, so replaying events the stream already holds changes
nothing. With no FILE it only delivers the spool (of --lane, in
--spool-dir).
--pace instant sends them as fast as the broker takes them, original keeps
the events' own time gaps, Nx is N times faster than original. A broker
that acknowledges late is waited for, up to shutdown_timeout.

Its last line, 'replayed', gives sent, delivered, left_in_spool, dropped
and the runs: delivered counts what a broker acknowledged (the spool's
events too). It exits 0 when everything was delivered; 75 when events were
left in the spool (the broker was away: the next collector of the lane
delivers them); 1 when events were refused by the broker (set aside in the
spool's rejected/ directory), or the files held no event and the spool
none either; 128+N when signal N interrupted it (130 for Ctrl-C).`,
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
	addFlags(c.Flags(), "nats-url", "pace", "spool-dir", "lane", "log-level")
	// replay has no --out: the key's own text says it is needed without a
	// URL.
	c.Flags().Lookup("nats-url").Usage = "NATS server URL(s), comma-separated; replay needs one (nats.url: GTTSPLIT_NATS_URL)"
	c.Flags().Lookup("lane").Usage = "lane whose spool (<spool-dir>/<lane>) is delivered first; the replayed events keep their own lanes (lane: GTTSPLIT_LANE)"
	return c
}

func newValidate(stdout io.Writer) *cobra.Command {
	return cli.NewValidate("collector", stdout, func(cmd *cobra.Command) error {
		_, err := loadConfig(cmd)
		return err
	})
}
