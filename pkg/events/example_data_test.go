package events_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/stretchr/testify/require"
)

// The inputs of the documented examples. Everything is fixed, so the
// examples (golden files, docs/events.md) are byte-stable.

var (
	t0     = time.Date(2025, 3, 14, 9, 26, 53, 123456789, time.UTC)
	origin = events.Origin{RunID: "strix1-20250314T092653Z-4b", Host: "strix1", Lane: "gpu0"}
)

func ptr[T any](v T) *T { return &v }

func exampleRunInfo() split.RunInfo {
	return split.RunInfo{
		ID:               origin.RunID,
		Host:             origin.Host,
		Lane:             origin.Lane,
		Command:          "llama-cli -m Qwen3-4B-Q8_0.gguf -p hi -n 8 -v",
		Issue:            "gttsplit/fleet#12",
		Started:          t0,
		SourceCommit:     "3f1b2c4d5e6f708192a3b4c5d6e7f8091a2b3c4d",
		SourceDirty:      ptr(false),
		SourceCommitTime: time.Date(2025, 3, 13, 18, 2, 11, 0, time.UTC),
		CollectorVersion: "v0.1.0",
	}
}

func exampleStartDetail() events.StartDetail {
	return events.StartDetail{
		Args:            []string{"llama-cli", "-m", "Qwen3-4B-Q8_0.gguf", "-p", "hi", "-n", "8", "-v"},
		Env:             map[string]string{"GGML_HRX_HOST_WEIGHT_TRACE": "1"},
		EnvAdded:        []string{"GGML_HRX_HOST_WEIGHT_TRACE"},
		VerboseAppended: true,
		SourceDir:       "src/llama.cpp",
		PID:             41873,
	}
}

func exampleLines() []split.Line {
	texts := []string{
		"load_tensors: offloading 36 repeating layers to GPU",
		"load_tensors:        ROCm0 model buffer size =  2375.91 MiB",
		"load_tensors:   CPU_Mapped model buffer size =   304.28 MiB",
	}
	lines := make([]split.Line, len(texts))
	for i, s := range texts {
		lines[i] = split.Line{Stream: "stderr", Seq: 212 + uint64(i), Text: s, Time: t0.Add(time.Duration(i) * time.Millisecond)}
	}
	return lines
}

const exampleFDInfo = "pos:\t0\nflags:\t02100002\nmnt_id:\t26\nino:\t1063\n" +
	"drm-driver:\tamdgpu\ndrm-client-id:\t1234\ndrm-pdev:\t0000:c3:00.0\npasid:\t32770\n" +
	"drm-total-gtt:\t4019200 KiB\ndrm-memory-gtt: \t4019200 KiB\n"

func exampleSample() split.Sample {
	return split.Sample{
		Seq:  7,
		Time: t0.Add(3500 * time.Millisecond),
		Procs: []split.ProcFDs{{
			PID: 41873,
			FDs: []split.FDInfo{{FD: 9, Link: "/dev/dri/renderD128", Text: exampleFDInfo}},
		}},
		Cards: []split.CardGTT{{Card: "card1", UsedBytes: 4236247040, TotalBytes: 68719476736}},
	}
}

func exampleFinish() (split.FinishInfo, events.FinishDetail) {
	sent := &split.Sent{
		Streams:       []split.StreamSent{{Stream: "stderr", Lines: 1510, LastSeq: 1514}, {Stream: "stdout", Lines: 4, LastSeq: 1512}},
		Samples:       412,
		LastSampleSeq: 412,
		Sampling:      &split.Sampling{Interval: 100 * time.Millisecond, Triggered: 37, LargestGap: 104 * time.Millisecond},
	}
	return split.FinishInfo{Finished: t0.Add(42 * time.Second), ExitCode: ptr(0), Sent: sent},
		events.FinishDetail{Duration: 42 * time.Second, DroppedEvents: 0}
}

func exampleReport() split.Report {
	mib := func(v float64) *split.MiB { m := split.MiB(v); return &m }
	return split.Report{
		Schema: split.Schema,
		Run: split.RunMeta{
			ID: origin.RunID, Host: origin.Host, Lane: origin.Lane,
			Command:  "llama-cli -m Qwen3-4B-Q8_0.gguf -p hi -n 8 -v",
			Issue:    "gttsplit/fleet#12",
			ExitCode: ptr(0),
			Started:  t0.Format(time.RFC3339Nano),
			Finished: t0.Add(42 * time.Second).Format(time.RFC3339Nano),
			Complete: true,
		},
		Provenance: split.Provenance{
			LlamaBuild:       "build: 5061 (3f1b2c4d) with cc (GCC) 14.2.1 for x86_64-pc-linux-gnu",
			SourceCommit:     "3f1b2c4d5e6f708192a3b4c5d6e7f8091a2b3c4d",
			SourceDirty:      ptr(false),
			SourceCommitTime: "2025-03-13T18:02:11Z",
			CollectorVersion: "v0.1.0",
		},
		PeakGTTMiB:      mib(3925),
		FinalGTTMiB:     mib(3925),
		ModelGTTMiB:     mib(2375.91),
		ModelHostMiB:    mib(304.28),
		PackedMiB:       mib(795.8),
		PackedWeights:   ptr(38),
		StateMiB:        mib(36),
		ComputeMiB:      mib(43.21),
		UnattributedMiB: mib(674.08),
		UnattributedPct: mib(17.17),
		DuplicatePct:    mib(33.49),
		Models: []split.ModelLoad{{Role: "main", File: "Qwen3-4B-Q8_0.gguf", Line: 730, Live: true,
			ModelGTTMiB: mib(2375.91), ModelHostMiB: mib(304.28), StateMiB: mib(36), ComputeMiB: mib(43.21), Contexts: 1}},
		Flags:    []string{"unattributed_high"},
		Checks:   []split.Check{{Name: "trace_vs_model_buffer", Status: split.StatusOK, Detail: "packed 795.80 MiB of 2375.91 MiB model buffer"}},
		Detail:   split.Detail{Samples: 12, GPUClients: 1, PeakKey: "drm-total-gtt", LinesRead: 1840},
		Expected: "healthy: weights resident once (packed ≈ 0), not attributed a few %",
	}
}

// example is one documented event: its type and how it is built.
type example struct {
	typ   string
	build func() (event.Event, error)
}

func examples() []example {
	return []example{
		{typ: events.TypeRunStarted, build: func() (event.Event, error) {
			return events.NewRunStarted(exampleRunInfo(), exampleStartDetail())
		}},
		{typ: events.TypeLogLines, build: func() (event.Event, error) {
			return events.NewLogLines(origin, exampleLines())
		}},
		{typ: events.TypeFDInfoSample, build: func() (event.Event, error) {
			return events.NewFDInfoSample(origin, exampleSample())
		}},
		{typ: events.TypeRunFinished, build: func() (event.Event, error) {
			f, d := exampleFinish()
			return events.NewRunFinished(origin, f, d)
		}},
		{typ: events.TypeSplit, build: func() (event.Event, error) {
			return events.NewSplit(exampleReport(), 0)
		}},
	}
}

func (e example) stem() string { return strings.TrimPrefix(e.typ, "io.gttsplit.") }

// exampleEvents builds every example event.
func exampleEvents(t testing.TB) []event.Event {
	t.Helper()
	var out []event.Event
	for _, ex := range examples() {
		ev, err := ex.build()
		require.NoError(t, err, ex.typ)
		out = append(out, ev)
	}
	return out
}
