package present

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gttsplit/gttsplit/pkg/split"
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
	PeakDiffMiB *split.MiB `json:"peak_diff_mib"`
	// ToleranceMiB is how close the difference must come to a
	// candidate (5 % of the model buffer, at least 64 MiB).
	ToleranceMiB *split.MiB `json:"tolerance_mib"`
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
	Part string     `json:"part"`
	Key  string     `json:"key"` // the report's key
	A    *split.MiB `json:"a_mib"`
	B    *split.MiB `json:"b_mib"`
	Diff *split.MiB `json:"diff_mib"` // A − B; null when either is unknown
}

// compareMinTolerance is the least tolerance of a verdict, in MiB: runtime
// pools and staging buffers of two runs of one command differ by tens of
// MiB.
const compareMinTolerance = 64

// Compare puts a and b side by side and says whether the weights are
// resident once or twice. inputA and inputB are what the user named them
// by (shown in the report).
func Compare(a, b split.Report, inputA, inputB string) Comparison {
	c := Comparison{Schema: CompareSchema, A: side(a, inputA), B: side(b, inputB), Notes: []string{}}
	for _, row := range split.RowsOf(split.RowTotal, split.RowPart, split.RowRest, split.RowOutside) {
		va, vb := row.Compared(a), row.Compared(b)
		c.Rows = append(c.Rows, CompareRow{Part: row.Labels.Report, Key: row.JSON, A: va, B: vb, Diff: row.Diff(va, vb)})
	}
	c.verdict(a, b)
	c.devices(a, b)
	if ca, cb := stripOffload(a.Run.Command), stripOffload(b.Run.Command); ca != "" && cb != "" && ca != cb {
		c.Notes = append(c.Notes, fmt.Sprintf("the two commands differ beyond the offload setting (%q and %q): the difference may hold more than the weights", ca, cb))
	}
	for _, x := range []struct {
		name string
		r    split.Report
	}{{"A", a}, {"B", b}} {
		if !x.r.Run.Complete && (x.r.Run.ID != "" || x.r.Run.Started != "") {
			c.Notes = append(c.Notes, fmt.Sprintf("%s is incomplete: its split may miss data", x.name))
		}
	}
	return c
}

// gpuDevices lists a report's device rows of GPU devices by name.
func gpuDevices(r split.Report) []string {
	var out []string
	for _, d := range r.Devices {
		if d.Kind == split.DeviceGPU {
			out = append(out, d.Name)
		}
	}
	return out
}

// devices compares the runs device by device when both have the same
// devices; otherwise it says why not.
func (c *Comparison) devices(a, b split.Report) {
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
	for _, n := range da {
		c.Devices = append(c.Devices, compareDevice(n, a, b))
	}
	for _, x := range []struct {
		name string
		r    split.Report
	}{{"A", a}, {"B", b}} {
		for _, k := range x.r.Cards {
			if k.Memory == "vram" && len(k.Devices) > 0 {
				c.Notes = append(c.Notes, fmt.Sprintf("%s keeps device buffers in the VRAM of a discrete card (%s): the process GTT peaks do not hold them; compare the devices' card peaks", x.name, k.PDev))
				break
			}
		}
	}
}

// compareDevice is device n of both runs: its rows (split.Row.PerDevice),
// its card's own memory at the peak and not attributed on it.
func compareDevice(n string, a, b split.Report) CompareDevice {
	x, kx := deviceOf(a, n)
	y, ky := deviceOf(b, n)
	cd := CompareDevice{Name: n}
	for _, r := range deviceRows() {
		va, vb := r.OfDevice(x), r.OfDevice(y)
		cd.Rows = append(cd.Rows, CompareRow{Part: r.Labels.Bar, Key: r.DeviceJSON, A: va, B: vb, Diff: r.Diff(va, vb)})
	}
	// The card's figures: its own memory, and the rest of it.
	for _, f := range []struct {
		part, key string
		a, b      *split.MiB
	}{
		{"its card's memory at peak", "card_peak_mib", ownPeak(kx), ownPeak(ky)},
		{"not attributed on its card", "not_attributed_mib", x.NotAttributedMiB, y.NotAttributedMiB},
	} {
		cd.Rows = append(cd.Rows, CompareRow{Part: f.part, Key: f.key, A: f.a, B: f.b, Diff: minus(f.a, f.b)})
	}
	return cd
}

// deviceOf is the GPU device named n of r, and the card it was matched to.
func deviceOf(r split.Report, n string) (split.Device, split.Card) {
	var d split.Device
	for _, x := range r.Devices {
		if x.Kind == split.DeviceGPU && x.Name == n {
			d = x
		}
	}
	for _, k := range r.Cards {
		if k.PDev == d.Card && d.Card != "" {
			return d, k
		}
	}
	return d, split.Card{}
}

// ownPeak is a card's own memory at its peak (nil: none).
func ownPeak(k split.Card) *split.MiB {
	for _, g := range k.Regions {
		if g.Class == k.Memory && k.Memory != "" {
			v := g.PeakMiB
			return &v
		}
	}
	return nil
}

// minus is a − b, nil when either is unknown.
func minus(a, b *split.MiB) *split.MiB {
	if a == nil || b == nil {
		return nil
	}
	d := *a - *b
	return &d
}

func mib(v float64) *split.MiB { m := split.MiB(v); return &m }

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func side(r split.Report, input string) CompareSide {
	return CompareSide{Input: input, RunID: r.Run.ID, Host: r.Run.Host, Lane: r.Run.Lane, Command: r.Run.Command, ControlOf: r.Run.ControlOf}
}

func (c *Comparison) cannot(reason string) {
	c.Verdict = VerdictCannotTell
	c.Words = "cannot tell: " + reason
}

func (c *Comparison) verdict(a, b split.Report) {
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
	ma, mb := split.ModelInGTT(a), split.ModelInGTT(b)
	switch {
	case ma == nil:
		c.cannot(na + " has no model buffer line in its log, so its model buffer is unknown")
		return
	case mb == nil:
		c.cannot(nb + " has no model buffer line in its log, so its model buffer is unknown")
		return
	}
	on, off, onName, offName := a, b, na, nb
	mOn, mOff := float64(*ma), float64(*mb)
	c.Offload, c.A.Role, c.B.Role = "a", "offload", "control"
	if *mb > *ma {
		on, off, onName, offName = b, a, nb, na
		mOn, mOff = float64(*mb), float64(*ma)
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
