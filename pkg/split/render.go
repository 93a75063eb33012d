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
	FlagDeviceOrder:      "the log prints no PCI address for its devices: they were matched to the cards by their order, an assumption (see the warnings)",
	FlagDeviceUnmatched:  "a device could not be matched to a sampled card (see the devices): its not attributed is unknown",
	FlagDeviceOverCard:   "the log attributes more to a card's devices than the card's own memory held at its peak (see the device_vs_card check)",
	FlagControl:          "this run is a control (offload off): judged as one, its not attributed is not flagged",
	FlagControlOffloaded: "this run is named a control but holds model buffers in GTT: it was not run with offload off (-ngl 0)",
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
	FlagChildFailed:      "the command exited with a non-zero status: a failed run, measured until it ended",
	FlagChildSignalled:   "the command was stopped by a signal: an interrupted run, measured until it stopped",
	FlagNoLog:            "no log was read (collector attach without --log): every log row is unknown, only the fdinfo samples were measured",
	FlagContextFailed:    "a context's creation failed: its buffers were freed with it and are in no row (listed under failed buffers; a sample taken before the failure may still hold them)",
	FlagMmprojFailed:     "a multimodal projector's load failed: its weights and buffers are in no row (listed under failed buffers) and it is not a live model",
}

// flagTextOpen says what a flag of absent evidence means while the run is
// open: not seen yet, rather than not there.
var flagTextOpen = map[string]string{
	FlagNotModelLoad: "no model load seen yet (the run is still open): the model row is unknown so far",
	FlagNotVerbose:   "no debug-only line seen yet (the run is still open): whether the log is -v is not known yet",
	FlagNoContext:    "a model was loaded, no context seen yet (the run is still open)",
	FlagNoTrace:      "no host-weight trace line seen yet (the run is still open): the packed row is unknown so far, not 0",
	FlagNoSamples:    "no fdinfo sample seen yet (the run is still open): the peak is unknown so far",
	FlagNoGPUClient:  "no amdgpu DRM client seen yet in the samples (the run is still open): the peak is unknown so far",
	FlagIncomplete:   "the run is still open (its run-finished event has not come): the split so far",
}

// FlagWords says in words what flag f means for report r: FlagText, with
// the figures of r where the flag has some (the exit status, the signal),
// and "not seen yet" for absent evidence while r's run is open.
func FlagWords(r Report, f string) string {
	switch {
	case f == FlagChildFailed && r.Run.ExitCode != nil:
		return fmt.Sprintf("the command exited with status %d: a failed run, measured until it ended", *r.Run.ExitCode)
	case f == FlagChildSignalled && r.Run.Signal != "":
		return fmt.Sprintf("the command was stopped by %s: an interrupted run, measured until it stopped", r.Run.Signal)
	case r.Run.Open && flagTextOpen[f] != "":
		return flagTextOpen[f]
	}
	return FlagText[f]
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
	if len(r.Devices) > 0 {
		section("Devices")
		renderDevices(&b, r, md)
	}
	section("Flags")
	if len(r.Flags) == 0 {
		b.WriteString("- none\n")
	}
	for _, f := range r.Flags {
		fmt.Fprintf(&b, "- %s: %s\n", f, FlagWords(r, f))
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

// renderDevices writes the device table, a line per device the log
// describes or that is not matched, a line per card, and (Markdown) a
// bar per card with devices.
func renderDevices(b *strings.Builder, r Report, md bool) {
	cell := func(v *MiB) string {
		if v == nil {
			return "unknown"
		}
		return fmt.Sprintf("%.1f", float64(*v))
	}
	cards := map[string]Card{}
	for _, k := range r.Cards {
		cards[k.PDev] = k
	}
	var rows [][]string
	for _, d := range r.Devices {
		card, mem, un := "", "", ""
		switch d.Kind {
		case DeviceHost:
			card = "host memory (not GPU)"
		case DevicePinned:
			card = "pinned host memory (GTT)"
		case DeviceRemote:
			card = "remote (another host)"
		case DeviceSplit:
			card = "split over " + strings.Join(d.Spans, ", ")
			if len(d.Spans) == 0 {
				card = "split"
			}
		default:
			card = "—"
			if d.Unmatched != "" {
				card = "not matched"
			}
			if d.Card != "" {
				card = d.Card
				if d.Match == "order" {
					card += " (by order)"
				}
				if k, ok := cards[d.Card]; ok && k.Memory != "" {
					var parts []string
					for _, g := range k.Regions {
						// The card's own memory, and GTT beside a
						// discrete card's VRAM (spill, pinned buffers).
						if g.Class == k.Memory || k.Memory == "vram" && g.Class == "gtt" {
							parts = append(parts, fmt.Sprintf("%s %.1f", strings.ToUpper(g.Class), float64(g.PeakMiB)))
						}
					}
					mem = strings.Join(parts, ", ")
				}
			}
			if d.NotAttributedMiB != nil {
				un = cell(d.NotAttributedMiB)
				if d.NotAttributedPct != nil {
					un += fmt.Sprintf(" (%.1f %%)", float64(*d.NotAttributedPct))
				}
			}
		}
		rows = append(rows, []string{d.Name, cell(d.ModelMiB), cell(d.StateMiB), cell(d.ComputeMiB), card, mem, un})
	}
	writeTable(b, md, []string{"device", "model", "KV + state", "compute + output", "card", "card memory at peak", "not attributed"}, rows)
	if bars := deviceTextBars(r); md && bars != "" {
		fmt.Fprintf(b, "\n```\n%s```\n", bars)
	}
	var lines []string
	for _, d := range r.Devices {
		var what []string
		if d.Description != "" {
			what = append(what, d.Description)
		}
		if d.PCI != "" {
			what = append(what, "PCI "+d.PCI)
		}
		if d.FreeMiB != nil {
			what = append(what, fmt.Sprintf("%.0f MiB free at its load (line %d)", float64(*d.FreeMiB), d.Line))
		}
		if len(d.BufferTypes) > 1 || len(d.BufferTypes) == 1 && d.BufferTypes[0] != d.Name {
			what = append(what, "buffer types "+strings.Join(d.BufferTypes, ", "))
		}
		switch d.Match {
		case "pci":
			what = append(what, "matched to its card by the PCI address the log prints")
		case "order":
			what = append(what, "matched to its card by order (an assumption: the log prints no PCI address)")
		}
		if d.Unmatched != "" {
			what = append(what, "not matched: "+d.Unmatched)
		}
		if len(what) > 0 {
			lines = append(lines, fmt.Sprintf("- %s: %s\n", d.Name, strings.Join(what, "; ")))
		}
	}
	for _, k := range r.Cards {
		lines = append(lines, fmt.Sprintf("- card %s\n", cardLine(k)))
	}
	if len(lines) > 0 {
		b.WriteString("\n" + strings.Join(lines, ""))
	}
}

// cardLine says what one card held, in words.
func cardLine(k Card) string {
	var regs []string
	for _, g := range k.Regions {
		if g.Class == "cpu" && g.PeakMiB == 0 {
			continue // amdgpu prints it for every client; nearly always 0
		}
		reg := fmt.Sprintf("%s peak %.1f MiB, final %.1f MiB", strings.ToUpper(g.Class), float64(g.PeakMiB), float64(g.FinalMiB))
		if g.Regions != g.Class {
			reg += " (" + g.Regions + ")"
		}
		if g.Resident {
			reg += " (resident only)"
		}
		regs = append(regs, reg)
	}
	s := fmt.Sprintf("%s (%s, %d client(s)): %s", k.PDev, k.Driver, k.Clients, strings.Join(regs, "; "))
	switch {
	case len(k.Devices) == 0:
		s += "; no device of the log on it"
		return s
	case k.Memory != "":
		s += fmt.Sprintf("; devices %s, their memory is its %s", strings.Join(k.Devices, ", "), strings.ToUpper(k.Memory))
	}
	if k.AttributedMiB != nil && k.NotAttributedMiB != nil {
		s += fmt.Sprintf("; attributed %.1f MiB, not attributed %.1f MiB", float64(*k.AttributedMiB), float64(*k.NotAttributedMiB))
		if k.NotAttributedPct != nil {
			s += fmt.Sprintf(" (%.1f %% of its %s peak)", float64(*k.NotAttributedPct), strings.ToUpper(k.Memory))
		}
	}
	for _, n := range k.Notes {
		s += "; " + n
	}
	return s
}
