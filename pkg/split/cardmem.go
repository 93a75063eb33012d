package split

import (
	"slices"
	"strings"
	"time"
)

// The process's memory per card: every sample's DRM clients of the
// drivers whose regions gttsplit reads (amdgpu, xe, i915), each client
// once, summed per card (drm-pdev) and region class, and folded over the
// ticks into a peak and a final per card and class (docs/accounting.md
// rule 17). The headline's process GTT stays the amdgpu sum of every card
// (rule 8); this is the same memory told apart by card.

// cardTickMem is one tick's memory per card and class.
type cardTickMem struct {
	// seen are the clients counted, (pdev, client id): each once. A tick
	// has a few clients on a card or two: the first ones need no more
	// than the struct's one allocation.
	seen    [][2]string
	seen0   [8][2]string
	cards   []tickCard
	cards0  [2]tickCard
	skipped int
}

type tickCard struct {
	pdev, driver string
	mem          ClientMem // the sum over the card's clients
	clients      int
}

// add adds one fd's client to its card, unless the client was counted
// already (another fd or process of the same client): its memory is
// summed from keys (parseFDInfo's) only then. A client without an id
// cannot be told from another and is left out, as in the headline.
func (m *cardTickMem) add(c *DRMClient, keys *memKeys) {
	if keys.n == 0 || c.ClientID == "" {
		return
	}
	k := [2]string{c.PDev, c.ClientID}
	if m.seen == nil {
		m.seen, m.cards = m.seen0[:0], m.cards0[:0]
	}
	if slices.Contains(m.seen, k) {
		return
	}
	c.Mem = keys.mem(c.Driver)
	if c.Mem.Seen == 0 && c.Mem.Skipped == 0 {
		return
	}
	m.seen = append(m.seen, k)
	m.skipped += c.Mem.Skipped
	i := slices.IndexFunc(m.cards, func(t tickCard) bool { return t.pdev == c.PDev && t.driver == c.Driver })
	if i < 0 {
		m.cards = append(m.cards, tickCard{pdev: c.PDev, driver: c.Driver})
		i = len(m.cards) - 1
	}
	t := &m.cards[i]
	t.clients++
	for cl := range NumMemClasses {
		if c.Mem.Seen&(1<<cl) == 0 {
			continue
		}
		t.mem.Bytes[cl] += c.Mem.Bytes[cl]
		t.mem.Seen |= 1 << cl
		t.mem.Resident |= c.Mem.Resident & (1 << cl)
		t.mem.Regions[cl] = unionRegions(t.mem.Regions[cl], c.Mem.Regions[cl])
	}
}

// unionRegions joins two "+"-separated sets of region names, sorted.
func unionRegions(a, b string) string {
	if a == b || b == "" {
		return a
	}
	if a == "" {
		return b
	}
	set := strings.Split(a, "+")
	for _, r := range strings.Split(b, "+") {
		if !slices.Contains(set, r) {
			set = append(set, r)
		}
	}
	slices.Sort(set)
	return strings.Join(set, "+")
}

// cardMem is one card's memory of one region class, folded over the
// ticks: the largest tick (ties: the earliest) and the latest tick that
// had the card. Like the headline's peak and final, both are idempotent
// and free of order.
type cardMem struct {
	PDev   string `json:"pdev"`
	Driver string `json:"driver"`
	Class  string `json:"class"`
	// Regions are the kernel's regions summed in the class ("vram",
	// "vram0+vram1", "local0"); Resident says a figure was resident
	// memory only (drm-memory-*).
	Regions  string    `json:"regions"`
	Resident bool      `json:"resident,omitempty"`
	Peak     int64     `json:"peak"`
	PeakSeq  uint64    `json:"peak_seq"`
	PeakT    time.Time `json:"peak_t"`
	Final    int64     `json:"final"`
	FinalSeq uint64    `json:"final_seq"`
	FinalT   time.Time `json:"final_t"`
	// Clients counts the card's distinct clients at the final tick.
	Clients int `json:"clients"`
}

// addMem folds one distinct tick's memory per card into ts.Mem.
func (ts *tickState) addMem(seq uint64, t time.Time, m *cardTickMem) {
	ts.MemSkipped += m.skipped
	added := false
	at := tick{Seq: seq, Time: t}
	for _, c := range m.cards {
		for cl := range NumMemClasses {
			if c.mem.Seen&(1<<cl) == 0 {
				continue
			}
			name := MemClassName[cl]
			i := slices.IndexFunc(ts.Mem, func(x cardMem) bool { return x.PDev == c.pdev && x.Driver == c.driver && x.Class == name })
			v := c.mem.Bytes[cl]
			if i < 0 {
				added = true
				// A decoder may give every string of a sample as a slice
				// of one (the whole event's text): a kept one must not
				// hold it.
				ts.Mem = append(ts.Mem, cardMem{PDev: strings.Clone(c.pdev), Driver: strings.Clone(c.driver), Class: name, Regions: strings.Clone(c.mem.Regions[cl]),
					Resident: c.mem.Resident&(1<<cl) != 0, Peak: v, PeakSeq: seq, PeakT: t, Final: v, FinalSeq: seq, FinalT: t, Clients: c.clients})
				continue
			}
			x := &ts.Mem[i]
			x.Regions = unionRegions(x.Regions, c.mem.Regions[cl])
			x.Resident = x.Resident || c.mem.Resident&(1<<cl) != 0
			peak := tick{Seq: x.PeakSeq, Time: x.PeakT}
			if v > x.Peak || v == x.Peak && at.before(&peak) {
				x.Peak, x.PeakSeq, x.PeakT = v, seq, t
			}
			final := tick{Seq: x.FinalSeq, Time: x.FinalT}
			if final.before(&at) {
				x.Final, x.FinalSeq, x.FinalT, x.Clients = v, seq, t, c.clients
			}
		}
	}
	if !added {
		return
	}
	slices.SortFunc(ts.Mem, func(a, b cardMem) int {
		if c := strings.Compare(a.PDev, b.PDev); c != 0 {
			return c
		}
		if c := strings.Compare(a.Driver, b.Driver); c != 0 {
			return c
		}
		return slices.Index(MemClassName[:], a.Class) - slices.Index(MemClassName[:], b.Class)
	})
}
