package split

import (
	"math"
	"strconv"
)

// The split's rows, declared once: every output that lists rows (the
// report's text and Markdown, its bars, the comparison, the gate, the
// history, the trend, the lane gauges, the live page) reads them from
// Rows, in its order, and picks the rows of the kinds it shows. Adding a
// row is an entry here, a field of Report (and of Figures, for a row kept
// over a lane's runs) and the rule that computes it (docs/architecture.md,
// "Add a split row").

// Unit is what a row's figure counts.
type Unit string

// Units.
const (
	UnitMiB Unit = "MiB"
	UnitPct Unit = "%"
)

// RowKind is what a row is to the process's GTT; the outputs choose their
// rows by kind.
type RowKind uint8

// Row kinds.
const (
	// RowTotal is the process's own GTT from fdinfo (at the peak, at the
	// final sample).
	RowTotal RowKind = iota + 1
	// RowPart is a part of the peak the log attributes: the parts and
	// RowRest add up to the peak, and the bars draw them.
	RowPart
	// RowRest is the peak minus the parts: not attributed.
	RowRest
	// RowOutside is memory outside the GTT, shown beside it (the CPU
	// model buffer).
	RowOutside
	// RowShare is a percentage of two figures.
	RowShare
)

// Labels are a row's words in each output: a wide table names a row in
// full, a narrow column or a legend shortly, and the outputs that existed
// before the table did not agree, so each keeps its own ("" where the row
// does not appear).
type Labels struct {
	// Report names the row in the report's table, the comparison's
	// rows and the live page's rows: "loader's model buffer".
	Report string
	// History names it in the history's and the trend's columns, the
	// gate's checks and the ratio gauges: "model buffer".
	History string
	// Bar names it in the bars' legends and the comparison's rows per
	// device: "model buffer".
	Bar string
	// Device names it in the device table's columns: "model".
	Device string
}

// Row is one row of the split: its names, its unit, what it is, where it
// shows, how it is read from a report (and from Figures, from a Device and
// from a Card), compared and gated.
type Row struct {
	// Key names the row in the history's changes, the lane gauges' part
	// label and the bars' and charts' segments: "model".
	Key string
	// JSON is the report's key of the figure (Figures' too):
	// "model_gtt_mib"; DeviceJSON its key in the device table and the
	// cards ("model_mib"), "" for a row not split by device or card.
	JSON, DeviceJSON string
	// Gauge is the row's label in the lane gauges: the part of
	// gttsplit_lane_split_mib (a MiB row) or the ratio of
	// gttsplit_lane_split_ratio (a share); "" for none. Figures must
	// keep the row.
	Gauge  string
	Unit   Unit
	Kind   RowKind
	Labels Labels
	// Glyph is the row's character in the text bars ("" for a row not
	// drawn).
	Glyph string
	// Growth says the gate holds the row to the baseline's (--max-growth).
	Growth bool
	// History says the history and the trend's table show the row as a
	// column (a MiB row with its change from the run before).
	History bool
	// Trend says the trend chart draws the row as a line.
	Trend bool
	// Noise is the least change of the row's figure from one build of a
	// lane to the next that is a lane change rather than run-to-run noise
	// (docs/regressions.md says why each is what it is); the zero
	// Threshold: the row is not watched. A lane's configuration may set
	// others (regress.Thresholds).
	Noise Threshold

	report   func(*Report) **MiB
	figures  func(*Figures) **MiB // nil: not kept over a lane's runs
	device   func(*Device) **MiB  // nil: not split by device
	card     func(*Card) **MiB    // nil: not split by card
	compared func(Report) *MiB    // nil: the report's figure
	note     func(Report) string
}

// Rows are the split's rows in the report's order. Append a row where it
// belongs in that order: the outputs show rows in it.
var Rows = []Row{
	{Key: "peak", JSON: "peak_gtt_mib", Gauge: "peak", Unit: UnitMiB, Kind: RowTotal,
		Labels: Labels{Report: "process GTT at peak (fdinfo)", History: "peak"},
		Growth: true, History: true, Trend: true, Noise: Threshold{Abs: 128, Pct: 5},
		report:  func(r *Report) **MiB { return &r.PeakGTTMiB },
		figures: func(f *Figures) **MiB { return &f.PeakGTTMiB }},
	{Key: "final", JSON: "final_gtt_mib", Gauge: "final", Unit: UnitMiB, Kind: RowTotal,
		Labels:  Labels{Report: "process GTT at final (fdinfo)", History: "final"},
		History: true,
		report:  func(r *Report) **MiB { return &r.FinalGTTMiB },
		figures: func(f *Figures) **MiB { return &f.FinalGTTMiB }},
	{Key: "model", JSON: "model_gtt_mib", DeviceJSON: "model_mib", Gauge: "model", Unit: UnitMiB, Kind: RowPart,
		Labels: Labels{Report: "loader's model buffer", History: "model buffer", Bar: "model buffer", Device: "model"},
		Glyph:  "█", Growth: true, History: true, Trend: true, Noise: Threshold{Abs: 1, Pct: 1},
		report:   func(r *Report) **MiB { return &r.ModelGTTMiB },
		figures:  func(f *Figures) **MiB { return &f.ModelGTTMiB },
		device:   func(d *Device) **MiB { return &d.ModelMiB },
		card:     func(k *Card) **MiB { return &k.ModelMiB },
		compared: ModelInGTT},
	{Key: "packed", JSON: "packed_mib", DeviceJSON: "packed_mib", Gauge: "packed", Unit: UnitMiB, Kind: RowPart,
		Labels: Labels{Report: "packed copies", History: "packed", Bar: "packed copies"},
		Glyph:  "▓", Growth: true, History: true, Trend: true, Noise: Threshold{Abs: 1, Pct: 1},
		report:  func(r *Report) **MiB { return &r.PackedMiB },
		figures: func(f *Figures) **MiB { return &f.PackedMiB },
		card:    func(k *Card) **MiB { return &k.PackedMiB },
		note:    packedWeights},
	{Key: "state", JSON: "state_mib", DeviceJSON: "state_mib", Gauge: "state", Unit: UnitMiB, Kind: RowPart,
		Labels: Labels{Report: "KV + state", History: "KV + state", Bar: "KV + state", Device: "KV + state"},
		Glyph:  "▒", Growth: true, History: true, Trend: true, Noise: Threshold{Abs: 1, Pct: 1},
		report:  func(r *Report) **MiB { return &r.StateMiB },
		figures: func(f *Figures) **MiB { return &f.StateMiB },
		device:  func(d *Device) **MiB { return &d.StateMiB },
		card:    func(k *Card) **MiB { return &k.StateMiB }},
	{Key: "compute", JSON: "compute_mib", DeviceJSON: "compute_mib", Gauge: "compute", Unit: UnitMiB, Kind: RowPart,
		Labels: Labels{Report: "compute + output", History: "compute", Bar: "compute + output", Device: "compute + output"},
		Glyph:  "░", Growth: true, History: true, Trend: true, Noise: Threshold{Abs: 1, Pct: 1},
		report:  func(r *Report) **MiB { return &r.ComputeMiB },
		figures: func(f *Figures) **MiB { return &f.ComputeMiB },
		device:  func(d *Device) **MiB { return &d.ComputeMiB },
		card:    func(k *Card) **MiB { return &k.ComputeMiB }},
	{Key: "unattributed", JSON: "unattributed_mib", Gauge: "unattributed", Unit: UnitMiB, Kind: RowRest,
		Labels: Labels{Report: "not attributed", History: "not attributed", Bar: "not attributed"},
		Glyph:  "·", History: true, Trend: true, Noise: Threshold{Abs: 128, Pct: 10},
		report:  func(r *Report) **MiB { return &r.UnattributedMiB },
		figures: func(f *Figures) **MiB { return &f.UnattributedMiB }},
	{Key: "host", JSON: "model_host_mib", Unit: UnitMiB, Kind: RowOutside,
		Labels: Labels{Report: "CPU model buffer (not in GTT)"},
		report: func(r *Report) **MiB { return &r.ModelHostMiB }},
	{Key: "duplicate", JSON: "duplicate_pct", Gauge: "duplicate", Unit: UnitPct, Kind: RowShare,
		Labels:  Labels{Report: "duplicate = packed / model buffer", History: "duplicate"},
		History: true, Noise: Threshold{Abs: 1},
		report:  func(r *Report) **MiB { return &r.DuplicatePct },
		figures: func(f *Figures) **MiB { return &f.DuplicatePct }},
	{Key: "unattributed_share", JSON: "unattributed_pct", Gauge: "unattributed", Unit: UnitPct, Kind: RowShare,
		Labels:  Labels{Report: "not attributed", History: "unattributed"},
		report:  func(r *Report) **MiB { return &r.UnattributedPct },
		figures: func(f *Figures) **MiB { return &f.UnattributedPct }},
}

// RowOf returns the row with key k.
func RowOf(k string) (Row, bool) {
	for _, row := range Rows {
		if row.Key == k {
			return row, true
		}
	}
	return Row{}, false
}

// RowsOf returns the rows of the given kinds, in Rows' order.
func RowsOf(kinds ...RowKind) []Row {
	var out []Row
	for _, row := range Rows {
		for _, k := range kinds {
			if row.Kind == k {
				out = append(out, row)
				break
			}
		}
	}
	return out
}

// Of is the row's figure in r (nil: unknown).
func (row Row) Of(r Report) *MiB { return *row.report(&r) }

// Kept says Figures keep the row (the history, the trend and the lane
// gauges read it).
func (row Row) Kept() bool { return row.figures != nil }

// OfFigures is the row's figure in f (nil: unknown, or not kept).
func (row Row) OfFigures(f Figures) *MiB {
	if row.figures == nil {
		return nil
	}
	return *row.figures(&f)
}

// PerDevice says the device table has the row (OfDevice).
func (row Row) PerDevice() bool { return row.device != nil }

// OfDevice is the row's figure on one device of the device table (nil:
// unknown, or not split by device).
func (row Row) OfDevice(d Device) *MiB {
	if row.device == nil {
		return nil
	}
	return *row.device(&d)
}

// PerCard says a card has the row (OfCard).
func (row Row) PerCard() bool { return row.card != nil }

// OfCard is the row's figure on one card, what the log attributes to its
// own memory (nil: unknown, or not split by card).
func (row Row) OfCard(k Card) *MiB {
	if row.card == nil {
		return nil
	}
	return *row.card(&k)
}

// Compared is the figure of r that a comparison of two runs puts side by
// side: the report's, except the model buffer of a run whose model
// buffers are all host memory (offload off), which holds 0 in GTT.
func (row Row) Compared(r Report) *MiB {
	if row.compared != nil {
		return row.compared(r)
	}
	return row.Of(r)
}

// Note is what the report says beside the row's label ("38 weights"), ""
// for nothing.
func (row Row) Note(r Report) string {
	if row.note == nil {
		return ""
	}
	return row.note(r)
}

// Diff is a − b, nil when either is unknown (a comparison's row).
func (row Row) Diff(a, b *MiB) *MiB {
	if a == nil || b == nil {
		return nil
	}
	d := *a - *b
	return &d
}

// Delta is how a row's figure changed from one split to the next, of the
// figures as the report has them (two decimals).
type Delta struct {
	// Diff is the new figure minus the old, in the row's unit.
	Diff MiB
	// Pct is the change relative to the old figure; nil from 0 (FromZero:
	// a figure that was 0 and is not).
	Pct      *Pct
	FromZero bool
}

// Change is the change of the row's figure from from to to; false when
// either is unknown.
func (row Row) Change(from, to *MiB) (Delta, bool) {
	if from == nil || to == nil {
		return Delta{}, false
	}
	a, b := round2(float64(*from)), round2(float64(*to))
	d := Delta{Diff: MiB(b - a)}
	switch {
	case a == 0 && b == 0:
		z := Pct(0)
		d.Pct = &z
	case a == 0:
		d.FromZero = true
	default:
		p := Pct((b - a) / math.Abs(a) * 100)
		d.Pct = &p
	}
	return d, true
}

// Beyond says the change is more than thresholdPct of the old figure, in
// either direction; a change from 0 always is.
func (d Delta) Beyond(thresholdPct float64) bool {
	return d.FromZero || d.Pct != nil && math.Abs(float64(*d.Pct)) > thresholdPct
}

// Threshold is how much a row's figure must change from one build of a
// lane to the next to be a lane change: by more than Abs in the row's unit
// (MiB; points for a share) and by more than Pct of the earlier figure. A
// figure that was 0 and is not needs only Abs.
type Threshold struct {
	Abs float64 `json:"abs"`
	Pct float64 `json:"pct"`
}

// Watched says the threshold watches its row (the zero one does not).
func (t Threshold) Watched() bool { return t.Abs > 0 || t.Pct > 0 }

// Exceeds says the change is a lane change under t: beyond both its
// figures (a change from 0, beyond Abs); never when t is not watched.
func (d Delta) Exceeds(t Threshold) bool {
	if !t.Watched() || math.Abs(float64(d.Diff)) <= t.Abs {
		return false
	}
	return d.FromZero || d.Pct != nil && math.Abs(float64(*d.Pct)) > t.Pct
}

// ModelInGTT is the model buffer a run holds in GTT: its model row, else
// 0 when its model buffers are all host memory (offload off), else nil.
func ModelInGTT(r Report) *MiB {
	switch {
	case r.ModelGTTMiB != nil:
		return mib(float64(*r.ModelGTTMiB))
	case r.ModelHostMiB != nil:
		return mib(0)
	}
	return nil
}

func packedWeights(r Report) string {
	if r.PackedWeights == nil {
		return ""
	}
	return strconv.Itoa(*r.PackedWeights) + " weights"
}
