package sinktest

import (
	"github.com/gttsplit/gttsplit/pkg/split"
)

// Report returns a complete report of run id on host "node-1", lane "lane-a",
// with every headline figure set, so renderers have something to show.
// Tests change fields to make two reports of one run differ.
func Report(id string) split.Report {
	mib := func(v float64) *split.MiB { m := split.MiB(v); return &m }
	exit := 0
	weights := 291
	dirty := false
	return split.Report{
		Schema: "gttsplit.split.v1",
		Run: split.RunMeta{
			ID:       id,
			Host:     "node-1",
			Lane:     "lane-a",
			Command:  "llama-cli -m model.gguf -v",
			ExitCode: &exit,
			Started:  "2025-01-02T03:04:05Z",
			Finished: "2025-01-02T03:09:05Z",
			Complete: true,
		},
		Provenance: split.Provenance{
			LlamaBuild:       "b5000",
			SourceCommit:     "0123456789ab",
			SourceDirty:      &dirty,
			CollectorVersion: "v0.0.0-test",
		},
		PeakGTTMiB:      mib(20480),
		FinalGTTMiB:     mib(20000),
		ModelGTTMiB:     mib(15000.25),
		ModelHostMiB:    mib(512),
		PackedMiB:       mib(14000),
		PackedWeights:   &weights,
		StateMiB:        mib(2048),
		ComputeMiB:      mib(1024),
		UnattributedMiB: mib(1895.75),
		UnattributedPct: mib(9.26),
		DuplicatePct:    mib(0),
		Flags:           []string{},
		Checks: []split.Check{
			{Name: "model_vs_packed", Status: split.StatusOK, Detail: "within 10%"},
		},
	}
}
