package split

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// CompareSchema is the value of Comparison.Schema.
const CompareSchema = "gttsplit.compare.v1"

// Verdicts of a comparison.
const (
	VerdictResidentOnce  = "resident_once"
	VerdictResidentTwice = "resident_twice"
	VerdictCannotTell    = "cannot_tell"
)

// Comparison is two splits side by side: the same command measured with
// the weights offloaded (-ngl 99) and with offload off (-ngl 0, the
// control). The difference of the two peaks is what the weights hold in
// GTT: about one model buffer when they are resident once, model buffer +
// packed copy when they are resident twice.
type Comparison struct {
	Schema string      `json:"schema"`
	A      CompareSide `json:"a"`
	B      CompareSide `json:"b"`
	// Rows are the split's rows of A and B and their difference A − B.
	Rows []CompareRow `json:"rows"`
	// Offload names the side whose weights are in GTT ("a" or "b"), ""
	// when that cannot be told.
	Offload string `json:"offload"`
	// PeakDiffMiB is the offloaded side's peak minus the control's.
	PeakDiffMiB *MiB `json:"peak_diff_mib"`
	// ToleranceMiB is how close the difference must come to a
	// candidate (5 % of the model buffer, at least 64 MiB).
	ToleranceMiB *MiB `json:"tolerance_mib"`
	// Verdict is resident_once, resident_twice or cannot_tell; Words says
	// it in a sentence (with the reason when it cannot tell).
	Verdict string `json:"verdict"`
	Words   string `json:"words"`
	// Notes are caveats that do not change the verdict.
	Notes []string `json:"notes"`
	// Devices compares the runs device by device, when both have a device
	// table with the same devices (in A's order).
	Devices []CompareDevice `json:"devices,omitempty"`
}

// CompareDevice is one device of both runs: its rows, and its card's own
// memory at the peak and not attributed.
type CompareDevice struct {
	Name string       `json:"name"`
	Rows []CompareRow `json:"rows"`
}

// CompareSide names one of the two runs.
type CompareSide struct {
	Input     string `json:"input"` // what the user gave (run id or path)
	RunID     string `json:"run_id"`
	Host      string `json:"host"`
	Lane      string `json:"lane"`
	Command   string `json:"command"`
	ControlOf string `json:"control_of,omitempty"`
	// Role is "offload" (the weights in GTT), "control" (offload off) or
	// "" when that cannot be told.
	Role string `json:"role"`
}

// CompareRow is one row of both splits.
type CompareRow struct {
	Part string `json:"part"`
	Key  string `json:"key"` // the report's key
	A    *MiB   `json:"a_mib"`
	B    *MiB   `json:"b_mib"`
	Diff *MiB   `json:"diff_mib"` // A − B; null when either is unknown
}

// compareMinTolerance is the least tolerance of a verdict, in MiB: runtime
// pools and staging buffers of two runs of one command differ by tens of
// MiB.
const compareMinTolerance = 64

// Compare puts a and b side by side and says whether the weights are
// resident once or twice. inputA and inputB are what the user named them
// by (shown in the report).
func Compare(a, b Report, inputA, inputB string) Comparison {
	c := Comparison{Schema: CompareSchema, A: side(a, inputA), B: side(b, inputB), Notes: []string{}}
	add := func(part, key string, va, vb *MiB) {
		r := CompareRow{Part: part, Key: key, A: va, B: vb}
		if va != nil && vb != nil {
			d := *va - *vb
			r.Diff = &d
		}
		c.Rows = append(c.Rows, r)
	}
	add("process GTT at peak (fdinfo)", "peak_gtt_mib", a.PeakGTTMiB, b.PeakGTTMiB)
	add("process GTT at final (fdinfo)", "final_gtt_mib", a.FinalGTTMiB, b.FinalGTTMiB)
	// A load whose model buffers are all host memory holds 0 in GTT.
	asMiB := func(v *float64) *MiB {
		if v == nil {
			return nil
		}
		return mib(*v)
	}
	add("loader's model buffer", "model_gtt_mib", asMiB(modelInGTT(a)), asMiB(modelInGTT(b)))
	add("packed copies", "packed_mib", a.PackedMiB, b.PackedMiB)
	add("KV + state", "state_mib", a.StateMiB, b.StateMiB)
	add("compute + output", "compute_mib", a.ComputeMiB, b.ComputeMiB)
	add("not attributed", "unattributed_mib", a.UnattributedMiB, b.UnattributedMiB)
	add("CPU model buffer (not in GTT)", "model_host_mib", a.ModelHostMiB, b.ModelHostMiB)
	c.verdict(a, b)
	c.devices(a, b)
	if ca, cb := stripOffload(a.Run.Command), stripOffload(b.Run.Command); ca != "" && cb != "" && ca != cb {
		c.Notes = append(c.Notes, fmt.Sprintf("the two commands differ beyond the offload setting (%q and %q): the difference may hold more than the weights", ca, cb))
	}
	for _, x := range []struct {
		name string
		r    Report
	}{{"A", a}, {"B", b}} {
		if !x.r.Run.Complete && (x.r.Run.ID != "" || x.r.Run.Started != "") {
			c.Notes = append(c.Notes, fmt.Sprintf("%s is incomplete: its split may miss data", x.name))
		}
	}
	return c
}

// gpuDevices lists a report's device rows of GPU devices by name.
func gpuDevices(r Report) []string {
	var out []string
	for _, d := range r.Devices {
		if d.Kind == DeviceGPU {
			out = append(out, d.Name)
		}
	}
	return out
}

// devices compares the runs device by device when both have the same
// devices; otherwise it says why not.
func (c *Comparison) devices(a, b Report) {
	da, db := gpuDevices(a), gpuDevices(b)
	if len(da) == 0 && len(db) == 0 {
		return
	}
	sa, sb := slices.Clone(da), slices.Clone(db)
	slices.Sort(sa)
	slices.Sort(sb)
	if !slices.Equal(sa, sb) {
		c.Notes = append(c.Notes, fmt.Sprintf("the runs' devices differ (A: %s; B: %s): compared as totals only", orNone(da), orNone(db)))
		return
	}
	byName := func(r Report, n string) (Device, Card) {
		var d Device
		for _, x := range r.Devices {
			if x.Kind == DeviceGPU && x.Name == n {
				d = x
			}
		}
		for _, k := range r.Cards {
			if k.PDev == d.Card && d.Card != "" {
				return d, k
			}
		}
		return d, Card{}
	}
	own := func(k Card) *MiB {
		for _, g := range k.Regions {
			if g.Class == k.Memory && k.Memory != "" {
				v := g.PeakMiB
				return &v
			}
		}
		return nil
	}
	row := func(part, key string, va, vb *MiB) CompareRow {
		r := CompareRow{Part: part, Key: key, A: va, B: vb}
		if va != nil && vb != nil {
			d := *va - *vb
			r.Diff = &d
		}
		return r
	}
	for _, n := range da {
		x, kx := byName(a, n)
		y, ky := byName(b, n)
		cd := CompareDevice{Name: n}
		cd.Rows = append(cd.Rows,
			row("model buffer", "model_mib", x.ModelMiB, y.ModelMiB),
			row("KV + state", "state_mib", x.StateMiB, y.StateMiB),
			row("compute + output", "compute_mib", x.ComputeMiB, y.ComputeMiB),
			row("its card's memory at peak", "card_peak_mib", own(kx), own(ky)),
			row("not attributed on its card", "not_attributed_mib", x.NotAttributedMiB, y.NotAttributedMiB))
		c.Devices = append(c.Devices, cd)
	}
	for _, x := range []struct {
		name string
		r    Report
	}{{"A", a}, {"B", b}} {
		for _, k := range x.r.Cards {
			if k.Memory == "vram" && len(k.Devices) > 0 {
				c.Notes = append(c.Notes, fmt.Sprintf("%s keeps device buffers in the VRAM of a discrete card (%s): the process GTT peaks do not hold them; compare the devices' card peaks", x.name, k.PDev))
				break
			}
		}
	}
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// modelInGTT is the model buffer a run holds in GTT: its model row, else 0
// when its model buffers are all host memory (offload off), else nil.
func modelInGTT(r Report) *float64 {
	var v float64
	switch {
	case r.ModelGTTMiB != nil:
		v = float64(*r.ModelGTTMiB)
	case r.ModelHostMiB != nil:
		v = 0
	default:
		return nil
	}
	return &v
}

func side(r Report, input string) CompareSide {
	return CompareSide{Input: input, RunID: r.Run.ID, Host: r.Run.Host, Lane: r.Run.Lane, Command: r.Run.Command, ControlOf: r.Run.ControlOf}
}

func (c *Comparison) cannot(reason string) {
	c.Verdict = VerdictCannotTell
	c.Words = "cannot tell: " + reason
}

func (c *Comparison) verdict(a, b Report) {
	name := func(s CompareSide, which string) string {
		if s.RunID != "" {
			return which + " (" + s.RunID + ")"
		}
		return which
	}
	na, nb := name(c.A, "A"), name(c.B, "B")
	switch {
	case a.PeakGTTMiB == nil && b.PeakGTTMiB == nil:
		c.cannot("neither run has a process peak (no fdinfo samples with an amdgpu client)")
		return
	case a.PeakGTTMiB == nil:
		c.cannot(na + " has no process peak (no fdinfo samples with an amdgpu client)")
		return
	case b.PeakGTTMiB == nil:
		c.cannot(nb + " has no process peak (no fdinfo samples with an amdgpu client)")
		return
	}
	ma, mb := modelInGTT(a), modelInGTT(b)
	switch {
	case ma == nil:
		c.cannot(na + " has no model buffer line in its log, so its model buffer is unknown")
		return
	case mb == nil:
		c.cannot(nb + " has no model buffer line in its log, so its model buffer is unknown")
		return
	}
	on, off, onName, offName := a, b, na, nb
	mOn, mOff := *ma, *mb
	c.Offload, c.A.Role, c.B.Role = "a", "offload", "control"
	if *mb > *ma {
		on, off, onName, offName = b, a, nb, na
		mOn, mOff = *mb, *ma
		c.Offload, c.A.Role, c.B.Role = "b", "control", "offload"
	}
	m := mOn
	if m <= 0 {
		c.Offload, c.A.Role, c.B.Role = "", "", ""
		c.cannot("neither run holds its model buffer in GTT: compare a run with offload (-ngl 99) with its control (-ngl 0)")
		return
	}
	if off := mOff; off > 0.05*m {
		c.Offload, c.A.Role, c.B.Role = "", "", ""
		c.cannot(fmt.Sprintf("both runs hold a model buffer in GTT (%.1f and %.1f MiB): the control must run with offload off (-ngl 0)", m, off))
		return
	}
	d := float64(*on.PeakGTTMiB) - float64(*off.PeakGTTMiB)
	tol := math.Max(0.05*m, compareMinTolerance)
	c.PeakDiffMiB, c.ToleranceMiB = mib(d), mib(tol)
	diff := fmt.Sprintf("the difference of the peaks is %.1f MiB", d)
	once := math.Abs(d - m)
	if on.PackedMiB == nil {
		if once <= tol {
			c.Verdict = VerdictResidentOnce
			c.Words = fmt.Sprintf("resident once: %s ≈ model buffer (%.1f MiB); %s has no host-weight trace, so a packed copy is not known", diff, m, onName)
			return
		}
		c.cannot(fmt.Sprintf("%s, not ≈ the model buffer (%.1f MiB ± %.0f), and %s has no host-weight trace (packed copy unknown)", diff, m, tol, onName))
		return
	}
	p := float64(*on.PackedMiB)
	twice := math.Abs(d - (m + p))
	switch {
	case p <= tol && once <= tol:
		c.Verdict = VerdictResidentOnce
		c.Words = fmt.Sprintf("resident once: %s ≈ model buffer (%.1f MiB); the packed copy (%.1f MiB) is within the tolerance", diff, m, p)
	case twice <= tol && twice < once:
		c.Verdict = VerdictResidentTwice
		c.Words = fmt.Sprintf("weights resident twice: %s ≈ model buffer + packed copy (%.1f + %.1f = %.1f MiB)", diff, m, p, m+p)
	case once <= tol && once < twice:
		c.Verdict = VerdictResidentOnce
		c.Words = fmt.Sprintf("resident once: %s ≈ model buffer (%.1f MiB), not model buffer + packed copy (%.1f MiB)", diff, m, m+p)
	default:
		c.cannot(fmt.Sprintf("%s, neither ≈ the model buffer (%.1f MiB) nor ≈ model buffer + packed copy (%.1f MiB), within ± %.0f MiB; %s is the control",
			diff, m, m+p, tol, offName))
	}
}

// stripOffload removes the offload setting (-ngl N, --n-gpu-layers N,
// --gpu-layers N, -ngl=N) and the -v that collector run appends from a
// command, so two runs of one command compare equal.
func stripOffload(cmd string) string {
	f := strings.Fields(cmd)
	var out []string
	for i := 0; i < len(f); i++ {
		switch x := f[i]; {
		case x == "-ngl" || x == "--n-gpu-layers" || x == "--gpu-layers":
			i++
		case strings.HasPrefix(x, "-ngl=") || strings.HasPrefix(x, "--n-gpu-layers=") || strings.HasPrefix(x, "--gpu-layers="):
		default:
			out = append(out, x)
		}
	}
	return strings.Join(out, " ")
}

// CompareJSON renders a comparison as indented JSON with a final newline.
func CompareJSON(c Comparison) ([]byte, error) {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// CompareText renders a comparison for a terminal.
func CompareText(c Comparison) string { return renderCompare(c, false) }

// CompareMarkdown renders a comparison as Markdown (a tracker comment).
func CompareMarkdown(c Comparison) string { return renderCompare(c, true) }

func renderCompare(c Comparison, md bool) string {
	var b strings.Builder
	title := "gttsplit: control comparison"
	if md {
		fmt.Fprintf(&b, "### %s\n\n", title)
	} else {
		fmt.Fprintf(&b, "%s\n\n", title)
	}
	for _, s := range []struct {
		name string
		s    CompareSide
	}{{"A", c.A}, {"B", c.B}} {
		id := s.s.RunID
		if id == "" {
			id = s.s.Input
		}
		role := ""
		switch s.s.Role {
		case "offload":
			role = " (weights in GTT)"
		case "control":
			role = " (the control: offload off)"
		}
		cmd := s.s.Command
		if cmd == "" {
			cmd = "command unknown"
		} else {
			cmd = quoteCmd(cmd)
		}
		if md {
			fmt.Fprintf(&b, "- **%s**: `%s`%s: %s\n", s.name, strings.ReplaceAll(id, "`", "'"), role, cmd)
		} else {
			fmt.Fprintf(&b, "%s: %s%s: %s\n", s.name, id, role, cmd)
		}
	}
	b.WriteString("\n")
	cell := func(v *MiB) string {
		if v == nil {
			return "unknown"
		}
		return fmt.Sprintf("%.1f", float64(*v))
	}
	diffCell := func(v *MiB) string {
		if v == nil {
			return "—"
		}
		return fmt.Sprintf("%+.1f", float64(*v))
	}
	var rows [][]string
	for _, r := range c.Rows {
		rows = append(rows, []string{r.Part, cell(r.A), cell(r.B), diffCell(r.Diff)})
	}
	writeTable(&b, md, []string{"part", "A MiB", "B MiB", "A − B MiB"}, rows)
	if len(c.Devices) > 0 {
		var drows [][]string
		for _, d := range c.Devices {
			for _, r := range d.Rows {
				drows = append(drows, []string{d.Name, r.Part, cell(r.A), cell(r.B), diffCell(r.Diff)})
			}
		}
		b.WriteString("\n")
		writeTable(&b, md, []string{"device", "part", "A MiB", "B MiB", "A − B MiB"}, drows)
	}
	if md {
		fmt.Fprintf(&b, "\n**Verdict**: %s\n", c.Words)
	} else {
		fmt.Fprintf(&b, "\nverdict: %s\n", c.Words)
	}
	for _, n := range c.Notes {
		fmt.Fprintf(&b, "- note: %s\n", n)
	}
	return b.String()
}
