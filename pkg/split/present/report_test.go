package present

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/split"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// TestGoldenReports pins the three report formats of both runs.
// `go test ./pkg/split/present -update` rewrites them.
func TestGoldenReports(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"4b", "27b"} {
		r := foldRun(t, name)
		js, err := split.JSON(r)
		require.NoError(t, err)
		for ext, got := range map[string][]byte{"json": js, "md": []byte(Markdown(r)), "txt": []byte(Text(r))} {
			path := filepath.Join("testdata", "golden", name+"."+ext)
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, got, 0o644))
				continue
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run with -update to create it")
			if !bytes.Equal(want, got) {
				t.Errorf("%s differs from the golden file; diff it after `go test ./pkg/split/present -update`:\n%s", path, got)
			}
		}
	}
}

func TestTextBars(t *testing.T) {
	r := foldRun(t, "4b")
	require.Equal(t, "peak  [██████████████████████████████▓▓▓▓▓▓▓▓▓▓░·········] 3925.0 MiB\n"+
		"final [█████████████████████████████████▓▓▓▓▓▓▓▓▓▓▓░·····] 3641.2 MiB\n"+
		"       █ model buffer  ▓ packed copies  ▒ KV + state  ░ compute + output  · not attributed\n", TextBars(r))
	// Rows above the peak: drawn against their sum, nothing not attributed.
	over := split.Report{PeakGTTMiB: m(100), ModelGTTMiB: m(150), StateMiB: m(50)}
	require.Contains(t, TextBars(over), "peak  ["+strings.Repeat("█", 38)+strings.Repeat("▒", 12)+"] 100.0 MiB")
	require.Empty(t, TextBars(split.Report{}))
	// A run in progress: the peak is known, the log's rows are not yet,
	// so the rest is unknown, not 100 % not attributed.
	live := split.Report{PeakGTTMiB: m(20497)}
	require.Equal(t, "peak  ["+strings.Repeat(" ", BarWidth)+"] 20497.0 MiB\n"+
		"       █ model buffer  ▓ packed copies  ▒ KV + state  ░ compute + output  (blank: not known yet)\n", TextBars(live))
}

// The device table of two discrete cards, in text and Markdown, with a
// bar per card.
func TestDeviceTable(t *testing.T) {
	t.Parallel()
	r := twoCards(t, "gtt.txt")
	txt := Text(r)
	require.Contains(t, txt, "device      model  KV + state  compute + output                      card      card memory at peak  not attributed\n")
	require.Contains(t, txt, "ROCm0      9613.5       544.0             368.0              0000:83:00.0  VRAM 10842.0, GTT 106.0   316.5 (2.9 %)")
	md := Markdown(r)
	require.Contains(t, md, "| ROCm1 | 8540.2 | 480.0 | 412.5 | 0000:03:00.0 | VRAM 9688.0, GTT 24.0 | 255.2 (2.6 %) |")
	require.Contains(t, md, "ROCm0 · 0000:83:00.0 VRAM [")

	// Matched by order (an older build prints no PCI address): said so.
	dir := devicesDir("2xrocm-order")
	byOrder := foldFiles(t, filepath.Join(dir, "split.log"), filepath.Join(dir, "gtt.txt"))
	require.Contains(t, Text(byOrder), "0000:03:00.0 (by order)")
}

// A model that is not counted says why, and the sampling behind the peak
// is stated under the provenance.
func TestModelsAndSampling(t *testing.T) {
	t.Parallel()
	r := split.Report{
		Models: []split.ModelLoad{
			{Role: "main", File: "/m/main.gguf", Line: 3, Ended: "replaced by the reload of the same file at line 9", ModelGTTMiB: m(100), Contexts: 1},
			{Role: "draft", File: "/m/draft.gguf", Line: 6, Live: true, ModelGTTMiB: m(10), ModelHostMiB: m(2)},
		},
		Detail: split.Detail{Sampling: &split.SamplingDetail{IntervalMs: 100, Samples: 412, Triggered: 37, LargestGapMs: 104.5}},
	}
	txt := Text(r)
	require.Contains(t, txt, "- main `/m/main.gguf` (line 3): model 100.0 MiB, KV + state unknown, compute + output unknown, 1 context(s); NOT counted: replaced by the reload of the same file at line 9\n")
	require.Contains(t, txt, "- draft `/m/draft.gguf` (line 6): model 10.0 MiB (+ 2.0 MiB CPU, not in GTT), KV + state unknown")
	require.Contains(t, txt, "sampling: every 100.0 ms, 412 samples (37 of them at memory-relevant log lines), largest gap 104.5 ms")
}

// A flag is worded for its report: the exit status of a failed command.
func TestFlagsInTheirWords(t *testing.T) {
	t.Parallel()
	three := 3
	r := split.Report{Flags: []string{split.FlagChildFailed}, Run: split.RunMeta{ExitCode: &three}}
	require.Contains(t, Markdown(r), "- child_failed: the command exited with status 3: a failed run")
	require.Contains(t, Text(r), "- child_failed: the command exited with status 3: a failed run")
}

// A split that replaces the run's earlier, incomplete one says so first,
// under its title, with when that split was written and what it lacked,
// and lists the flag in its words; while the re-opened run is open, it
// says the split it closes with will replace it.
func TestReplacedSplitSaysSo(t *testing.T) {
	t.Parallel()
	r := foldRun(t, "4b")
	r.Replacing(split.Replaced{Written: "2026-11-07T15:10:00Z", Split: 0, Missing: []string{"the run-finished event"}})
	words := "his split replaces the incomplete split written at 2026-11-07T15:10:00Z (split 0), which lacked the run-finished event: late events of the run's own host re-opened the run"
	md := Markdown(r)
	require.True(t, strings.HasPrefix(md, "### gttsplit: GTT split\n\n> T"+words+".\n\n"), md)
	require.Contains(t, md, "- replaces_incomplete: t"+words+"\n")
	txt := Text(r)
	require.True(t, strings.HasPrefix(txt, "gttsplit: GTT split\n\nT"+words+".\n\n"), txt)
	require.Contains(t, txt, "- replaces_incomplete: t"+words+"\n")
	js, err := split.JSON(r)
	require.NoError(t, err)
	require.Contains(t, string(js), `"replaces": {
      "written": "2026-11-07T15:10:00Z",
      "split": 0,
      "missing": [
        "the run-finished event"
      ]
    }`)

	r.Run.Open = true
	require.Contains(t, Text(r), "Late events of the run's own host re-opened it after the incomplete split written at 2026-11-07T15:10:00Z (split 0), which lacked the run-finished event: the split the run closes with replaces that one.\n")

	// A first split says nothing of it.
	first := foldRun(t, "4b")
	require.NotContains(t, Markdown(first), "replaces")
	js, err = split.JSON(first)
	require.NoError(t, err)
	require.NotContains(t, string(js), "replaces")
}
