package regress

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// HistorySchema is the value of History.Schema.
const HistorySchema = "gttsplit.history.v1"

// DefaultThresholdPct is the change from one run to the next that history
// marks unless told otherwise.
const DefaultThresholdPct = 5

// Run is one closed run's figures as history reads them.
type Run struct {
	ID, Host, Lane string
	// Input is what the run was read from ("" for the store).
	Input string
	F     split.Figures
}

// RunOf is the history's run of an input's split.
func RunOf(in Input) Run {
	r := in.Report
	return Run{ID: r.Run.ID, Host: r.Run.Host, Lane: r.Run.Lane, Input: in.Input, F: split.FiguresOf(r)}
}

// Filter selects runs: an empty field selects all. Host and lane match
// exactly; the model matches its file name exactly or as a
// case-insensitive part of it.
type Filter struct{ Host, Lane, Model string }

// Match says whether r is selected.
func (f Filter) Match(r Run) bool {
	return (f.Host == "" || r.Host == f.Host) && (f.Lane == "" || r.Lane == f.Lane) &&
		(f.Model == "" || r.F.Model == f.Model || strings.Contains(strings.ToLower(r.F.Model), strings.ToLower(f.Model)))
}

// History is the runs of each host, lane and model file, over builds.
type History struct {
	Schema       string  `json:"schema"`
	ThresholdPct float64 `json:"threshold_pct"`
	Groups       []Group `json:"groups"`
}

// Group is one host, lane and model file's runs (its controls, runs with
// offload off, are a group of their own), ordered by llama.cpp build
// number, then by start time; runs whose build is unknown come last.
type Group struct {
	Host    string `json:"host"`
	Lane    string `json:"lane"`
	Model   string `json:"model"`
	Control bool   `json:"control,omitempty"`
	Rows    []Row  `json:"rows"`
}

// Row is one run: its figures and their change from the row before.
type Row struct {
	RunID       string        `json:"run_id"`
	Input       string        `json:"input,omitempty"`
	BuildNumber *int64        `json:"build_number"`
	Figures     split.Figures `json:"figures"`
	// Changes are each column's change from the row before, by the key
	// of its row (changed: the MiB rows of Columns: peak, final,
	// model, packed, state, compute, unattributed); none on a group's
	// first row, nor where either figure is unknown.
	Changes map[string]Change `json:"changes"`
	// Marked lists the rows whose change is beyond the threshold, in
	// split.Rows order.
	Marked []string `json:"marked"`
}

// Change is a figure's change from the row before.
type Change struct {
	DiffMiB split.MiB `json:"diff_mib"`
	// Pct is the change relative to the row before; null from 0 (a part
	// that was 0 and is not: FromZero).
	Pct      *split.Pct `json:"pct"`
	FromZero bool       `json:"from_zero,omitempty"`
	Marked   bool       `json:"marked"`
}

// Up says the figure grew.
func (c Change) Up() bool { return c.DiffMiB > 0 }

// key is a group's identity.
type key struct {
	host, lane, model string
	control           bool
}

// NewHistory groups the runs f selects by host, lane and model file,
// orders each group over builds, and marks each change from one row to
// the next beyond thresholdPct (in either direction; a part that was 0
// and is no longer is always marked).
func NewHistory(runs []Run, f Filter, thresholdPct float64) History {
	h := History{Schema: HistorySchema, ThresholdPct: thresholdPct, Groups: []Group{}}
	for _, gr := range groupRuns(runs, f) {
		k, rs := gr.key, gr.runs
		SortRuns(rs)
		g := Group{Host: k.host, Lane: k.lane, Model: k.model, Control: k.control, Rows: make([]Row, 0, len(rs))}
		for i, r := range rs {
			row := Row{RunID: r.ID, Input: r.Input, Figures: r.F, Changes: map[string]Change{}, Marked: []string{}}
			if n, ok := split.BuildNumber(r.F.Build); ok {
				row.BuildNumber = &n
			}
			if i > 0 {
				prev := rs[i-1].F
				for _, col := range changed() {
					if d, ok := col.Change(col.OfFigures(prev), col.OfFigures(r.F)); ok {
						c := Change{DiffMiB: d.Diff, Pct: d.Pct, FromZero: d.FromZero, Marked: d.Beyond(thresholdPct)}
						row.Changes[col.Key] = c
						if c.Marked {
							row.Marked = append(row.Marked, col.Key)
						}
					}
				}
			}
			g.Rows = append(g.Rows, row)
		}
		h.Groups = append(h.Groups, g)
	}
	return h
}

// group is the runs of one host, lane and model file (or its controls).
type group struct {
	key  key
	runs []Run
}

// groupRuns groups the runs f selects by host, lane, model file and
// whether they are controls, the groups in that order, each group's runs
// in the order given.
func groupRuns(runs []Run, f Filter) []group {
	byKey := map[key][]Run{}
	for _, r := range runs {
		if f.Match(r) {
			k := key{r.Host, r.Lane, r.F.Model, r.F.ControlOf != ""}
			byKey[k] = append(byKey[k], r)
		}
	}
	out := make([]group, 0, len(byKey))
	for k, rs := range byKey {
		out = append(out, group{k, rs})
	}
	slices.SortFunc(out, func(a, b group) int {
		return cmp.Or(cmp.Compare(a.key.host, b.key.host), cmp.Compare(a.key.lane, b.key.lane), cmp.Compare(a.key.model, b.key.model), boolCmp(a.key.control, b.key.control))
	})
	return out
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// SortRuns orders runs by llama.cpp build number (unknown builds last),
// then by start time, then by run id.
func SortRuns(rs []Run) {
	type sortKey struct {
		build int64
		known bool
		t     time.Time
	}
	keys := make(map[string]sortKey, len(rs))
	for _, r := range rs {
		n, ok := split.BuildNumber(r.F.Build)
		t, _ := time.Parse(time.RFC3339Nano, r.F.Started)
		keys[r.ID] = sortKey{n, ok, t}
	}
	slices.SortStableFunc(rs, func(a, b Run) int {
		ka, kb := keys[a.ID], keys[b.ID]
		if ka.known != kb.known {
			return -boolCmp(ka.known, kb.known)
		}
		return cmp.Or(cmp.Compare(ka.build, kb.build), ka.t.Compare(kb.t), cmp.Compare(a.F.Started, b.F.Started), cmp.Compare(a.ID, b.ID))
	})
}

// Columns are the history's columns of figures (and the trend
// table's): the rows that say History, in split.Rows' order.
func Columns() []split.Row {
	var out []split.Row
	for _, row := range split.Rows {
		if row.History && row.Kept() {
			out = append(out, row)
		}
	}
	return out
}

// changed are the columns whose change from the run before the history
// shows: its MiB rows.
func changed() []split.Row {
	var out []split.Row
	for _, row := range Columns() {
		if row.Unit == split.UnitMiB {
			out = append(out, row)
		}
	}
	return out
}
