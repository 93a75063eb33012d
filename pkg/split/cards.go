package split

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// The report's cards: the folded memory per card (cardmem.go) as cards,
// the device table's devices matched to them, and what each card holds
// against its devices' rows (docs/accounting.md rules 17 and 18).

// cardRow is a card of the report being built.
type cardRow struct {
	Card
	peak  [NumMemClasses]float64 // MiB
	have  uint8                  // classes with a figure
	devs  []*devRow
	split []*devRow // split rows spread over this card and others
	over  bool      // its devices add up to more than its own memory held
}

// held reports whether the process held memory of the card's own kinds
// (VRAM or GTT) at some tick.
func (k *cardRow) held() bool { return k.peak[MemVRAM] > 0 || k.peak[MemGTT] > 0 }

// cardRows turns the folded memory per card into the report's cards.
func cardRows(ts *tickState) []*cardRow {
	var out []*cardRow
	for _, m := range ts.Mem {
		var k *cardRow
		if n := len(out); n > 0 && out[n-1].PDev == m.PDev && out[n-1].Driver == m.Driver {
			k = out[n-1]
		} else {
			k = &cardRow{Card: Card{PDev: m.PDev, Driver: m.Driver, Devices: []string{}}}
			out = append(out, k)
		}
		cl := slices.Index(MemClassName[:], m.Class)
		if cl < 0 {
			continue
		}
		k.peak[cl] = float64(m.Peak) / bytesPerMiB
		k.have |= 1 << cl
		k.Clients = m.Clients
		reg := CardRegion{Class: m.Class, Regions: m.Regions, Resident: m.Resident,
			PeakMiB: MiB(float64(m.Peak) / bytesPerMiB), FinalMiB: MiB(float64(m.Final) / bytesPerMiB)}
		if !m.PeakT.IsZero() {
			reg.PeakAt = m.PeakT.UTC().Format(time.RFC3339Nano)
		}
		if !m.FinalT.IsZero() {
			reg.FinalAt = m.FinalT.UTC().Format(time.RFC3339Nano)
		}
		k.Regions = append(k.Regions, reg)
	}
	return out
}

// normPCI is a PCI address as drm-pdev prints it (lower case, with its
// domain), or "" when s is not one ("unknown id", a UUID).
func normPCI(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if len(s) == 7 {
		s = "0000:" + s
	}
	if len(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return ""
	}
	for i, c := range []byte(s) {
		if i == 4 || i == 7 || i == 10 {
			continue
		}
		if !isDigit(c) && (c < 'a' || c > 'f') {
			return ""
		}
	}
	return s
}

// cardDrivers are the DRM drivers a backend's devices can be on, for a
// match by order: none for backends whose driver prints no memory in
// fdinfo (CUDA, MUSA, CANN, Metal); any for a backend gttsplit does not
// know.
func cardDrivers(family string) []string {
	switch family {
	case "ROCm", "HIP", "HRX":
		return []string{"amdgpu"}
	case "CUDA", "MUSA", "CANN", "Metal", "MTL", "BLAS":
		return []string{}
	}
	return nil // any
}

func canBeOn(family, driver string) bool {
	d := cardDrivers(family)
	return d == nil || slices.Contains(d, driver)
}

// matchDevices matches the device rows to the cards: by the PCI address
// the log prints; the devices that print none, by their order against the
// cards the process held memory on and no device named, when both are
// as many and the devices are of one backend (an assumption, said); the
// rest stay unmatched, each with the reason. It returns the warnings.
func matchDevices(devs []*devRow, cards []*cardRow) (order []string) {
	byPDev := map[string]*cardRow{}
	for _, k := range cards {
		byPDev[strings.ToLower(k.PDev)] = k
	}
	var loose []*devRow
	for _, r := range devs {
		if r.Kind != DeviceGPU {
			continue
		}
		if pci := normPCI(r.PCI); pci != "" {
			if k := byPDev[pci]; k != nil {
				r.Card, r.Match, r.cardRow = k.PDev, "pci", k
				k.devs = append(k.devs, r)
				continue
			}
			r.Unmatched = fmt.Sprintf("the log names its PCI address %s and no sampled card has that drm-pdev (its driver prints no memory in fdinfo, or the process held none of it)", pci)
			continue
		}
		loose = append(loose, r)
	}
	if len(loose) == 0 {
		return nil
	}
	var free []*cardRow
	for _, k := range cards {
		if len(k.devs) == 0 && k.held() && canBeOn(loose[0].family, k.Driver) {
			free = append(free, k)
		}
	}
	sameFamily := !slices.ContainsFunc(loose, func(r *devRow) bool { return r.family != loose[0].family })
	switch {
	case cardDrivers(loose[0].family) != nil && len(cardDrivers(loose[0].family)) == 0 && sameFamily:
		for _, r := range loose {
			r.Unmatched = fmt.Sprintf("the log prints no PCI address for it, and %s devices have no memory statistics in fdinfo", r.family)
		}
	case !sameFamily:
		for _, r := range loose {
			r.Unmatched = "the log prints no PCI address, and devices of several backends cannot be matched to cards by their order"
		}
	case len(free) != len(loose):
		for _, r := range loose {
			r.Unmatched = fmt.Sprintf("the log prints no PCI address, and %d such devices cannot be matched by order to the %d cards the process held memory on with no device named", len(loose), len(free))
		}
	default:
		sort.SliceStable(loose, func(i, j int) bool { return loose[i].index < loose[j].index })
		sort.SliceStable(free, func(i, j int) bool { return free[i].PDev < free[j].PDev })
		var pairs []string
		for i, r := range loose {
			r.Card, r.Match, r.cardRow = free[i].PDev, "order", free[i]
			free[i].devs = append(free[i].devs, r)
			pairs = append(pairs, r.Name+" = "+free[i].PDev)
		}
		order = append(order, fmt.Sprintf("the log prints no PCI address for its devices: they are matched to the cards by their order (%s), assuming the backend numbers its devices in the order of their PCI addresses, as ROCm and Vulkan do by default (HIP_VISIBLE_DEVICES or a Vulkan device order can change it)", strings.Join(pairs, ", ")))
	}
	return order
}

// deviceCards matches the device table to the cards of the samples, says
// per card what the log attributes to its own memory and what is not
// attributed, checks that no card holds less than its devices' buffers,
// and puts the table in the report when it says more than the headline
// (docs/accounting.md rules 16 to 18).
func (c *computation) deviceCards(ts *tickState) {
	cards := cardRows(ts)
	var warn []string
	if len(ts.Mem) > 0 {
		warn = matchDevices(c.devs, cards)
	}
	gpu := 0 // device rows of kind device
	unmatched := false
	for _, r := range c.devs {
		if r.Kind == DeviceGPU {
			gpu++
			unmatched = unmatched || r.Unmatched != ""
		}
	}
	splitOnCards(c.devs)
	var checks []Check
	for _, k := range cards {
		k.classify()
		checks = append(checks, k.account(c.devs, c.packed, gpu, c.thr, c.isControl())...)
	}
	split, splitOver := splitChecks(c.devs)
	checks = append(checks, split...)
	if !showDevices(c.devs, cards, unmatched) {
		return
	}
	c.discrete = gpu > 0 && !slices.ContainsFunc(c.devs, func(r *devRow) bool {
		return r.Kind == DeviceGPU && (r.cardRow == nil || r.cardRow.Memory != "vram")
	})
	for _, r := range c.devs {
		c.r.Devices = append(c.r.Devices, r.Device)
	}
	for _, k := range cards {
		c.r.Cards = append(c.r.Cards, k.Card)
	}
	c.r.Checks = append(c.r.Checks, checks...)
	c.cardFlags(cards, splitOver, unmatched && len(ts.Mem) > 0)
	if len(warn) > 0 {
		c.flag(FlagDeviceOrder)
		c.warn = append(c.warn, warn...)
	}
}

// splitOnCards puts each split row with the cards of its devices: on the
// one card they are all on, or beside each of several.
func splitOnCards(devs []*devRow) {
	for _, r := range devs {
		if r.Kind != DeviceSplit {
			continue
		}
		on := cardsOf(devs, r.Spans)
		if len(on) == 1 {
			on[0].devs = append(on[0].devs, r)
		}
		if len(on) > 1 {
			for _, k := range on {
				k.split = append(k.split, r)
			}
		}
	}
}

// showDevices says whether the device table says more than the headline:
// several rows of GPU memory, a discrete card's VRAM holding devices,
// several amdgpu cards held, or a device not matched while cards were.
func showDevices(devs []*devRow, cards []*cardRow, unmatched bool) bool {
	if gpuRows(devs) > 1 {
		return true
	}
	amd := 0
	for _, k := range cards {
		if k.Memory == "vram" && len(k.devs) > 0 {
			return true
		}
		if k.Driver == "amdgpu" && k.held() {
			amd++
		}
	}
	return amd > 1 || unmatched && slices.ContainsFunc(cards, (*cardRow).held)
}

// cardFlags flags cards holding less than their devices' buffers, a run
// on discrete cards whose card is above the threshold (judged per card, as
// the process would be on an APU), and devices not matched.
func (c *computation) cardFlags(cards []*cardRow, splitOver, unmatched bool) {
	if splitOver || slices.ContainsFunc(cards, func(k *cardRow) bool { return k.over }) {
		c.flag(FlagDeviceOverCard)
	}
	if c.discrete && !c.isControl() {
		for _, k := range cards {
			if k.NotAttributedPct != nil && float64(*k.NotAttributedPct) > c.thr {
				c.flag(FlagUnattribHigh)
			}
		}
	}
	if unmatched {
		c.flag(FlagDeviceUnmatched)
	}
}

// cardsOf lists the cards the named devices were matched to, nil when one
// of them was not matched.
func cardsOf(devs []*devRow, names []string) []*cardRow {
	var out []*cardRow
	for _, n := range names {
		i := slices.IndexFunc(devs, func(r *devRow) bool { return r.Kind == DeviceGPU && r.Name == n })
		if i < 0 || devs[i].Card == "" {
			return nil
		}
		k := devs[i].cardRow
		if k != nil && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// classify says where the card's devices keep their buffers: in the
// larger of its VRAM and its GTT at their peaks. A discrete card's VRAM
// holds them (its GTT only the runtime's own buffers, pinned host
// buffers and spill); an APU's carve-out is small, and its GTT holds them.
func (k *cardRow) classify() {
	vram, gtt := k.peak[MemVRAM], k.peak[MemGTT]
	switch {
	case !k.held():
		k.Memory = ""
	case vram >= gtt:
		k.Memory = "vram"
	default:
		k.Memory = "gtt"
	}
}

// base is what the log attributes to the card's devices (and split rows
// wholly on it), with the packed copy when the run has one device and it
// is on this card (the trace names no device); ok is false when a
// device's model row is unknown.
func (k *cardRow) base(packed *float64, gpu int) (float64, bool) {
	sum, ok := 0.0, true
	for _, r := range k.devs {
		a, known := r.attributed()
		sum += a
		ok = ok && known
	}
	if k.hasPacked(packed, gpu) {
		sum += *packed
	}
	return sum, ok
}

// hasPacked reports whether the packed copy is counted on this card: the
// run has one device, and it is on this card.
func (k *cardRow) hasPacked(packed *float64, gpu int) bool {
	return packed != nil && gpu == 1 && slices.ContainsFunc(k.devs, func(r *devRow) bool { return r.Kind == DeviceGPU })
}

// pinnedOn lists the pinned host rows whose backend's devices are all on
// this card: pinned memory is GTT, so on an APU it is the card's own.
func (k *cardRow) pinnedOn(devs []*devRow) []*devRow {
	var out []*devRow
	for _, p := range devs {
		if p.Kind != DevicePinned {
			continue
		}
		fam := strings.TrimSuffix(p.Name, "_Host")
		all, any := true, false
		for _, r := range devs {
			if r.Kind == DeviceGPU && r.family == fam {
				any = true
				all = all && r.cardRow == k
			}
		}
		if any && all {
			out = append(out, p)
		}
	}
	return out
}

// account fills the card's attributed and not attributed figures, its
// notes and its devices' not attributed, and returns its check.
func (k *cardRow) account(devs []*devRow, packed *float64, gpu int, thr float64, control bool) []Check {
	var names []string
	for _, r := range k.devs {
		k.Devices = append(k.Devices, r.Name)
		names = append(names, r.Name)
	}
	if len(k.devs) == 0 {
		return nil
	}
	sum, ok := k.base(packed, gpu)
	if k.hasPacked(packed, gpu) {
		k.Notes = append(k.Notes, fmt.Sprintf("the packed copy (%.1f MiB) is counted on this card: the run has one device, and the trace names none", *packed))
	}
	own := MemVRAM
	if k.Memory == "gtt" {
		own = MemGTT
	}
	var model, state, comp float64
	for _, r := range k.devs {
		model, state, comp = model+r.model, state+r.state, comp+r.compute
	}
	var pinned []string
	pinnedMiB := 0.0
	for _, p := range k.pinnedOn(devs) {
		a, _ := p.attributed()
		pinned = append(pinned, p.Name)
		pinnedMiB += a
		if own == MemGTT {
			model, state, comp = model+p.model, state+p.state, comp+p.compute
		}
	}
	if len(pinned) > 0 {
		if own == MemGTT {
			sum += pinnedMiB
			k.Notes = append(k.Notes, fmt.Sprintf("its backend's pinned host buffers (%s, %.1f MiB) are GTT, this card's own memory: counted", strings.Join(pinned, ", "), pinnedMiB))
		} else {
			k.Notes = append(k.Notes, fmt.Sprintf("GTT beside the VRAM: peak %.1f MiB, which holds its backend's pinned host buffers (%s, %.1f MiB)", k.peak[MemGTT], strings.Join(pinned, ", "), pinnedMiB))
		}
	} else if own == MemVRAM && k.peak[MemGTT] > 0 {
		k.Notes = append(k.Notes, fmt.Sprintf("GTT beside the VRAM: peak %.1f MiB (spill and the runtime's own buffers)", k.peak[MemGTT]))
	}
	for _, r := range k.split {
		k.Notes = append(k.Notes, fmt.Sprintf("its share of %s (%.1f MiB, spread over %s) is not known: it is inside not attributed", r.Name, r.model+r.state+r.compute, strings.Join(r.Spans, ", ")))
	}
	who := strings.Join(names, ", ") + " on " + k.PDev + " (" + k.Driver + ", " + strings.ToUpper(MemClassName[own]) + ")"
	if !ok {
		return []Check{{Name: "device_vs_card", Status: StatusWarn,
			Detail: fmt.Sprintf("%s: not checked: a device's model row is unknown (the log has no model buffer line for it)", who)}}
	}
	peak := k.peak[own]
	k.ModelMiB, k.StateMiB, k.ComputeMiB = mib(model), mib(state), mib(comp)
	if k.hasPacked(packed, gpu) {
		k.PackedMiB = mib(*packed)
	}
	k.AttributedMiB = mib(sum)
	u := peak - sum
	k.NotAttributedMiB = mib(u)
	if peak > 0 {
		k.NotAttributedPct = mib(u / peak * 100)
	}
	for _, r := range k.devs {
		r.NotAttributedMiB, r.NotAttributedPct = k.NotAttributedMiB, k.NotAttributedPct
	}
	if len(k.devs) > 1 {
		k.Notes = append(k.Notes, "its devices share one card: not attributed is the card's")
	}
	ownName := strings.ToUpper(MemClassName[own])
	switch {
	case u >= 0 && pct(u, peak) > thr && !control:
		return []Check{{Name: "device_vs_card", Status: StatusWarn,
			Detail: fmt.Sprintf("%s: the log attributes %.1f of the card's %.1f MiB %s peak; %.1f MiB (%.1f %%) is not attributed, above the %g %% threshold", who, sum, peak, ownName, u, pct(u, peak), thr)}}
	case u >= 0:
		return []Check{{Name: "device_vs_card", Status: StatusOK,
			Detail: fmt.Sprintf("%s: the log attributes %.1f of the card's %.1f MiB %s peak; %.1f MiB (%.1f %%) is not attributed, within the %g %% threshold", who, sum, peak, ownName, u, pct(u, peak), thr)}}
	}
	k.over = true
	if own == MemVRAM && sum <= peak+k.peak[MemGTT] {
		return []Check{{Name: "device_vs_card", Status: StatusWarn,
			Detail: fmt.Sprintf("%s: the log attributes %.1f MiB, %.1f MiB MORE than the card's VRAM peak %.1f MiB; its GTT (peak %.1f MiB) may hold the rest (buffers spilled out of VRAM)", who, sum, -u, peak, k.peak[MemGTT])}}
	}
	return []Check{{Name: "device_vs_card", Status: StatusFail,
		Detail: fmt.Sprintf("%s: the log attributes %.1f MiB, %.1f MiB MORE than the card's %s peak %.1f MiB: the buffers cannot all be on this card (a wrong match, or a peak the sampler missed)", who, sum, -u, ownName, peak)}}
}

// splitChecks checks each split row spread over several matched cards
// against those cards together: their own memory's peaks against their
// devices' rows and the split.
func splitChecks(devs []*devRow) (out []Check, over bool) {
	for _, r := range devs {
		if r.Kind != DeviceSplit {
			continue
		}
		on := cardsOf(devs, r.Spans)
		if len(on) < 2 {
			continue
		}
		peak, sum, ok := 0.0, r.model+r.state+r.compute, r.ModelMiB != nil
		var pdevs []string
		for _, k := range on {
			own := MemVRAM
			if k.Memory == "gtt" {
				own = MemGTT
			}
			peak += k.peak[own]
			b, known := k.base(nil, 0)
			sum += b
			ok = ok && known
			pdevs = append(pdevs, k.PDev)
		}
		who := fmt.Sprintf("%s spread over %s (cards %s)", r.Name, strings.Join(r.Spans, ", "), strings.Join(pdevs, ", "))
		switch {
		case !ok:
			out = append(out, Check{Name: "device_vs_card", Status: StatusWarn, Detail: who + ": not checked: a device's model row is unknown"})
		case sum <= peak:
			out = append(out, Check{Name: "device_vs_card", Status: StatusOK,
				Detail: fmt.Sprintf("%s: the log attributes %.1f of the cards' %.1f MiB together; %.1f MiB is not attributed", who, sum, peak, peak-sum)})
		default:
			over = true
			out = append(out, Check{Name: "device_vs_card", Status: StatusFail,
				Detail: fmt.Sprintf("%s: the log attributes %.1f MiB, %.1f MiB MORE than the cards' %.1f MiB together", who, sum, sum-peak, peak)})
		}
	}
	return out, over
}
