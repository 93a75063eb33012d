package present

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// BarWidth is the width, in characters, of the text bar of a split.
const BarWidth = 50

// notKnownYet is the legend of the rest of a bar while the report's not
// attributed is unknown (a run in progress whose model load is not read
// yet).
const notKnownYet = "(blank: not known yet)"

// BarPart is one segment of the split at peak or at final, in the order
// the bars and the charts draw them: the rows of kind split.RowPart, then
// split.RowRest.
type BarPart struct {
	Key   string // the row's key: model, packed, state, compute, unattributed
	Label string // the row's Labels.Bar
	Glyph string // the text bar's character
	MiB   float64
	// Unknown says the row is unknown (drawn as 0).
	Unknown bool
}

// barPart is a row's segment.
func barPart(row split.Row, v *split.MiB) BarPart {
	return BarPart{Key: row.Key, Label: row.Labels.Bar, Glyph: row.Glyph, MiB: val(v), Unknown: v == nil}
}

// restRow is the row of the bars' rest (not attributed).
func restRow() split.Row { return split.RowsOf(split.RowRest)[0] }

func val(m *split.MiB) float64 {
	if m == nil {
		return 0
	}
	return float64(*m)
}

// BarParts returns the segments of the split at the peak and at the final
// sample (the rows, then not attributed), and the totals they are drawn
// against; ok is false when the peak is unknown. Unknown rows count 0.
// When the rows add up to more than the total, the bar is drawn against
// their sum and not attributed is 0. The rest is marked Unknown while the
// report's not attributed is (a run in progress whose model load is not
// read yet): it is then the part not known yet, not memory unaccounted.
func BarParts(r split.Report) (peak, final []BarPart, peakTotal, finalTotal float64, ok bool) {
	if r.PeakGTTMiB == nil {
		return nil, nil, 0, 0, false
	}
	var rows []BarPart
	attributed := 0.0
	for _, row := range split.RowsOf(split.RowPart) {
		p := barPart(row, row.Of(r))
		rows = append(rows, p)
		attributed += p.MiB
	}
	rest := restRow()
	with := func(total float64) []BarPart {
		p := barPart(rest, rest.Of(r))
		p.MiB = math.Max(0, total-attributed)
		return append(slices.Clone(rows), p)
	}
	peakTotal = val(r.PeakGTTMiB)
	peak = with(peakTotal)
	finalTotal = peakTotal
	if r.FinalGTTMiB != nil {
		finalTotal = val(r.FinalGTTMiB)
	}
	final = with(finalTotal)
	return peak, final, math.Max(peakTotal, attributed), math.Max(finalTotal, attributed), true
}

// textBar draws parts as BarWidth characters, each segment's length
// rounded so that the lengths add up to the width (largest remainder).
func textBar(parts []BarPart, total float64) string {
	if total <= 0 {
		return strings.Repeat(" ", BarWidth)
	}
	n := make([]int, len(parts))
	rem := make([]float64, len(parts))
	used := 0
	for i, p := range parts {
		x := p.MiB / total * BarWidth
		n[i] = int(math.Floor(x))
		rem[i] = x - float64(n[i])
		used += n[i]
	}
	for used < BarWidth {
		best := -1
		for i := range parts {
			if parts[i].MiB > 0 && (best < 0 || rem[i] > rem[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		n[best]++
		rem[best] = -1
		used++
	}
	var b strings.Builder
	for i, p := range parts {
		g := p.Glyph
		if p.Unknown {
			g = " "
		}
		b.WriteString(strings.Repeat(g, n[i]))
	}
	b.WriteString(strings.Repeat(" ", BarWidth-used))
	return b.String()
}

// legend is the text bars' legend of parts: each glyph and label, the
// rest "not known yet" while it is unknown.
func legend(parts []BarPart) string {
	var out []string
	for _, p := range parts {
		if p.Key == restRow().Key && p.Unknown {
			out = append(out, notKnownYet)
			continue
		}
		out = append(out, p.Glyph+" "+p.Label)
	}
	return strings.Join(out, "  ")
}

// TextBars is the compact text bar of the split at peak and at final, with
// its legend (a code block of the Markdown report), or "" when the peak is
// unknown.
func TextBars(r split.Report) string {
	peak, final, pt, ft, ok := BarParts(r)
	if !ok {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "peak  [%s] %.1f MiB\n", textBar(peak, pt), float64(*r.PeakGTTMiB))
	if r.FinalGTTMiB != nil {
		fmt.Fprintf(&b, "final [%s] %.1f MiB\n", textBar(final, ft), float64(*r.FinalGTTMiB))
	}
	fmt.Fprintf(&b, "       %s\n", legend(peak))
	return b.String()
}

// DeviceBar is the split of one card's own memory at its peak among its
// devices' rows (or, for a device matched to no card, of its rows alone),
// in the order and with the keys of BarParts.
type DeviceBar struct {
	// Label names the device(s) and the card: "CUDA0 · 0000:01:00.0 VRAM".
	Label string
	Parts []BarPart
	// Total is what the bar is drawn against: the card's own memory at
	// its peak (or the rows' sum when that is more), or the rows' sum
	// for a device with no card.
	Total float64
	// Measured says Total is a card's measured peak.
	Measured bool
}

// DeviceBars returns a bar per card with devices and per device matched
// to no card, in the device table's order; none when the report has no
// device table.
func DeviceBars(r split.Report) []DeviceBar {
	var out []DeviceBar
	done := map[string]bool{}
	for _, d := range r.Devices {
		switch {
		case d.Kind != split.DeviceGPU || done[d.Card]:
		case d.Card == "":
			out = append(out, deviceBar(d))
		default:
			done[d.Card] = true
			if i := slices.IndexFunc(r.Cards, func(k split.Card) bool { return k.PDev == d.Card }); i >= 0 {
				out = append(out, cardBar(r.Cards[i]))
			}
		}
	}
	return out
}

// deviceBar is the bar of a device matched to no card: its rows, drawn
// against their sum.
func deviceBar(d split.Device) DeviceBar {
	bar := DeviceBar{Label: d.Name + " · no card"}
	for _, row := range split.RowsOf(split.RowPart) {
		if row.PerDevice() {
			p := barPart(row, row.OfDevice(d))
			bar.Parts = append(bar.Parts, p)
			bar.Total += p.MiB
		}
	}
	return bar
}

// cardBar is the bar of a card: its own memory at its peak, split among
// what the log attributes to it by row and the rest.
func cardBar(k split.Card) DeviceBar {
	peak := 0.0
	for _, g := range k.Regions {
		if g.Class == k.Memory {
			peak = float64(g.PeakMiB)
		}
	}
	var parts []BarPart
	attributed := 0.0
	for _, row := range split.RowsOf(split.RowPart) {
		if row.PerCard() {
			p := barPart(row, row.OfCard(k))
			p.Unknown = false // a card's unknown row is drawn as 0
			parts = append(parts, p)
			attributed += p.MiB
		}
	}
	rest := barPart(restRow(), nil)
	rest.MiB, rest.Unknown = math.Max(0, peak-attributed), false
	return DeviceBar{Label: strings.Join(k.Devices, ", ") + " · " + k.PDev + " " + strings.ToUpper(k.Memory),
		Parts: append(parts, rest), Total: math.Max(peak, attributed), Measured: true}
}

// deviceTextBars is the text bar of each DeviceBar, with the legend, or
// "" when there is none.
func deviceTextBars(r split.Report) string {
	bars := DeviceBars(r)
	if len(bars) == 0 {
		return ""
	}
	w := 0
	for _, d := range bars {
		w = max(w, len([]rune(d.Label)))
	}
	var b strings.Builder
	for _, d := range bars {
		pad := strings.Repeat(" ", w-len([]rune(d.Label)))
		what := "of the card at its peak"
		if !d.Measured {
			what = "its rows, no card"
		}
		fmt.Fprintf(&b, "%s%s [%s] %.1f MiB %s\n", d.Label, pad, textBar(d.Parts, d.Total), d.Total, what)
	}
	var parts []BarPart
	for _, row := range split.RowsOf(split.RowPart, split.RowRest) {
		parts = append(parts, BarPart{Key: row.Key, Label: row.Labels.Bar, Glyph: row.Glyph})
	}
	fmt.Fprintf(&b, "%s  %s\n", strings.Repeat(" ", w), legend(parts))
	return b.String()
}
