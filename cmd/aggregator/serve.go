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
		Long: `serve consumes the events collectors publish, folds every run on every host and
lane into its split, and writes the split to the sinks (and prints it) when
the run finishes, or after --idle-timeout without events (marked incomplete).
The split is also published as an event on gttsplit.split.<host>.<lane>.<run>.

With no NATS URL it starts an embedded NATS server with JetStream on
--embedded-listen, storing under --store, and logs the URL collectors should
use. A store is locked by the aggregator using it: a second one on the same
store (or the same port) fails at once, saying so. With --nats-url
(GTTSPLIT_NATS_URL) it uses that server or cluster.

Runs are partitioned (consumer.partitions, 16): every event of a run goes to
one partition, and each partition is owned by one of the aggregators with
the same consumer.durable; when one stops or dies, its partitions move to
the others within seconds (an aggregator announces itself and waits half a
second before taking any, so aggregators started together share them at
once). The count caps how many aggregators share the work, and costs the
broker CPU: each partition's consumer reads past the other partitions'
messages (16 cost about twice one unfiltered consumer's; set a lower count
before the partitioned stream is first created, which keeps its count).
On a cluster, losing the node that leads the events stream can silence
the source of the partitioned stream; the owner of partition 0 re-attaches
it after 3 s (gttsplit_source_reattached_total). An owner folds its runs in memory and
acknowledges a message only after the checkpoint of its run's state in the
GTTSPLIT_RUNS key-value bucket that holds it (every
consumer.checkpoint_interval, 500ms, or sooner), so a killed aggregator's
successor writes the split an uninterrupted one would have. Events that
cannot be folded go to gttsplit.dlq.<host>.<lane>.<run> with their reason.

A closed run keeps its full state for store.compact_after (1h): a late
event within it re-opens the run and its split is written again. Then only a
compact record stays (the split and what was folded, not the fold): a
repeated event is ignored, a new one is dead-lettered with reason "late".
store.retention (30 days) deletes closed runs from the bucket.

With --comment-api, each run's Markdown report is posted as a comment on
the run's issue (collector run --issue, else --comment-issue), edited rather
than duplicated when the run's report changes. The API token is read from
the environment variable GTTSPLIT_COMMENT_TOKEN, never from a flag. A 401
from the tracker keeps the comment pending: it is retried with the sinks'
backoff, and a split not posted when serve stops is posted by the next
serve at its start. A sink
slower than runs close keeps sinks.max_pending (1024) splits in memory and
defers the others (their run ids kept, the split read back from the bucket
in its turn): none is lost while serve runs.

HTTP on --http: the live page at / (the runs, newest activity first, 100
a page (?limit=, ?after=), filterable and updated live; /run/{id} with the
split at peak and final and the GTT timeline, updated live;
/compare?a=ID&b=ID), /healthz, /readyz, /metrics (Prometheus),
/partitions, /runs, /runs/{id} (JSON). On a loopback address nothing needs
a login; on any other every path but /healthz and /readyz needs http.token
(GTTSPLIT_HTTP_TOKEN: send Authorization: Bearer TOKEN, or open the page
once with ?token=TOKEN), and without one they are refused there
(http.metrics_public leaves /metrics open).
Memory: every open run is held in memory (about 11 KiB each for a run like
the 4B example's); memory_limit_mib (224) is a soft limit: near it the
garbage collector runs more often rather than let the heap grow to twice
what is live (GOMEMLIMIT, when set, wins; 0 turns it off).
SIGINT or SIGTERM drains: stop consuming, fold and acknowledge what is in
hand, flush the sinks, exit 0 (within shutdown_timeout).`,
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

// setMemoryLimit sets the Go runtime's soft memory limit to mib MiB,
// unless it is 0 or GOMEMLIMIT is set (then the runtime took that).
func setMemoryLimit(mib int, log zerolog.Logger) {
	if mib <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(int64(mib) << 20)
	log.Debug().Int("memory_limit_mib", mib).Msg("soft memory limit set")
}

func newExport(stdout io.Writer) *cobra.Command {
	var runID, since, until string
	c := &cobra.Command{
		Use:   "export (--run ID | --since TIME [--until TIME]) [flags] > events.jsonl",
		Short: "Write a range of the JetStream stream as a recorded stream",
		Long: `export writes the events of one run (--run), or every event stored between
--since and --until (RFC 3339 times, or durations back from now such as 24h),
as a recorded stream on stdout: one structured CloudEvent per line. Any past
run can then be re-measured with a newer core: aggregator replay FILE.

With no NATS URL it reads the embedded server's store (--store), which
one process uses at a time: while an 'aggregator serve' holds it, export
fails at once; export from that server with --nats-url instead.`,
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
