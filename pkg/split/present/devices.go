package present

import (
	"fmt"
	"strings"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// renderDevices writes the device table, a line per device the log
// describes or that is not matched, a line per card, and (Markdown) a
// bar per card with devices.
func renderDevices(d *doc, r split.Report) {
	cards := map[string]split.Card{}
	for _, k := range r.Cards {
		cards[k.PDev] = k
	}
	perDevice := deviceRows()
	header := []string{"device"}
	for _, row := range perDevice {
		header = append(header, row.Labels.Device)
	}
	header = append(header, "card", "card memory at peak", "not attributed")
	var rows [][]string
	for _, dev := range r.Devices {
		line := []string{dev.Name}
		for _, row := range perDevice {
			line = append(line, cell(row.OfDevice(dev)))
		}
		card, mem, un := deviceCard(dev, cards)
		rows = append(rows, append(line, card, mem, un))
	}
	writeTable(&d.b, d.md, header, rows)
	d.bars(deviceTextBars(r))
	var lines []string
	for _, dev := range r.Devices {
		if what := deviceWhat(dev); len(what) > 0 {
			lines = append(lines, fmt.Sprintf("- %s: %s\n", dev.Name, strings.Join(what, "; ")))
		}
	}
	for _, k := range r.Cards {
		lines = append(lines, fmt.Sprintf("- card %s\n", cardLine(k)))
	}
	if len(lines) > 0 {
		d.b.WriteString("\n" + strings.Join(lines, ""))
	}
}

// deviceRows are the rows the device table splits by device.
func deviceRows() []split.Row {
	var out []split.Row
	for _, row := range split.Rows {
		if row.PerDevice() {
			out = append(out, row)
		}
	}
	return out
}

// deviceCard is a device row's card columns: where its memory is, its
// card's own memory at the peak, and its card's not attributed.
func deviceCard(d split.Device, cards map[string]split.Card) (card, mem, un string) {
	switch d.Kind {
	case split.DeviceHost:
		return "host memory (not GPU)", "", ""
	case split.DevicePinned:
		return "pinned host memory (GTT)", "", ""
	case split.DeviceRemote:
		return "remote (another host)", "", ""
	case split.DeviceSplit:
		if len(d.Spans) == 0 {
			return "split", "", ""
		}
		return "split over " + strings.Join(d.Spans, ", "), "", ""
	}
	card = "—"
	if d.Unmatched != "" {
		card = "not matched"
	}
	if d.Card != "" {
		card = d.Card
		if d.Match == "order" {
			card += " (by order)"
		}
		if k, ok := cards[d.Card]; ok {
			mem = cardMemory(k)
		}
	}
	if d.NotAttributedMiB != nil {
		un = cell(d.NotAttributedMiB)
		if d.NotAttributedPct != nil {
			un += fmt.Sprintf(" (%.1f %%)", float64(*d.NotAttributedPct))
		}
	}
	return card, mem, un
}

// cardMemory is a card's own memory at its peak, and GTT beside a discrete
// card's VRAM (spill, pinned buffers): "VRAM 10842.0, GTT 106.0".
func cardMemory(k split.Card) string {
	if k.Memory == "" {
		return ""
	}
	var parts []string
	for _, g := range k.Regions {
		if g.Class == k.Memory || k.Memory == "vram" && g.Class == "gtt" {
			parts = append(parts, fmt.Sprintf("%s %.1f", strings.ToUpper(g.Class), float64(g.PeakMiB)))
		}
	}
	return strings.Join(parts, ", ")
}

// deviceWhat is what the log says of a device, and how it was matched to
// its card (or why not).
func deviceWhat(d split.Device) []string {
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
	return what
}

// cardLine says what one card held, in words.
func cardLine(k split.Card) string {
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
