package split

import (
	"strings"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
	"github.com/stretchr/testify/require"
)

// Shapes of llama.cpp and fdinfo input that no saved log in testdata has,
// each written from docs/formats.md, with the figure a plain reading of
// the lines would give next to the right one.

func checkNamed(t *testing.T, r Report, name string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %s in %+v", name, r.Checks)
	return Check{}
}

// requireBreakdownOK requires the three breakdown-table checks made, and ok.
func requireBreakdownOK(t *testing.T, r Report) {
	t.Helper()
	for _, name := range []string{"breakdown_model", "breakdown_context", "breakdown_compute"} {
		c := checkNamed(t, r, name)
		require.Equal(t, StatusOK, c.Status, "%s: %s", name, c.Detail)
	}
}

// llama.cpp's memory breakdown folds every host buffer type, the pinned
// ones (ROCm_Host, CUDA_Host) included, into its Host row: a device row
// compared with buffer lines that count pinned memory in the model and
// compute rows would disagree by exactly the pinned buffers.
func TestBreakdownLeavesPinnedHostBuffersToTheHostRow(t *testing.T) {
	t.Parallel()
	const table = "llama_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |\n" +
		"llama_memory_breakdown_print: |   - ROCm0 (7900 XTX)   | 24560 = 20000 + (1084 =  1000 +      64 +      20) +        3476 |\n" +
		"llama_memory_breakdown_print: |   - Host               |                    145 =   120 +       0 +       25                |\n"
	r := foldLog(t, verbose+load+
		"load_tensors:        ROCm0 model buffer size =  1000.00 MiB\n"+
		"load_tensors:    ROCm_Host model buffer size =    20.00 MiB\n"+
		"load_tensors:   CPU_Mapped model buffer size =   100.00 MiB\n"+
		"llama_context: constructing llama_context\n"+
		"llama_context:  ROCm_Host  output buffer size =     0.50 MiB\n"+
		"llama_kv_cache:      ROCm0 KV buffer size =    64.00 MiB\n"+
		"llama_context:      ROCm0 compute buffer size =    20.00 MiB\n"+
		"llama_context:  ROCm_Host compute buffer size =    25.00 MiB\n"+
		table)
	// The rows still count the pinned buffers: they are GTT.
	require.InDelta(t, 1020, val(r.ModelGTTMiB), 1e-9)
	require.InDelta(t, 45.5, val(r.ComputeMiB), 1e-9)
	requireBreakdownOK(t, r)
	require.Contains(t, checkNamed(t, r, "breakdown_compute").Detail, "20.00 MiB", "naive: 45.00 MiB against the device row's 20")
	require.Contains(t, checkNamed(t, r, "breakdown_model").Detail, "1000.00 MiB", "naive: 1020.00 MiB")
}

// Lines only -v prints that a log can hold without any other: each proves
// the log verbose. The "does not match" echo is a warning, printed at the
// default level, and proves nothing.
func TestMoreDebugOnlyLines(t *testing.T) {
	t.Parallel()
	const model = "load_tensors:        ROCm0 model buffer size =  1000.00 MiB\n"
	for _, c := range []struct {
		line    string
		verbose bool
	}{
		{"llama_context: max_nodes = 65536", true},
		{"0.00.092.001 D graph_reserve: max_nodes = 8192\r", true},
		{"~llama_context:      ROCm0 compute buffer size is 318.5000 MiB, matches expectation of 318.5000 MiB", true},
		{"~llama_context:      ROCm0 compute buffer size of 330.5000 MiB, does not match expectation of 318.5000 MiB", false},
	} {
		r := foldLog(t, load+model+c.line+"\n")
		require.Equal(t, !c.verbose, contains(r.Flags, FlagNotVerbose), "%q", c.line)
		require.InDelta(t, 1000, val(r.ModelGTTMiB), 1e-9)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// A log saved by an editor or a Windows shell can start with a byte order
// mark; the build line is often the first line, and a build number read
// only after a blank or a colon is lost behind it.
func TestByteOrderMarkBeforeTheFirstLine(t *testing.T) {
	t.Parallel()
	for _, first := range []string{
		"build: 4615 (bfcce4d6) with cc (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0 for x86_64-linux-gnu",
		"main: build = 1500 (a30b324)",
		"version: 4615 (bfcce4d6)",
	} {
		r := foldLog(t, "\ufeff"+first+"\r\n"+verbose+load)
		require.NotEmpty(t, r.Provenance.LlamaBuild, "%q", first)
	}
	r := foldLog(t, "\ufeff"+load+"load_tensors:        ROCm0 model buffer size =  1000.00 MiB\n")
	require.Contains(t, r.Flags, FlagNotVerbose)
	require.NotContains(t, r.Flags, FlagNotModelLoad)
	require.InDelta(t, 1000, val(r.ModelGTTMiB), 1e-9)
}

// A load whose weights all went to remote (RPC) devices put nothing in this
// host's GTT: its model row is 0, not unknown, so the rest of the peak is
// still attributed (or not) in the open.
func TestRemoteOnlyLoadIsZeroNotUnknown(t *testing.T) {
	t.Parallel()
	r := foldLog(t, verbose+load+
		"load_tensors: RPC0[10.0.0.2:50052] model buffer size =  1000.00 MiB\n"+
		"llama_context: constructing llama_context\n"+
		"llama_kv_cache: RPC0[10.0.0.2:50052] KV buffer size =    64.00 MiB\n"+
		"llama_context: RPC0[10.0.0.2:50052] compute buffer size =    20.00 MiB\n",
		sample(1, fdText("amdgpu", "0000:c5:00.0", "30", "300 MiB")))
	require.InDelta(t, 0, val(r.ModelGTTMiB), 1e-9, "naive: null")
	require.InDelta(t, 300, val(r.UnattributedMiB), 1e-9, "naive: null")
	require.Contains(t, r.Flags, FlagRemoteBuffers)
	require.Len(t, r.Detail.Remote, 3)
}

// Before b4881 a context printed no "constructing llama_context": a tool
// that makes two contexts on one model (llama-save-load-state does) shows
// a second KV line after the first context's compute lines. Read as one
// context, the second one's compute lines would pass for a re-reservation
// of the first: both KV buffers counted, only one compute buffer.
func TestSecondContextBeforeB4881StartsAtItsCache(t *testing.T) {
	t.Parallel()
	ctx := func(kv, out, dev, host string) string {
		return "llama_new_context_with_model: n_ctx      = 4096\n" +
			"llama_kv_cache_init:      ROCm0 KV buffer size = " + kv + " MiB\n" +
			"llama_new_context_with_model: KV self size  = " + kv + " MiB, K (f16):    1.00 MiB, V (f16):    1.00 MiB\n" +
			"llama_new_context_with_model:  ROCm_Host  output buffer size = " + out + " MiB\n" +
			"llama_new_context_with_model:      ROCm0 compute buffer size = " + dev + " MiB\n" +
			"llama_new_context_with_model:  ROCm_Host compute buffer size = " + host + " MiB\n"
	}
	r := foldLog(t, "build: 3500 (abcdef1) with cc for x86_64-linux-gnu\n"+verbose+load+
		"llm_load_tensors:      ROCm0 buffer size =  1000.00 MiB\n"+
		ctx("64.00", "0.50", "20.00", "5.00")+ctx("8.00", "0.50", "10.00", "2.00"))
	require.InDelta(t, 72, val(r.StateMiB), 1e-9)
	require.InDelta(t, 38, val(r.ComputeMiB), 1e-9, "naive: 13.00 (the second context's compute lines as a re-reservation)")
	require.Equal(t, 2, r.Detail.LiveContexts)
	require.Contains(t, r.Flags, FlagMultipleContexts)

	// A re-reservation (b7746+) prints compute lines only: still one context.
	r = foldLog(t, verbose+load+
		"load_tensors:        ROCm0 model buffer size =  1000.00 MiB\n"+
		"llama_context: constructing llama_context\n"+
		"llama_kv_cache:      ROCm0 KV buffer size =    64.00 MiB\n"+
		"llama_memory_recurrent:      ROCm0 RS buffer size =    30.00 MiB\n"+
		"sched_reserve:      ROCm0 compute buffer size =    20.00 MiB\n"+
		"sched_reserve:      ROCm0 compute buffer size =    25.00 MiB\n")
	require.InDelta(t, 94, val(r.StateMiB), 1e-9)
	require.InDelta(t, 25, val(r.ComputeMiB), 1e-9)
	require.Equal(t, 1, r.Detail.LiveContexts)
}

// llama-server (b9180+) sizes a speculative draft with a dry-run load of it
// after announcing it: the announced role belongs to the real load of that
// file, not to the probe.
func TestDraftRoleSkipsItsProbe(t *testing.T) {
	t.Parallel()
	draft := "llama_model_loader: loaded meta data with 30 key-value pairs and 100 tensors from /m/draft.gguf (version GGUF V3 (latest))\n"
	r := foldLog(t, verbose+load+
		"load_tensors:        ROCm0 model buffer size =  1000.00 MiB\n"+
		"llama_context: constructing llama_context\n"+
		"sched_reserve:      ROCm0 compute buffer size =    20.00 MiB\n"+
		"srv    load_model: loading draft model '/m/draft.gguf'\n"+
		draft+"load_tensors:        ROCm0 model buffer size =     0.00 MiB\n"+
		"llama_context: constructing llama_context\n"+
		"sched_reserve:      ROCm0 compute buffer size =     5.00 MiB\n"+
		draft+"load_tensors:        ROCm0 model buffer size =   100.00 MiB\n"+
		"llama_context: constructing llama_context\n"+
		"sched_reserve:      ROCm0 compute buffer size =     5.00 MiB\n")
	require.InDelta(t, 1100, val(r.ModelGTTMiB), 1e-9)
	require.InDelta(t, 25, val(r.ComputeMiB), 1e-9)
	require.Len(t, r.Models, 2)
	require.Equal(t, "main", r.Models[0].Role)
	require.Equal(t, "draft", r.Models[1].Role, "naive: model (the probe took the role)")
	require.Contains(t, r.Flags, FlagFitProbe)
}

// A wrapper's prefix can hold a '|' of its own (docker compose prints
// "<service>  | " before every line): the breakdown table's columns are
// counted from the printer's name, not from the start of the line.
func TestBreakdownBehindAPipeWrapper(t *testing.T) {
	t.Parallel()
	lines := []string{
		"load_tensors:        ROCm0 model buffer size =  1000.00 MiB",
		"llama_context: constructing llama_context",
		"llama_kv_cache:      ROCm0 KV buffer size =    64.00 MiB",
		"sched_reserve:      ROCm0 compute buffer size =    20.00 MiB",
		"0.01.000.001 I common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |",
		"0.01.000.002 I common_memory_breakdown_print: |   - ROCm0 (8060S)      | 98304 = 90000 + (1084 =  1000 +      64 +      20) +        7220 |",
		"0.01.000.003 I common_memory_breakdown_print: |   - Host               |                    105 =   100 +       0 +       5                |",
	}
	log := verbose + load
	for _, l := range lines {
		log += "llama-server-1  | " + l + "\n"
	}
	r := foldLog(t, log)
	for _, name := range []string{"breakdown_model", "breakdown_context", "breakdown_compute"} {
		c := checkNamed(t, r, name) // naive: no table row, no check
		require.Equal(t, StatusOK, c.Status, "%s: %s", name, c.Detail)
	}
	require.Contains(t, checkNamed(t, r, "breakdown_model").Detail, "model 1000 MiB")
}

// The mmproj's weights line behind a supervisor's prefix: the function is
// not at the start of the message, and the weights must still be counted
// on the device the CLIP line names.
func TestMmprojWeightsBehindAWrapperPrefix(t *testing.T) {
	t.Parallel()
	lines := []string{
		"load_tensors:        ROCm0 model buffer size =  6476.18 MiB",
		"llama_context: constructing llama_context",
		"sched_reserve:        ROCm0 compute buffer size =   519.62 MiB",
		"clip_ctx: CLIP using ROCm0 backend",
		"load_hparams: model size:         811.79 MiB",
		"alloc_compute_meta:        ROCm0 compute buffer size =   112.50 MiB",
	}
	for _, prefix := range []string{"", "Mar 12 07:01:05 host llama-server[433748]: ", "llama-server-1  | "} {
		log := verbose + load
		for _, l := range lines {
			log += prefix + l + "\n"
		}
		r := foldLog(t, log)
		require.InDelta(t, 7287.97, val(r.ModelGTTMiB), 1e-9, "%q: naive 6476.18 (the mmproj weights lost)", prefix)
		require.Len(t, r.Models, 2)
		require.InDelta(t, 811.79, val(r.Models[1].ModelGTTMiB), 1e-9)
	}
	// Still a word of its own: a longer function name is not the loader's.
	p := llamalog.MustParser()
	_, ok := p.Parse(1, []byte("x: my_load_hparams: model size: 1.00 MiB"))
	require.False(t, ok)
	rec, ok := p.Parse(1, []byte("[srv] clip_model_load: model size:     595.49 MB"))
	require.True(t, ok)
	require.Equal(t, llamalog.KindClip, rec.Kind)
	require.InDelta(t, 595.49, rec.MiB, 1e-9)
}

// A shell loop that samples every process of a tree may record the card's
// counters under each process's header of one tick; the card is
// device-wide, so it is counted once, not once per process.
func TestCardCountersOncePerTick(t *testing.T) {
	t.Parallel()
	fd := fdText("amdgpu", "0000:c5:00.0", "30", "3000 MiB")
	text := "# sample t=2026-11-07T10:00:01Z pid=4242\n" +
		"## card=card1 mem_info_gtt_used=3250585600 mem_info_gtt_total=103079215104\n" +
		"## fd=5\n" + fd +
		"# sample t=2026-11-07T10:00:01Z pid=4243\n" +
		"## card=card1 mem_info_gtt_used=3250585600 mem_info_gtt_total=103079215104\n" +
		"## card=card0 mem_info_gtt_used=1048576 mem_info_gtt_total=103079215104\n" +
		"## fd=7\n" + fd
	ss, _, err := ParseSamples([]byte(text))
	require.NoError(t, err)
	require.Len(t, ss, 1, "one tick of a process tree")
	r := foldLog(t, verbose+load+"load_tensors:        ROCm0 model buffer size =  2900.00 MiB\n", ss...)
	require.InDelta(t, 3000, val(r.PeakGTTMiB), 1e-9)
	require.InDelta(t, 3101, val(r.Detail.CardGTTUsedMiB), 1e-9, "naive: 6201 (card1 twice)")
	require.Equal(t, StatusOK, checkNamed(t, r, "process_vs_card").Status)
}

// llama.cpp's memory breakdown speaks of the llama context only: with a
// live mmproj its weights and compute buffers are outside the table, and
// the table is compared with the main model's load.
func TestBreakdownWithALiveMmprojIsTheMainModels(t *testing.T) {
	t.Parallel()
	r := foldLog(t, verbose+load+
		"load_tensors:   CPU_Mapped model buffer size =   787.50 MiB\n"+
		"load_tensors:        ROCm0 model buffer size =  6476.18 MiB\n"+
		"llama_context: constructing llama_context\n"+
		"llama_kv_cache:        ROCm0 KV buffer size =   888.00 MiB\n"+
		"sched_reserve:        ROCm0 compute buffer size =   519.62 MiB\n"+
		"sched_reserve:    ROCm_Host compute buffer size =    29.63 MiB\n"+
		"clip_ctx: CLIP using ROCm0 backend\n"+
		"load_hparams: model size:         811.79 MiB\n"+
		"alloc_compute_meta:        ROCm0 compute buffer size =   112.50 MiB\n"+
		"common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |\n"+
		"common_memory_breakdown_print: |   - ROCm0 (8060S)      | 98304 = 90000 + (7883 =  6476 +     888 +     519) +         421 |\n"+
		"common_memory_breakdown_print: |   - Host               |                    817 =   787 +       0 +      29                |\n")
	require.InDelta(t, 7287.97, val(r.ModelGTTMiB), 1e-9, "the mmproj weights count in the row")
	require.Contains(t, r.Flags, FlagMmproj)
	requireBreakdownOK(t, r)
	require.Contains(t, checkNamed(t, r, "breakdown_model").Detail, "6476.18 MiB", "naive: 7287.97 MiB, with the mmproj's weights")
	require.Contains(t, checkNamed(t, r, "breakdown_compute").Detail, "519.62 MiB", "naive: 632.12 MiB, with the mmproj's compute")
}

// The fit prints its dry runs' memory breakdown and then its projection
// ("<...>_fit_impl: projected to use N MiB of device memory ..."); a build
// or a verbosity that prints no "fitting params to device memory" line
// shows the probe only so. The probe's table is not the run's, and the
// report says a probe was seen.
func TestFitProbeToldByItsProjection(t *testing.T) {
	t.Parallel()
	const probe = "0.00.096.657 I common_params_fit_impl: getting device memory data for initial parameters:\n" +
		"0.00.206.830 I common_memory_breakdown_print: | memory breakdown [MiB] | total    free    self   model   context   compute    unaccounted |\n" +
		"0.00.206.851 I common_memory_breakdown_print: |   - ROCm0 (8060S)      | 98304 = 95000 + (3200 =  2900 +     200 +     100) +         104 |\n" +
		"0.00.206.852 I common_memory_breakdown_print: |   - Host               |                    310 =   300 +       0 +      10                |\n" +
		"0.00.210.000 I common_params_fit_impl: getting device memory data with all MoE tensors moved to system memory:\n" +
		"0.00.215.378 I common_params_fit_impl: projected to use 3300 MiB of device memory vs. 95000 MiB of free device memory\n"
	// At the default verbosity (b9151+) no buffer line follows: the
	// probe's table must not stand in for the run's.
	r := foldLog(t, "0.00.000.001 I cmn  common_param: common_params_print_info: verbosity = 3 (adjust with the `-lv N` CLI arg)\n"+
		probe+"0.00.300.000 I llama_model_loader: loaded meta data with 30 key-value pairs and 400 tensors from m.gguf (version GGUF V3 (latest))\n")
	require.Contains(t, r.Flags, FlagFitProbe, "naive: no probe seen")
	require.Equal(t, 1, r.Detail.ProbeLoads)
	for _, c := range r.Checks {
		require.False(t, strings.HasPrefix(c.Name, "breakdown_"), "naive: the probe's table compared: %+v", c)
	}

	// With -v the run's own table at exit is the one compared: the
	// projection closed the probe's bracket before it.
	r = foldLog(t, verbose+probe+load+
		"load_tensors:        ROCm0 model buffer size =  3000.00 MiB\n"+
		"llama_context: constructing llama_context\n"+
		"llama_kv_cache:        ROCm0 KV buffer size =   200.00 MiB\n"+
		"sched_reserve:        ROCm0 compute buffer size =   100.00 MiB\n"+
		"common_init_from_params: warming up the model with an empty run - please wait ... (--no-warmup to disable)\n"+
		"common_memory_breakdown_print: | memory breakdown [MiB] | total    free    self   model   context   compute    unaccounted |\n"+
		"common_memory_breakdown_print: |   - ROCm0 (8060S)      | 98304 = 91700 + (3300 =  3000 +     200 +     100) +        3304 |\n")
	require.Contains(t, r.Flags, FlagFitProbe)
	require.Equal(t, StatusOK, checkNamed(t, r, "breakdown_model").Status)
	require.Contains(t, checkNamed(t, r, "breakdown_model").Detail, "model 3000 MiB", "the exit table, not the probe's 2900")
}

// TestBufferLineInAnotherUnitIsCounted: a buffer line whose size is not
// in MiB (every llama.cpp build prints MiB) is counted as skipped and
// flagged, read line by line and read as a whole log, never left out
// unseen: the naive reading (a line without "MiB" is no memory line)
// reports a clean 1 MiB model row and no skipped line.
func TestBufferLineInAnotherUnitIsCounted(t *testing.T) {
	t.Parallel()
	log := verbose + load +
		"load_tensors:         HRX0 model buffer size =     1.00 MiB\n" +
		"load_tensors:    HRX0_Split model buffer size =     1.50 GiB\n" +
		"llama_context: constructing llama_context\n" +
		"llama_kv_cache:       HRX0 KV buffer size = 16384.00 KiB\n" +
		"sched_reserve: the buffer size is chosen by the scheduler\n"
	r := foldLog(t, log)
	require.Equal(t, 2, r.Detail.LinesSkipped)
	require.Contains(t, r.Flags, FlagLinesSkipped)
	require.InDelta(t, 1, val(r.ModelGTTMiB), 1e-9)
	f := NewFold(Options{})
	_, err := f.ReadLog(strings.NewReader(log), "log")
	require.NoError(t, err)
	require.Equal(t, 2, f.Report().Detail.LinesSkipped)
}

func TestParseMalformedBufferLineIsCounted(t *testing.T) {
	t.Parallel()
	r := foldLog(t, verbose+load+"load_tensors:         HRX0 model buffer size =  nan MiB\nload_tensors:         HRX0 model buffer size =  1.00 MiB\n")
	require.Equal(t, 1, r.Detail.LinesSkipped)
	require.Contains(t, r.Flags, FlagLinesSkipped)
	require.InDelta(t, 1, val(r.ModelGTTMiB), 1e-9)
}
