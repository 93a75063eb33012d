package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gttsplit/gttsplit/internal/app/aggregator"
	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/regress"
)

func newGate(stdout io.Writer) *cobra.Command {
	var (
		maxDup, maxUnattr, maxPeak, maxGrowth, baseline, format string
		samples, baseSamples                                    []string
		allowUnknown, allowFailed                               bool
	)
	c := &cobra.Command{
		Use:   "gate [flags] RUN...",
		Short: "Fail a CI job when a run's split is over its limits",
		Long: `gate holds each RUN's split to limits and exits 0 when every run passes, 1
when one fails (naming each figure, its value and its limit), 2 on a usage
error or an input it cannot read. RUN is anything compare takes, or a JSON
sink's splits.jsonl; every run an input holds is gated. Percentages are
written 10 or 10%. A figure that is unknown fails unless --allow-unknown,
a run whose command failed unless --allow-failed. --format github prints
::error annotations and appends a Markdown summary to $GITHUB_STEP_SUMMARY.
Details: docs/regressions.md.`,
		Example: `  aggregator gate testdata/runs/27b/events.jsonl --max-duplicate 20% --max-unattributed 10
  aggregator gate run/ --baseline baseline/split.json --max-growth 5 --format github`,
		Args: cli.Args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var l regress.Limits
			for _, x := range []struct {
				flag, v string
				to      **float64
				parse   func(string) (float64, error)
			}{
				{"max-duplicate", maxDup, &l.MaxDuplicatePct, regress.ParsePct},
				{"max-unattributed", maxUnattr, &l.MaxUnattributedPct, regress.ParsePct},
				{"max-peak", maxPeak, &l.MaxPeakMiB, regress.ParseMiB},
				{"max-growth", maxGrowth, &l.MaxGrowthPct, regress.ParsePct},
			} {
				if !cmd.Flags().Changed(x.flag) {
					continue
				}
				v, err := x.parse(x.v)
				if err != nil {
					return cli.Usage(fmt.Errorf("--%s: %w", x.flag, err))
				}
				*x.to = &v
			}
			l.AllowUnknown, l.AllowFailed = allowUnknown, allowFailed
			if err := l.Validate(baseline != ""); err != nil {
				return cli.Usage(err)
			}
			if !slices.Contains([]string{"text", "md", "json", "github"}, format) {
				return cli.Usage(fmt.Errorf("--format: %q is not text, md, json or github", format))
			}
			if len(samples) > 0 && len(args) > 1 {
				return cli.Usage(errors.New("--samples goes with one RUN, a saved log"))
			}
			if len(baseSamples) > 0 && baseline == "" {
				return cli.Usage(errors.New("--baseline-samples goes with --baseline"))
			}
			_, finder, err := openReports(cmd, "format")
			if err != nil {
				return err
			}
			defer finder.Close()
			// Any input the gate cannot read is a usage error: exit 1 is
			// only ever a run over its limits.
			var base *regress.Input
			if baseline != "" {
				r, err := finder.Find(cmd.Context(), baseline, baseSamples)
				if err != nil {
					return cli.Usage(fmt.Errorf("baseline: %w", err))
				}
				base = &regress.Input{Input: baseline, Report: r}
			}
			var runs []regress.Input
			for _, a := range args {
				reps, err := finder.Load(cmd.Context(), a, samples)
				if err != nil {
					return cli.Usage(err)
				}
				if len(reps) == 0 {
					return cli.Usage(fmt.Errorf("%s holds no run", a))
				}
				for _, r := range reps {
					runs = append(runs, regress.Input{Input: a, Report: r})
				}
			}
			g := regress.Gate(runs, base, l)
			if err := writeGate(stdout, format, g); err != nil {
				return cli.Usage(err)
			}
			if !g.Pass {
				return &cli.ExitError{Code: cli.ExitFailure} // the output said why
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&maxDup, "max-duplicate", "", "largest duplicate share (packed / model buffer), percent")
	f.StringVar(&maxUnattr, "max-unattributed", "", "largest not-attributed share of the peak, percent")
	f.StringVar(&maxPeak, "max-peak", "", "largest process GTT at peak, MiB")
	f.StringVar(&baseline, "baseline", "", "the run to compare with (anything RUN may be)")
	f.StringVar(&maxGrowth, "max-growth", "", "largest growth of each figure over the baseline's, percent")
	f.BoolVar(&allowUnknown, "allow-unknown", false, "pass a figure that is unknown instead of failing it")
	f.BoolVar(&allowFailed, "allow-failed", false, "pass a run whose command exited non-zero or was stopped by a signal instead of failing it")
	f.StringVar(&format, "format", "text", "output: text, md, json or github")
	f.StringArrayVar(&samples, "samples", nil, "samples file (gtt.txt) or fdinfo snapshot directory of RUN when it is a saved log; repeatable")
	f.StringArrayVar(&baseSamples, "baseline-samples", nil, "samples of the baseline when it is a saved log; repeatable")
	addFlags(f, "nats-url", "store", "log-level")
	return c
}

// writeGate prints the gate's verdict; github also appends the Markdown
// summary to $GITHUB_STEP_SUMMARY when it is set.
func writeGate(w io.Writer, format string, g regress.GateResult) error {
	text := func() string { return regress.GateText(g) }
	if format == "github" {
		text = func() string { return regress.GateText(g) + "\n" + regress.GateAnnotations(g) }
	}
	if err := writeFormatted(w, format, text, func() string { return regress.GateMarkdown(g) }, func() ([]byte, error) { return regress.GateJSON(g) }); err != nil {
		return err
	}
	if p := os.Getenv("GITHUB_STEP_SUMMARY"); format == "github" && p != "" {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("GITHUB_STEP_SUMMARY: %w", err)
		}
		_, err = io.WriteString(f, regress.GateMarkdown(g)+"\n\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("GITHUB_STEP_SUMMARY: %w", err)
		}
	}
	return nil
}

// writeFormatted writes the output of format (json, md, else text) and a
// final newline.
func writeFormatted(w io.Writer, format string, text, md func() string, js func() ([]byte, error)) error {
	var out string
	switch format {
	case "json":
		b, err := js()
		if err != nil {
			return err
		}
		out = string(b)
	case "md":
		out = md()
	default:
		out = text()
	}
	_, err := io.WriteString(w, strings.TrimRight(out, "\n")+"\n")
	return err
}

// openReports is the finder of the commands that read runs (compare, gate,
// history): the config with the command's flags (but its own flags named
// local, see loadConfigExcept) and a logger on stderr.
func openReports(cmd *cobra.Command, local ...string) (config.Aggregator, *aggregator.Reports, error) {
	cfg, err := loadConfigExcept(cmd, local...)
	if err != nil {
		return cfg, nil, err
	}
	log := cli.Logger(cmd.ErrOrStderr(), cfg.Log.Level, cfg.Log.Format)
	finder, err := aggregator.NewReports(cfg, log)
	if err != nil {
		return cfg, nil, cli.Usage(err)
	}
	return cfg, finder, nil
}

// loadConfigExcept is loadConfig with the command's own flags named local
// left out: flags of the command that share a config key's flag name
// (--format, --threshold) but mean something else there.
func loadConfigExcept(cmd *cobra.Command, local ...string) (config.Aggregator, error) {
	fs := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !slices.Contains(local, f.Name) {
			fs.AddFlag(f)
		}
	})
	path, _ := cmd.Flags().GetString("config")
	return config.LoadAggregator(path, fs)
}
