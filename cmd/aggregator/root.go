package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gttsplit/gttsplit/internal/app/aggregator"
	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/offline"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/split"
)

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "aggregator",
		Short: "Fold gttsplit events into GTT splits and write them to sinks",
		Long: `aggregator tells where a llama.cpp process's GPU memory (GTT) went: the loader's
model buffer, a backend's packed duplicate, KV and state, compute buffers,
and the unattributed rest. It folds the events collectors publish (serve),
recorded event streams (replay) or a saved -v log with fdinfo samples
(parse); compare, gate and history read the splits.

Settings are flags, keys of the --config file and GTTSPLIT_<KEY> variables
(flags win, then the environment); every key: docs/configuration.md.`,
		Version: cli.Version(),
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().String("config", "", "YAML config file (see configs/aggregator.yaml)")
	root.AddCommand(newServe(stdout), newParse(stdout), newReplay(stdout), newExport(stdout), newCompare(stdout), newGate(stdout), newHistory(stdout), newQuickstart(stdout), newNATSUsers(stdout), newValidate(stdout))
	return root
}

// loadConfig loads the aggregator config with cmd's flags on top, and
// warns of the GTTSPLIT_* variables that set no key.
func loadConfig(cmd *cobra.Command) (config.Aggregator, error) {
	path, _ := cmd.Flags().GetString("config")
	cfg, err := config.LoadAggregator(path, cmd.Flags())
	if err == nil {
		cli.WarnUnknownEnv(cmd.ErrOrStderr(), cfg.Log, config.UnknownEnvNow())
	}
	return cfg, err
}

func addFlags(fs *pflag.FlagSet, names ...string) {
	if err := config.AddFlags(fs, config.DefaultAggregator(), names...); err != nil {
		panic(err) // a programming error: the names are constants of this file
	}
}

func newValidate(stdout io.Writer) *cobra.Command {
	return cli.NewValidate("aggregator", stdout, func(cmd *cobra.Command) error {
		path, _ := cmd.Flags().GetString("config")
		_, err := config.LoadAggregator(path, cmd.Flags())
		return config.CheckEnv(err, os.Environ())
	})
}

func newParse(stdout io.Writer) *cobra.Command {
	var samples []string
	c := &cobra.Command{
		Use:   "parse LOG|- [--samples PATH]... [--format text|md|json]",
		Short: "Split a saved llama.cpp log (and fdinfo samples) offline",
		Long: `parse reads a saved -v llama.cpp log (with the host-weight trace, if the run had
GGML_HRX_HOST_WEIGHT_TRACE=1) and fdinfo samples, and prints the split.

--samples PATH is a samples file (gtt.txt, as 'collector run --out' writes
it) or a directory holding one snapshot of a process's fdinfo (cp -r
/proc/PID/fdinfo DIR); repeat it to merge files. Without samples the peak
is unknown. A missing or unreadable file, an empty log or a binary one
exits 2; malformed lines are counted, skipped and reported.
Details: docs/collector.md.`,
		Example: `  aggregator parse testdata/runs/4b/split.log --samples testdata/runs/4b/gtt.txt
  aggregator parse split.log --samples fdinfo-snapshot/ --format json`,
		Args: cli.Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			fold, err := newFold(cfg)
			if err != nil {
				return err
			}
			warnings, err := offline.Parse(fold, args[0], samples)
			if err != nil {
				if errors.Is(err, offline.ErrInput) {
					return cli.Usage(err)
				}
				return err
			}
			for _, w := range warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "aggregator: warning: %s\n", w)
			}
			return aggregator.WriteReport(stdout, cfg.Format, fold.Report())
		},
	}
	c.Flags().StringArrayVar(&samples, "samples", nil, "samples file (gtt.txt) or fdinfo snapshot directory; repeatable")
	addFlags(c.Flags(), "format", "threshold")
	return c
}

func newReplay(stdout io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "replay [--format text|md|json] FILE...",
		Short: "Fold recorded event streams (events.jsonl) offline",
		Long: `replay folds recorded streams of gttsplit CloudEvents (events.jsonl, as
'collector run --out' records them and 'aggregator export' writes them) and
prints the split of every run in them, byte-identical to what 'aggregator
serve' computes live. Bad lines are counted, skipped and reported; a file
without a single event (a saved log: use 'aggregator parse') exits 2.`,
		Example: `  aggregator replay testdata/runs/4b/events.jsonl --format md
  aggregator replay a.jsonl b.jsonl --format json`,
		Args: cli.Args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			log := cli.Logger(cmd.ErrOrStderr(), cfg.Log.Level, cfg.Log.Format)
			opts, err := aggregator.FoldOptions(cfg)
			if err != nil {
				return cli.Usage(err)
			}
			runs := runtable.NewRuns(opts)
			st, err := aggregator.ReplayFiles(runs, args, log)
			if err != nil {
				if errors.Is(err, aggregator.ErrInput) {
					return cli.Usage(err)
				}
				return err
			}
			switch {
			case len(runs.IDs()) == 0 && len(st.NotStreams) > 0:
				// The last line says what to run instead (the count of
				// a binary's "bad lines" would say nothing).
				return cli.Usage(fmt.Errorf("no run to replay: %s", aggregator.NotAStreamHint(st.NotStreams[0])))
			case len(runs.IDs()) == 0:
				return fmt.Errorf("no run in %d events", st.Events)
			}
			if st.Skipped+st.Invalid > 0 {
				log.Warn().Int("bad_lines", st.Skipped).Int("bad_events", st.Invalid).Msg("skipped what could not be folded")
			}
			for _, name := range st.NotStreams {
				log.Warn().Str("file", name).Msg(aggregator.NotAStreamHint(name))
			}
			// A report a slow sink's full queue deferred is computed
			// again in its turn (folds are not safe for concurrent use).
			var foldMu sync.Mutex
			report := func(id string) split.Report {
				foldMu.Lock()
				defer foldMu.Unlock()
				return runtable.Report(runs.Get(id))
			}
			reload := func(_ context.Context, _, id string) (split.Report, bool, error) {
				if runs.Get(id) == nil {
					return split.Report{}, false, nil
				}
				return report(id), true, nil
			}
			var counts sinks.Counters
			fan, err := aggregator.OpenSinks(cfg.Sinks, stdout, log, &counts, reload)
			if err != nil {
				return err
			}
			for _, id := range runs.IDs() {
				r := report(id)
				if err := aggregator.WriteReport(stdout, cfg.Format, r); err != nil {
					return err
				}
				if fan != nil {
					if err := fan.Write(cmd.Context(), r); err != nil {
						return err
					}
				}
			}
			if fan != nil {
				// The sinks retry transient errors until shutdown_timeout.
				if err := aggregator.CloseOneShot(cmd.Context(), fan, cfg.ShutdownTimeout); err != nil {
					return fmt.Errorf("sinks: %w", err)
				}
				if err := undelivered(counts.Snapshot()); err != nil {
					return err
				}
			}
			return nil
		},
	}
	addFlags(c.Flags(), append([]string{"format", "threshold", "log-level"}, sinkFlags...)...)
	return c
}

// undelivered is the error of a one-shot command whose sinks dropped
// reports (a permanent failure such as a refused token), or nil.
func undelivered(counts map[string]sinks.SinkCounts) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		c := counts[name]
		if n := c.Failed + c.Dropped; n > 0 {
			what := "1 report"
			if n > 1 {
				what = fmt.Sprintf("%d reports", n)
			}
			errs = append(errs, fmt.Errorf("sinks: %s: %s not delivered: %s", name, what, c.LastError))
		}
	}
	return errors.Join(errs...)
}

func newFold(cfg config.Aggregator) (*split.Fold, error) {
	opts, err := aggregator.FoldOptions(cfg)
	if err != nil {
		return nil, cli.Usage(err)
	}
	return split.NewFold(opts), nil
}
