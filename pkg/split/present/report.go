package present

import (
	"fmt"
	"strings"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// Markdown renders the report as Markdown: the seed's table with peak and
// final side by side, the flags and checks in words, the provenance line and
// the expected-range note.
func Markdown(r split.Report) string { return render(r, true) }

// Text renders the same report for a terminal.
func Text(r split.Report) string { return render(r, false) }

// totalPart names the line of the process's own GTT in the report's table,
// whose columns are the peak and the final (the RowTotal rows).
const totalPart = "process GTT (fdinfo)"

// doc is a report being written, as Markdown or as text.
type doc struct {
	b  strings.Builder
	md bool
}

func (d *doc) title(s string) {
	if d.md {
		fmt.Fprintf(&d.b, "### %s\n\n", s)
	} else {
		fmt.Fprintf(&d.b, "%s\n\n", s)
	}
}

// note is a paragraph about the report itself, under its title: a quote
// in Markdown.
func (d *doc) note(s string) {
	s = strings.ToUpper(s[:1]) + s[1:] + "."
	if d.md {
		fmt.Fprintf(&d.b, "> %s\n\n", s)
	} else {
		fmt.Fprintf(&d.b, "%s\n\n", s)
	}
}

func (d *doc) section(name string) {
	if d.md {
		fmt.Fprintf(&d.b, "\n**%s**\n\n", name)
	} else {
		fmt.Fprintf(&d.b, "\n%s:\n", name)
	}
}

// bars writes a text bar chart: a code block in Markdown, nothing in text.
func (d *doc) bars(s string) {
	if d.md && s != "" {
		fmt.Fprintf(&d.b, "\n```\n%s```\n", s)
	}
}

func (d *doc) list(items []string, none string) {
	if len(items) == 0 && none != "" {
		fmt.Fprintf(&d.b, "- %s\n", none)
	}
	for _, s := range items {
		fmt.Fprintf(&d.b, "- %s\n", s)
	}
}

func render(r split.Report, md bool) string {
	d := &doc{md: md}
	title := "gttsplit: GTT split"
	if r.Run.ID != "" {
		title += " of run " + r.Run.ID
	}
	d.title(title)
	if r.Run.Replaces != nil {
		// An edited tracker comment, a file written again: what it
		// replaces comes first.
		d.note(split.FlagWords(r, split.FlagReplaces))
	}
	writeTable(&d.b, md, []string{"part", "MiB at peak", "share of peak", "MiB at final", "share of final"}, headline(r))
	d.bars(TextBars(r))
	shares(&d.b, r)
	if len(r.Models) > 0 {
		d.section("Models")
		for _, m := range r.Models {
			fmt.Fprintf(&d.b, "- %s\n", modelLine(m))
		}
	}
	if len(r.Devices) > 0 {
		d.section("Devices")
		renderDevices(d, r)
	}
	d.section("Flags")
	var flags []string
	for _, f := range r.Flags {
		flags = append(flags, f+": "+split.FlagWords(r, f))
	}
	d.list(flags, "none")
	d.section("Checks")
	var checks []string
	for _, c := range r.Checks {
		checks = append(checks, strings.ToUpper(c.Status)+" "+c.Name+": "+c.Detail)
	}
	d.list(checks, "none could be made")
	if len(r.Detail.Warnings) > 0 {
		d.section("Warnings")
		d.list(r.Detail.Warnings, "")
	}
	d.section("Provenance")
	d.list(provenance(r), "")
	d.section("Expected")
	fmt.Fprintf(&d.b, "%s\n", r.Expected)
	return d.b.String()
}

// headline is the report's table: the process's GTT, then a line per row
// of the GTT (the parts and not attributed) and beside it (the CPU model
// buffer), at the peak and at the final sample.
func headline(r split.Report) [][]string {
	parts := split.RowsOf(split.RowPart)
	attributed := 0.0
	for _, row := range parts {
		if v := row.Of(r); v != nil {
			attributed += float64(*v)
		}
	}
	table := [][]string{
		{totalPart, cell(r.PeakGTTMiB), share(r.PeakGTTMiB, r.PeakGTTMiB), cell(r.FinalGTTMiB), share(r.FinalGTTMiB, r.FinalGTTMiB)},
	}
	for _, row := range split.RowsOf(split.RowPart, split.RowRest, split.RowOutside) {
		table = append(table, headlineRow(r, row, attributed))
	}
	return table
}

// headlineRow is one row of the report's table. A part is the same at the
// peak and at the final sample; not attributed at the final sample is the
// final minus the parts; memory outside the GTT has no share of it.
func headlineRow(r split.Report, row split.Row, attributed float64) []string {
	label := row.Labels.Report
	if n := row.Note(r); n != "" {
		label += " (" + n + ")"
	}
	v := row.Of(r)
	switch row.Kind {
	case split.RowOutside:
		c := "—"
		if v != nil {
			c = fmt.Sprintf("%.2f", float64(*v))
		}
		return []string{label, c, "", c, ""}
	case split.RowRest:
		var final *split.MiB
		if r.FinalGTTMiB != nil {
			u := split.MiB(float64(*r.FinalGTTMiB) - attributed)
			final = &u
		}
		return []string{label, cell(v), share(v, r.PeakGTTMiB), cell(final), share(final, r.FinalGTTMiB)}
	}
	return []string{label, cell(v), share(v, r.PeakGTTMiB), cell(v), share(v, r.FinalGTTMiB)}
}

// shares writes the line of the shares under the table: the duplicate, and
// not attributed as a share of the peak.
func shares(b *strings.Builder, r split.Report) {
	dup, _ := split.RowOf("duplicate")
	v := "unknown"
	if r.DuplicatePct != nil {
		v = fmt.Sprintf("%.1f %%", float64(*r.DuplicatePct))
	}
	fmt.Fprintf(b, "\n%s: %s", dup.Labels.Report, v)
	if r.UnattributedPct != nil {
		fmt.Fprintf(b, "; not attributed: %.1f %% of peak", float64(*r.UnattributedPct))
	}
	b.WriteString("\n")
}

// cell is a figure of a table, one decimal; "unknown" for nil.
func cell(v *split.MiB) string {
	if v == nil {
		return "unknown"
	}
	return fmt.Sprintf("%.1f", float64(*v))
}

// share is v as a share of of, "—" when either is unknown or of is 0.
func share(v, of *split.MiB) string {
	if v == nil || of == nil || *of == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f %%", float64(*v)/float64(*of)*100)
}

// provenance is what the report was measured from, a line each: the
// provenance, the control's relation, the inputs and the sampling.
func provenance(r split.Report) []string {
	out := []string{provenanceLine(r)}
	if r.Run.ControlOf != "" {
		out = append(out, fmt.Sprintf("control: this run is the control (the same command with offload off) of run %s; `aggregator compare %s %s` puts the two side by side",
			r.Run.ControlOf, r.Run.ControlOf, or(r.Run.ID, "THIS-RUN")))
	}
	d := r.Detail
	in := fmt.Sprintf("inputs: %d log lines (%d skipped as malformed), %d fdinfo samples (%d fds skipped), %d amdgpu clients at the peak",
		d.LinesRead, d.LinesSkipped, d.Samples, d.FDsSkipped, d.GPUClients)
	if d.PeakKey != "" {
		in += fmt.Sprintf(" (%s)", d.PeakKey)
	}
	out = append(out, in)
	if s := d.Sampling; s != nil {
		out = append(out, fmt.Sprintf("sampling: every %.1f ms, %d samples (%d of them at memory-relevant log lines), largest gap %.1f ms: a peak shorter than that can be missed",
			float64(s.IntervalMs), s.Samples, s.Triggered, float64(s.LargestGapMs)))
	}
	return out
}

// modelLine says what one model load holds, in words.
func modelLine(m split.ModelLoad) string {
	f := func(v *split.MiB) string {
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

func provenanceLine(r split.Report) string {
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
		if t := r.Provenance.SourceCommitTime; t != "" {
			tree += ", committed " + t
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
