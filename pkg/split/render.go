package split

import (
	"encoding/json"
	"fmt"
	"strings"
)

// JSON renders the report as indented JSON (the gttsplit.split.v1 object), with a final newline.
func JSON(r Report) ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Markdown renders the report as Markdown: the seed's table with peak and
// final side by side, the flags and checks in words, the provenance line and
// the expected-range note.
func Markdown(r Report) string { return render(r, true) }

// Text renders the same report for a terminal.
func Text(r Report) string { return render(r, false) }

// FlagText says in words what each flag means.
var FlagText = map[string]string{
	FlagNotModelLoad:     "the log has no model load (no `loaded meta data` line and no model buffer line): the model row is unknown; KV + state and compute come from the buffer lines the log does have",
	FlagNotVerbose:       "the log is not a -v log (no debug-only line): buffer lines may be missing, numbers computed from what is there",
	FlagPreB3761:         "a llama.cpp build before b3761 whose log has no per-buffer line: format not supported",
	FlagLegacyFormat:     "pre-b1843 totals lines (`mem required`, `VRAM used`) seen: not per-buffer, not counted",
	FlagFitProbe:         "a --fit probe load (all model buffers 0.00 MiB) was seen and ignored, with its contexts",
	FlagMultipleModels:   "more than one live model (main and draft/MTP, mmproj, router children): each is listed under models and all are summed in the rows",
	FlagMultipleContexts: "a model has more than one live context: all of them are summed",
	FlagNoContext:        "a model was loaded but no context was created for it",
	FlagUnknownBuffer:    "buffer lines of a kind gttsplit does not know: listed, in no row (so in not attributed)",
	FlagMmproj:           "a multimodal projector (mmproj/CLIP) is loaded: its weights (on its CLIP backend) and compute buffers are counted and listed under models",
	FlagRemoteBuffers:    "buffers on remote (RPC) devices: another host's memory, listed in the detail and kept out of every row",
	FlagComputeMismatch:  "llama.cpp reports a compute buffer that does not match its reservation",
	FlagOutputRealloc:    "the output buffer was reallocated after the context was built",
	FlagNoTrace:          "no host-weight trace line: the packed row is unknown, not 0 (run with GGML_HRX_HOST_WEIGHT_TRACE=1)",
	FlagNoSamples:        "no fdinfo samples: the peak is unknown",
	FlagNoGPUClient:      "no amdgpu DRM client in any sample: the peak is unknown",
	FlagResidentOnly:     "the kernel gave only resident GTT (drm-memory-gtt, or gtt mem before 5.19), not drm-total-gtt",
	FlagUnattribHigh:     "not attributed is above the threshold",
	FlagUnattribNegative: "the rows add up to MORE than the measured peak",
	FlagLinesSkipped:     "malformed lines were counted and skipped",
	FlagFDsSkipped:       "truncated or malformed fdinfo files or samples lines were counted and skipped",
	FlagSourceDirty:      "the measured source tree was dirty (or its state unknown)",
	FlagSourceUnknown:    "the measured source tree's commit is unknown",
	FlagIncomplete:       "the run did not finish (no run-finished event): a partial split",
	FlagEventsDropped:    "the collector dropped events of this run: the split misses data",
	FlagStateCapped:      "a very long run outgrew the fold's memory: its earliest lines were left out (never the live load's); a figure whose lines were left out is unknown",
}

type row struct {
	part string
	v    *MiB
}

func render(r Report, md bool) string {
	var b strings.Builder
	title := "gttsplit: GTT split"
	if r.Run.ID != "" {
		title += " of run " + r.Run.ID
	}
	if md {
		fmt.Fprintf(&b, "### %s\n\n", title)
	} else {
		fmt.Fprintf(&b, "%s\n\n", title)
	}

	packedPart := "packed copies"
	if r.PackedWeights != nil {
		packedPart = fmt.Sprintf("packed copies (%d weights)", *r.PackedWeights)
	}
	rows := []row{
		{part: "loader's model buffer", v: r.ModelGTTMiB},
		{part: packedPart, v: r.PackedMiB},
		{part: "KV + state", v: r.StateMiB},
		{part: "compute + output", v: r.ComputeMiB},
	}
	attributed := 0.0
	for _, x := range rows {
		if x.v != nil {
			attributed += float64(*x.v)
		}
	}
	cell := func(v *MiB) string {
		if v == nil {
			return "unknown"
		}
		return fmt.Sprintf("%.1f", float64(*v))
	}
	share := func(v *MiB, of *MiB) string {
		if v == nil || of == nil || *of == 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f %%", float64(*v)/float64(*of)*100)
	}
	var unFinal *MiB
	if r.FinalGTTMiB != nil {
		u := MiB(float64(*r.FinalGTTMiB) - attributed)
		unFinal = &u
	}
	header := []string{"part", "MiB at peak", "share of peak", "MiB at final", "share of final"}
	table := [][]string{
		{"process GTT (fdinfo)", cell(r.PeakGTTMiB), share(r.PeakGTTMiB, r.PeakGTTMiB), cell(r.FinalGTTMiB), share(r.FinalGTTMiB, r.FinalGTTMiB)},
	}
	for _, x := range rows {
		table = append(table, []string{x.part, cell(x.v), share(x.v, r.PeakGTTMiB), cell(x.v), share(x.v, r.FinalGTTMiB)})
	}
	table = append(table, []string{"not attributed", cell(r.UnattributedMiB), share(r.UnattributedMiB, r.PeakGTTMiB), cell(unFinal), share(unFinal, r.FinalGTTMiB)})
	hostCell := "—"
	if r.ModelHostMiB != nil {
		hostCell = fmt.Sprintf("%.2f", float64(*r.ModelHostMiB))
	}
	table = append(table, []string{"CPU model buffer (not in GTT)", hostCell, "", hostCell, ""})
	writeTable(&b, md, header, table)
	if bars := TextBars(r); md && bars != "" {
		fmt.Fprintf(&b, "\n```\n%s```\n", bars)
	}

	dup := "unknown"
	if r.DuplicatePct != nil {
		dup = fmt.Sprintf("%.1f %%", float64(*r.DuplicatePct))
	}
	fmt.Fprintf(&b, "\nduplicate = packed / model buffer: %s", dup)
	if r.UnattributedPct != nil {
		fmt.Fprintf(&b, "; not attributed: %.1f %% of peak", float64(*r.UnattributedPct))
	}
	b.WriteString("\n")

	section := func(name string) {
		if md {
			fmt.Fprintf(&b, "\n**%s**\n\n", name)
		} else {
			fmt.Fprintf(&b, "\n%s:\n", name)
		}
	}
	if len(r.Models) > 0 {
		section("Models")
		for _, m := range r.Models {
			fmt.Fprintf(&b, "- %s\n", modelLine(m))
		}
	}
	section("Flags")
	if len(r.Flags) == 0 {
		b.WriteString("- none\n")
	}
	for _, f := range r.Flags {
		fmt.Fprintf(&b, "- %s: %s\n", f, FlagText[f])
	}
	section("Checks")
	if len(r.Checks) == 0 {
		b.WriteString("- none could be made\n")
	}
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "- %s %s: %s\n", strings.ToUpper(c.Status), c.Name, c.Detail)
	}
	if len(r.Detail.Warnings) > 0 {
		section("Warnings")
		for _, w := range r.Detail.Warnings {
			fmt.Fprintf(&b, "- %s\n", w)
		}
	}
	section("Provenance")
	fmt.Fprintf(&b, "- %s\n", provenanceLine(r))
	if r.Run.ControlOf != "" {
		fmt.Fprintf(&b, "- control: this run is the control (the same command with offload off) of run %s; `aggregator compare %s %s` puts the two side by side\n",
			r.Run.ControlOf, r.Run.ControlOf, or(r.Run.ID, "THIS-RUN"))
	}
	d := r.Detail
	fmt.Fprintf(&b, "- inputs: %d log lines (%d skipped as malformed), %d fdinfo samples (%d fds skipped), %d amdgpu clients at the peak",
		d.LinesRead, d.LinesSkipped, d.Samples, d.FDsSkipped, d.GPUClients)
	if d.PeakKey != "" {
		fmt.Fprintf(&b, " (%s)", d.PeakKey)
	}
	b.WriteString("\n")
	if s := d.Sampling; s != nil {
		fmt.Fprintf(&b, "- sampling: every %.1f ms, %d samples (%d of them at memory-relevant log lines), largest gap %.1f ms: a peak shorter than that can be missed\n",
			float64(s.IntervalMs), s.Samples, s.Triggered, float64(s.LargestGapMs))
	}
	section("Expected")
	fmt.Fprintf(&b, "%s\n", r.Expected)
	return b.String()
}

// modelLine says what one model load holds, in words.
func modelLine(m ModelLoad) string {
	f := func(v *MiB) string {
		if v == nil {
			return "unknown"
		}
		return fmt.Sprintf("%.1f MiB", float64(*v))
	}
	file := m.File
	if file == "" {
		file = "(file not named)"
	}
	where := fmt.Sprintf("line %d", m.Line)
	if m.RouterPort != 0 {
		where += fmt.Sprintf(", router child %d", m.RouterPort)
	}
	s := fmt.Sprintf("%s %s (%s): model %s", m.Role, quoteCmd(file), where, f(m.ModelGTTMiB))
	if m.ModelHostMiB != nil && *m.ModelHostMiB != 0 {
		s += fmt.Sprintf(" (+ %s CPU, not in GTT)", f(m.ModelHostMiB))
	}
	s += fmt.Sprintf(", KV + state %s, compute + output %s, %d context(s)", f(m.StateMiB), f(m.ComputeMiB), m.Contexts)
	if !m.Live {
		s += "; NOT counted: " + m.Ended
	}
	return s
}

func or(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func provenanceLine(r Report) string {
	tree := "unknown"
	if r.Provenance.SourceCommit != "" {
		tree = r.Provenance.SourceCommit
		switch {
		case r.Provenance.SourceDirty == nil:
			tree += " (clean: unknown)"
		case *r.Provenance.SourceDirty:
			tree += " (dirty)"
		default:
			tree += " (clean)"
		}
	}
	exit := "unknown"
	if r.Run.ExitCode != nil {
		exit = fmt.Sprint(*r.Run.ExitCode)
	}
	if r.Run.Signal != "" {
		exit = "signal " + r.Run.Signal
	}
	return fmt.Sprintf("llama.cpp %s; source tree %s; host %s, lane %s; command %s; exit %s; started %s, finished %s; collector %s",
		or(r.Provenance.LlamaBuild, "build unknown"), tree, or(r.Run.Host, "unknown"), or(r.Run.Lane, "unknown"),
		or(quoteCmd(r.Run.Command), "unknown"), exit, or(r.Run.Started, "unknown"), or(r.Run.Finished, "unknown"),
		or(r.Provenance.CollectorVersion, "none (offline parse)"))
}

func quoteCmd(s string) string {
	if s == "" {
		return ""
	}
	return "`" + strings.ReplaceAll(s, "`", "'") + "`"
}

func writeTable(b *strings.Builder, md bool, header []string, rows [][]string) {
	if md {
		b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
		for i := range header {
			if i == 0 {
				b.WriteString("---|")
			} else {
				b.WriteString("---:|")
			}
		}
		b.WriteString("\n")
		for _, r := range rows {
			b.WriteString("| " + strings.Join(r, " | ") + " |\n")
		}
		return
	}
	w := make([]int, len(header))
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			if n := len([]rune(c)); n > w[i] {
				w[i] = n
			}
		}
	}
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			pad := strings.Repeat(" ", w[i]-len([]rune(c)))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		b.WriteString("\n")
	}
}
