package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/gttsplit/gttsplit/internal/app/aggregator"
	"github.com/gttsplit/gttsplit/internal/cli"
)

var sinkFlags = []string{"file-dir", "json-dir", "comment-api", "comment-issue", "comment-dry-run"}

func newServe(stdout io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "serve",
		Short: "Consume events from NATS, fold every run, write the sinks",
		Long: `serve consumes the events collectors publish, folds every run into its split,
and writes it to the sinks when the run finishes, or after --idle-timeout
without events (incomplete). With no --nats-url it embeds a NATS server.
Aggregators sharing consumer.durable split the runs' partitions between them;
one that takes over a stopped one's partitions writes the same splits.
--http serves the live page, /readyz and /metrics (off loopback behind
http.token). SIGINT or SIGTERM drains, then exits 0.
Details: docs/operations.md.`,
		Example: `  aggregator serve --json-dir out/json --file-dir out/reports
  aggregator serve --nats-url nats://nats-1:4222,nats://nats-2:4222 --comment-api https://api.github.com`,
		Args: cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			log := cli.Logger(cmd.ErrOrStderr(), cfg.Log.Level, cfg.Log.Format)
			setMemoryLimit(cfg.MemoryLimitMiB, log)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return aggregator.Serve(ctx, cfg, aggregator.ServeOptions{Stdout: stdout}, log)
		},
	}
	addFlags(c.Flags(), append([]string{"nats-url", "embedded-listen", "store", "idle-timeout", "http", "format", "threshold", "log-level"}, sinkFlags...)...)
	return c
}

// setMemoryLimit sets the Go runtime's soft memory limit so that the
// process stays within mib MiB (aggregator.GoMemoryLimit: less what the
// runtime does not manage), unless mib is 0 or GOMEMLIMIT is set (then
// the runtime took that).
func setMemoryLimit(mib int, log zerolog.Logger) {
	if mib <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit := aggregator.GoMemoryLimit(mib)
	debug.SetMemoryLimit(limit)
	log.Debug().Int("memory_limit_mib", mib).Int64("go_memory_limit_mib", limit>>20).Msg("soft memory limit set")
}

func newExport(stdout io.Writer) *cobra.Command {
	var runID, since, until string
	c := &cobra.Command{
		Use:   "export (--run ID | --since TIME [--until TIME]) [flags] > events.jsonl",
		Short: "Write a range of the JetStream stream as a recorded stream",
		Long: `export writes the events of one run (--run), or every event stored between
--since and --until (RFC 3339 times, or durations back from now such as 24h),
as a recorded stream on stdout, which 'aggregator replay' folds again with a
newer core. With no NATS URL it reads the embedded server's --store; while
an 'aggregator serve' holds that store, export fails at once (export from
that server with --nats-url instead).`,
		Example: `  aggregator export --run strix01-20261107T140311-4b > run.jsonl
  aggregator export --since 24h --nats-url nats://nats:4222 > day.jsonl`,
		Args: cli.Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			sel := aggregator.ExportSelect{RunID: runID}
			if sel.Since, err = parseWhen(since); err != nil {
				return cli.Usage(fmt.Errorf("--since: %w", err))
			}
			if sel.Until, err = parseWhen(until); err != nil {
				return cli.Usage(fmt.Errorf("--until: %w", err))
			}
			if runID == "" && sel.Since.IsZero() {
				return cli.Usage(errors.New("export needs --run ID or --since TIME"))
			}
			if !sel.Since.IsZero() && !sel.Until.IsZero() && !sel.Until.After(sel.Since) {
				return cli.Usage(fmt.Errorf("--until (%s) must be after --since (%s)",
					sel.Until.Format(time.RFC3339), sel.Since.Format(time.RFC3339)))
			}
			if cfg.NATS.URL == "" {
				if _, err := os.Stat(cfg.Embedded.Store); err != nil {
					return cli.Usage(fmt.Errorf("store %s: %w: nothing to export (give the --store of the aggregator that recorded the events, or --nats-url)",
						cfg.Embedded.Store, errors.Unwrap(err)))
				}
			}
			log := cli.Logger(cmd.ErrOrStderr(), cfg.Log.Level, cfg.Log.Format)
			n, err := aggregator.Export(cmd.Context(), cfg, sel, stdout, log)
			if err != nil {
				return err
			}
			if n == 0 && runID != "" {
				return fmt.Errorf("run %q: no event stored (check the id with GET /runs or in a split's run.id)", runID)
			}
			if n == 0 {
				log.Warn().Msg("no event stored in that time range")
				return nil
			}
			log.Info().Int("events", n).Msg("exported")
			return nil
		},
	}
	c.Flags().StringVar(&runID, "run", "", "the run id to export")
	c.Flags().StringVar(&since, "since", "", "export events stored at or after this time (RFC 3339, or a duration back from now: 24h)")
	c.Flags().StringVar(&until, "until", "", "export events stored before this time (RFC 3339, or a duration back from now)")
	addFlags(c.Flags(), "nats-url", "store", "log-level")
	return c
}

func parseWhen(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q: a duration back from now must be positive", s)
		}
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-11-07T14:03:11Z) nor a duration back from now (24h, 90m)", s)
	}
	return t, nil
}
