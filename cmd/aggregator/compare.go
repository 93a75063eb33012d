package main

import (
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/gttsplit/gttsplit/internal/app/aggregator"
	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/pkg/split"
)

func newCompare(stdout io.Writer) *cobra.Command {
	var samplesA, samplesB []string
	c := &cobra.Command{
		Use:   "compare A B [--samples-a PATH]... [--samples-b PATH]... [--format text|md|json]",
		Short: "Put a run and its control (offload off) side by side, with a verdict",
		Long: `compare puts two splits side by side: the same command measured with the
weights offloaded (-ngl 99) and with offload off (-ngl 0, the control), the
difference per row, and a verdict in words. With offload off the loader's
buffers move to the CPU, so the difference of the two peaks is what the
weights hold in GTT: about one model buffer when they are resident once,
model buffer + packed copy when they are resident twice. When the
difference is near neither (within 5 % of the model buffer, at least
64 MiB), or a figure is missing, it says it cannot tell, and why.

A and B may each be:
  a run id           looked up in the aggregator's store: the embedded
                     server's --store (not while a 'serve' holds it), or the
                     server at --nats-url
  a split.json       as 'collector run --out' or the JSON sink writes it
  an events.jsonl    a recorded stream of one run
  a saved log        with its samples given by --samples-a / --samples-b
  a directory        a 'collector run --out' directory (events.jsonl, else
                     split.log and gtt.txt, else split.json)

A missing file or an unknown run exits 2, saying which.`,
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
			return aggregator.WriteComparison(stdout, cfg.Format, split.Compare(reps[0], reps[1], args[0], args[1]))
		},
	}
	c.Flags().StringArrayVar(&samplesA, "samples-a", nil, "samples file (gtt.txt) or fdinfo snapshot directory of A when A is a saved log; repeatable")
	c.Flags().StringArrayVar(&samplesB, "samples-b", nil, "samples file (gtt.txt) or fdinfo snapshot directory of B when B is a saved log; repeatable")
	addFlags(c.Flags(), "format", "threshold", "nats-url", "store", "log-level")
	return c
}
