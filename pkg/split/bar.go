package split

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// BarWidth is the width, in characters, of the text bar of a split.
const BarWidth = 50

// BarPart is one segment of the split at peak or at final, in the order
// the bars and the charts draw them.
type BarPart struct {
	Key   string // model, packed, state, compute, unattributed
	Label string
	Glyph string // the text bar's character
	MiB   float64
	// Unknown says the row is unknown (drawn as 0).
	Unknown bool
}

// BarParts returns the segments of the split at the peak and at the final
// sample (the rows, then not attributed), and the totals they are drawn
// against; ok is false when the peak is unknown. Unknown rows count 0.
// When the rows add up to more than the total, the bar is drawn against
// their sum and not attributed is 0. The rest is marked Unknown while the
// report's not attributed is (a run in progress whose model load is not
// read yet): it is then the part not known yet, not memory unaccounted.
func BarParts(r Report) (peak, final []BarPart, peakTotal, finalTotal float64, ok bool) {
	if r.PeakGTTMiB == nil {
		return nil, nil, 0, 0, false
	}
	v := func(m *MiB) float64 {
		if m == nil {
			return 0
		}
		return float64(*m)
	}
	rows := []BarPart{
		{Key: "model", Label: "model buffer", Glyph: "█", MiB: v(r.ModelGTTMiB), Unknown: r.ModelGTTMiB == nil},
		{Key: "packed", Label: "packed copies", Glyph: "▓", MiB: v(r.PackedMiB), Unknown: r.PackedMiB == nil},
		{Key: "state", Label: "KV + state", Glyph: "▒", MiB: v(r.StateMiB), Unknown: r.StateMiB == nil},
		{Key: "compute", Label: "compute + output", Glyph: "░", MiB: v(r.ComputeMiB), Unknown: r.ComputeMiB == nil},
	}
	attributed := 0.0
	for _, x := range rows {
		attributed += x.MiB
	}
	with := func(total float64) []BarPart {
		out := append([]BarPart(nil), rows...)
		return append(out, BarPart{Key: "unattributed", Label: "not attributed", Glyph: "·", MiB: math.Max(0, total-attributed),
			Unknown: r.UnattributedMiB == nil})
	}
	peakTotal = v(r.PeakGTTMiB)
	peak = with(peakTotal)
	finalTotal = peakTotal
	if r.FinalGTTMiB != nil {
		finalTotal = v(r.FinalGTTMiB)
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

// TextBars is the compact text bar of the split at peak and at final, with
// its legend (a code block of the Markdown report), or "" when the peak is
// unknown.
func TextBars(r Report) string {
	peak, final, pt, ft, ok := BarParts(r)
	if !ok {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "peak  [%s] %.1f MiB\n", textBar(peak, pt), float64(*r.PeakGTTMiB))
	if r.FinalGTTMiB != nil {
		fmt.Fprintf(&b, "final [%s] %.1f MiB\n", textBar(final, ft), float64(*r.FinalGTTMiB))
	}
	var legend []string
	for _, p := range peak {
		if p.Key == "unattributed" && p.Unknown {
			legend = append(legend, "(blank: not known yet)")
			continue
		}
		legend = append(legend, p.Glyph+" "+p.Label)
	}
	fmt.Fprintf(&b, "       %s\n", strings.Join(legend, "  "))
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
func DeviceBars(r Report) []DeviceBar {
	v := func(m *MiB) float64 {
		if m == nil {
			return 0
		}
		return float64(*m)
	}
	var out []DeviceBar
	done := map[string]bool{}
	for _, d := range r.Devices {
		if d.Kind != DeviceGPU {
			continue
		}
		if d.Card == "" {
			parts := []BarPart{
				{Key: "model", Label: "model buffer", Glyph: "█", MiB: v(d.ModelMiB), Unknown: d.ModelMiB == nil},
				{Key: "state", Label: "KV + state", Glyph: "▒", MiB: v(d.StateMiB), Unknown: d.StateMiB == nil},
				{Key: "compute", Label: "compute + output", Glyph: "░", MiB: v(d.ComputeMiB), Unknown: d.ComputeMiB == nil},
			}
			out = append(out, DeviceBar{Label: d.Name + " · no card", Parts: parts, Total: v(d.ModelMiB) + v(d.StateMiB) + v(d.ComputeMiB)})
			continue
		}
		if done[d.Card] {
			continue
		}
		done[d.Card] = true
		i := slices.IndexFunc(r.Cards, func(k Card) bool { return k.PDev == d.Card })
		if i < 0 {
			continue
		}
		k := r.Cards[i]
		model, state, comp, packed := v(k.ModelMiB), v(k.StateMiB), v(k.ComputeMiB), v(k.PackedMiB)
		peak := 0.0
		for _, g := range k.Regions {
			if g.Class == k.Memory {
				peak = float64(g.PeakMiB)
			}
		}
		attributed := model + packed + state + comp
		parts := []BarPart{
			{Key: "model", Label: "model buffer", Glyph: "█", MiB: model},
			{Key: "packed", Label: "packed copies", Glyph: "▓", MiB: packed},
			{Key: "state", Label: "KV + state", Glyph: "▒", MiB: state},
			{Key: "compute", Label: "compute + output", Glyph: "░", MiB: comp},
			{Key: "unattributed", Label: "not attributed", Glyph: "·", MiB: math.Max(0, peak-attributed)},
		}
		out = append(out, DeviceBar{Label: strings.Join(k.Devices, ", ") + " · " + k.PDev + " " + strings.ToUpper(k.Memory),
			Parts: parts, Total: math.Max(peak, attributed), Measured: true})
	}
	return out
}

// deviceTextBars is the text bar of each DeviceBar, with the legend, or
// "" when there is none.
func deviceTextBars(r Report) string {
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
	var legend []string
	for _, p := range []BarPart{{Glyph: "█", Label: "model buffer"}, {Glyph: "▓", Label: "packed copies"}, {Glyph: "▒", Label: "KV + state"}, {Glyph: "░", Label: "compute + output"}, {Glyph: "·", Label: "not attributed"}} {
		legend = append(legend, p.Glyph+" "+p.Label)
	}
	fmt.Fprintf(&b, "%s  %s\n", strings.Repeat(" ", w), strings.Join(legend, "  "))
	return b.String()
}
