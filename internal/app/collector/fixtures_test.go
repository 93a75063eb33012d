package collector

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/split"
)

var update = flag.Bool("update", false, "rewrite testdata/runs/*/events.jsonl")

// fixtureRuns are the recorded streams of the reference runs: what a
// collector publishes for them, built by the collector's own pipeline.
var fixtureRuns = map[string]split.RunInfo{
	"4b": {ID: "strix01-20261107T140311-4b", Host: "strix01", Lane: "gpu0", Issue: "example/engine#856",
		Command: "llama-cli -m Qwen3.5-4B-Q4_K_M.gguf -ngl 99 -fit off -c 256 -n 16 -v", SourceCommit: "40f58efe1a8f4c3e9d2b7a6c5e4f3a2b1c0d9e8f",
		SourceDirty: new(bool), CollectorVersion: "fixture"},
	"27b": {ID: "strix01-20261107T141902-27b", Host: "strix01", Lane: "gpu1", Issue: "example/engine#856",
		Command: "llama-cli -m Qwen3.5-27B-Q4_K_M.gguf -ngl 99 -fit off -c 256 -n 16 -v", SourceCommit: "40f58efe1a8f4c3e9d2b7a6c5e4f3a2b1c0d9e8f",
		SourceDirty: new(bool), CollectorVersion: "fixture"},
}

// recordFixture builds the events of testdata/runs/<name>: the run started,
// the log as stderr lines in batches of 256, the samples, the run finished
// (exit 0), interleaved by time as they would have been captured.
func recordFixture(t *testing.T, name string) []byte {
	t.Helper()
	dir := filepath.Join("..", "..", "..", "testdata", "runs", name)
	logb, err := os.ReadFile(filepath.Join(dir, "split.log"))
	require.NoError(t, err)
	gtt, err := os.ReadFile(filepath.Join(dir, "gtt.txt"))
	require.NoError(t, err)
	samples, _, err := split.ParseSamples(gtt)
	require.NoError(t, err)
	require.NotEmpty(t, samples)

	info := fixtureRuns[name]
	start := samples[0].Time.Add(-2 * time.Second)
	end := samples[len(samples)-1].Time.Add(100 * time.Millisecond)
	info.Started = start
	text := strings.TrimSuffix(string(logb), "\n")
	lines := strings.Split(text, "\n")
	step := end.Sub(start) / time.Duration(len(lines)+1)

	type rec struct {
		t time.Time
		r sources.Record
	}
	var recs []rec
	for i := 0; i < len(lines); i += 256 {
		j := min(i+256, len(lines))
		var b []split.Line
		for k := i; k < j; k++ {
			b = append(b, split.Line{Stream: "stderr", Seq: uint64(k + 1), Text: lines[k], Time: start.Add(step * time.Duration(k+1))})
		}
		recs = append(recs, rec{t: b[len(b)-1].Time, r: sources.Record{Lines: b}})
	}
	for i := range samples {
		recs = append(recs, rec{t: samples[i].Time, r: sources.Record{Sample: &samples[i]}})
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].t.Before(recs[j].t) })
	exit := 0
	all := append([]sources.Record{{Started: &info}}, func() []sources.Record {
		out := make([]sources.Record, len(recs))
		for i, r := range recs {
			out[i] = r.r
		}
		return out
	}()...)
	all = append(all, sources.Record{Finished: &split.FinishInfo{Finished: end, ExitCode: &exit}})

	p := &pipeline{origin: events.Origin{RunID: info.ID, Host: info.Host, Lane: info.Lane}, maxLines: 256,
		detail: events.StartDetail{Args: strings.Fields(info.Command), Env: map[string]string{"GGML_HRX_HOST_WEIGHT_TRACE": "1"},
			EnvAdded: []string{"GGML_HRX_HOST_WEIGHT_TRACE"}, PID: 48213}}
	var buf bytes.Buffer
	w := events.NewWriter(&buf)
	for _, r := range all {
		_, evs, err := p.prepare(r)
		require.NoError(t, err)
		for _, ev := range evs {
			require.NoError(t, w.Write(ev))
		}
	}
	return buf.Bytes()
}

// TestFixtureEventStreams keeps testdata/runs/*/events.jsonl equal to what
// the collector's pipeline builds from the runs' split.log and gtt.txt;
// `go test ./internal/app/collector -run Fixture -update` rewrites them.
func TestFixtureEventStreams(t *testing.T) {
	for name := range fixtureRuns {
		got := recordFixture(t, name)
		path := filepath.Join("..", "..", "..", "testdata", "runs", name, "events.jsonl")
		if *update {
			require.NoError(t, os.WriteFile(path, got, 0o644))
			continue
		}
		want, err := os.ReadFile(path)
		require.NoError(t, err, "run with -update to create it")
		require.True(t, bytes.Equal(want, got), "%s is stale: run go test ./internal/app/collector -run Fixture -update", path)
	}
}
