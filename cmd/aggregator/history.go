package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"

	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/internal/runtable"
)

func newHistory(stdout io.Writer) *cobra.Command {
	var host, lane, model, threshold, format string
	var changes bool
	c := &cobra.Command{
		Use:   "history [--host H] [--lane L] [--model M] [--changes] [INPUT...]",
		Short: "List a lane's splits over llama.cpp builds, marking what changed",
		Long: `history lists closed runs, one row each, grouped by host, lane and model
file (controls apart), ordered by llama.cpp build number, then start time.
Each row has the run's figures and their change from the row before; a
change beyond --threshold (5 %) is marked ▲ (grew) or ▼ (shrank);
--changes lists the changes between builds beyond each row's threshold.

The runs come from the store (--store, or --nats-url) or from the INPUTs:
anything compare takes, or a JSON sink's directory or splits.jsonl.
Details: docs/regressions.md.`,
		Example: `  aggregator history --nats-url nats://nats:4222 --host strix01 --lane gpu0
  aggregator history splits/ --model Qwen3.5-4B --format md
  aggregator history --changes --nats-url nats://nats:4222 --lane gpu0`,
		Args: cli.Args(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			thr, err := regress.ParsePct(threshold)
			if err != nil {
				return cli.Usage(fmt.Errorf("--threshold: %w", err))
			}
			if !slices.Contains([]string{"text", "md", "json"}, format) {
				return cli.Usage(fmt.Errorf("--format: %q is not text, md or json", format))
			}
			if changes && cmd.Flags().Changed("threshold") {
				return cli.Usage(fmt.Errorf("--threshold marks the history's rows; --changes takes each row's threshold (--change-thresholds)"))
			}
			cfg, finder, err := openReports(cmd, "format", "threshold")
			if err != nil {
				return err
			}
			defer finder.Close()
			f := regress.Filter{Host: host, Lane: lane, Model: model}
			var runs []regress.Run
			if len(args) == 0 {
				st, err := finder.Stored(cmd.Context(), func(s runtable.RunSummary) bool {
					return (host == "" || s.Host == host) && (lane == "" || s.Lane == lane)
				})
				if err != nil {
					return cli.Usage(err)
				}
				runs = st.Runs
				if st.Open > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "aggregator: note: %d runs of the store are not closed yet: not listed\n", st.Open)
				}
			}
			for _, a := range args {
				reps, err := finder.Load(cmd.Context(), a, nil)
				if err != nil {
					return cli.Usage(err)
				}
				for _, r := range reps {
					runs = append(runs, regress.RunOf(regress.Input{Input: a, Report: r}))
				}
			}
			if changes {
				th, err := regress.ParseThresholds(cfg.LaneChanges.Thresholds)
				if err != nil {
					return cli.Usage(fmt.Errorf("--change-thresholds: %w", err))
				}
				c := regress.NewChanges(runs, f, th)
				return writeFormatted(stdout, format, func() string { return regress.ChangesText(c) },
					func() string { return regress.ChangesMarkdown(c) }, func() ([]byte, error) { return regress.ChangesJSON(c) })
			}
			h := regress.NewHistory(runs, f, thr)
			return writeFormatted(stdout, format, func() string { return regress.HistoryText(h) },
				func() string { return regress.HistoryMarkdown(h) }, func() ([]byte, error) { return regress.HistoryJSON(h) })
		},
	}
	f := c.Flags()
	f.StringVar(&host, "host", "", "only this host's runs")
	f.StringVar(&lane, "lane", "", "only this lane's runs")
	f.StringVar(&model, "model", "", "only runs of a model file with this name, or a part of it")
	f.StringVar(&threshold, "threshold", fmt.Sprint(regress.DefaultThresholdPct), "mark a change from the run before beyond this, percent")
	f.StringVar(&format, "format", "text", "output: text, md or json")
	f.BoolVar(&changes, "changes", false, "list each lane's changes between builds, with the commits to bisect")
	addFlags(f, "change-thresholds", "nats-url", "store", "log-level")
	return c
}
