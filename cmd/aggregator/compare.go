package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gttsplit/gttsplit/internal/app/aggregator"
	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/present"
)

func newCompare(stdout io.Writer) *cobra.Command {
	var samplesA, samplesB []string
	c := &cobra.Command{
		Use:   "compare A B [--samples-a PATH]... [--samples-b PATH]... [--format text|md|json]",
		Short: "Put a run and its control (offload off) side by side, with a verdict",
		Long: `compare puts two splits side by side: the same command with the weights
offloaded (-ngl 99) and with offload off (-ngl 0, the control), the
difference per row, and a verdict: the weights resident once, resident
twice, or cannot tell (and why).

A and B may each be a run id (in --store, or at --nats-url), a split.json,
an events.jsonl of one run, a saved log (its samples in --samples-a and
--samples-b) or a 'collector run --out' directory. A missing file or an
unknown run exits 2. Details: docs/reading.md.`,
		Example: `  aggregator compare testdata/runs/4b/events.jsonl testdata/controls/4b-ngl0/events.jsonl
  aggregator compare run-ngl99/split.log run-ngl0/split.log --samples-a run-ngl99/gtt.txt --samples-b run-ngl0/gtt.txt
  aggregator compare strix01-20261107T140311-4b strix01-20261107T141509-4b-ngl0 --nats-url nats://nats:4222 --format md`,
		Args: cli.Args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, finder, err := openReports(cmd)
			if err != nil {
				return err
			}
			defer finder.Close()
			var reps [2]split.Report
			for i, s := range [][]string{samplesA, samplesB} {
				reps[i], err = finder.Find(cmd.Context(), args[i], s)
				if err != nil {
					name := []string{"A", "B"}[i]
					if errors.Is(err, aggregator.ErrInput) {
						return cli.Usage(errors.New(name + ": " + err.Error()))
					}
					return errors.New(name + ": " + err.Error())
				}
			}
			c := present.Compare(reps[0], reps[1], args[0], args[1])
			if err := aggregator.WriteComparison(stdout, cfg.Format, c); err != nil {
				return err
			}
			if c.Verdict == present.VerdictCannotTell {
				if hint := samplesHint(args, reps, [2][]string{samplesA, samplesB}); hint != "" {
					fmt.Fprintln(cmd.ErrOrStderr(), "aggregator: "+hint)
				}
			}
			return nil
		},
	}
	c.Flags().StringArrayVar(&samplesA, "samples-a", nil, "samples file (gtt.txt) or fdinfo snapshot directory of A when A is a saved log; repeatable")
	c.Flags().StringArrayVar(&samplesB, "samples-b", nil, "samples file (gtt.txt) or fdinfo snapshot directory of B when B is a saved log; repeatable")
	addFlags(c.Flags(), "format", "threshold", "nats-url", "store", "log-level")
	return c
}

// samplesHint says which of A and B are saved logs given without their
// fdinfo samples (so their peaks, and the verdict, are unknown) and the
// flags that give them, or "".
func samplesHint(args []string, reps [2]split.Report, samples [2][]string) string {
	var which, flags []string
	for i, name := range []string{"A", "B"} {
		st, err := os.Stat(args[i])
		ext := filepath.Ext(args[i])
		if err != nil || st.IsDir() || ext == ".json" || ext == ".jsonl" || len(samples[i]) > 0 ||
			!slices.Contains(reps[i].Flags, split.FlagNoSamples) {
			continue
		}
		which = append(which, name+" ("+args[i]+")")
		flags = append(flags, "--samples-"+strings.ToLower(name)+" PATH")
	}
	switch len(which) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("%s is a saved log without its fdinfo samples, so its peak is unknown: give them with %s (its gtt.txt, or an fdinfo snapshot directory)", which[0], flags[0])
	}
	return fmt.Sprintf("%s and %s are saved logs without their fdinfo samples, so their peaks are unknown: give them with %s and %s (each run's gtt.txt, or an fdinfo snapshot directory)", which[0], which[1], flags[0], flags[1])
}
