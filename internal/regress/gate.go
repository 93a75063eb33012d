// Package regress catches memory regressions across runs: the gate a CI job
// runs on its runs' splits (thresholds, and growth against a baseline run),
// and the history of a lane's splits over llama.cpp builds (what
// `aggregator history` prints and the live page's trend draws). It is pure:
// splits in, verdicts and tables out (the callers read the inputs).
package regress

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// GateSchema is the value of GateResult.Schema.
const GateSchema = "gttsplit.gate.v1"

// Check outcomes.
const (
	StatusPass    = "pass"
	StatusFail    = "fail"
	StatusUnknown = "unknown" // the figure is unknown and --allow-unknown passes it
	StatusAllowed = "allowed" // the command failed and --allow-failed passes it
)

// Limits are what a gate holds each run to; a nil limit is not checked.
type Limits struct {
	MaxDuplicatePct    *float64 `json:"max_duplicate_pct,omitempty"`
	MaxUnattributedPct *float64 `json:"max_unattributed_pct,omitempty"`
	MaxPeakMiB         *float64 `json:"max_peak_mib,omitempty"`
	// MaxGrowthPct bounds the growth of the figure of each row that says
	// Growth (split.Rows) over the baseline's (needs a baseline).
	MaxGrowthPct *float64 `json:"max_growth_pct,omitempty"`
	// AllowUnknown passes a figure that is unknown (in a run or in the
	// baseline) instead of failing it.
	AllowUnknown bool `json:"allow_unknown"`
	// AllowFailed passes a run whose command exited with a non-zero
	// status or was stopped by a signal instead of failing it.
	AllowFailed bool `json:"allow_failed"`
}

// Validate says what is wrong with the limits for a gate with or without a
// baseline.
func (l Limits) Validate(baseline bool) error {
	switch {
	case l.MaxGrowthPct != nil && !baseline:
		return errors.New("--max-growth needs --baseline RUN")
	case baseline && l.MaxGrowthPct == nil:
		return errors.New("--baseline needs --max-growth PCT (how much each figure may grow over the baseline's)")
	case l.MaxDuplicatePct == nil && l.MaxUnattributedPct == nil && l.MaxPeakMiB == nil && l.MaxGrowthPct == nil:
		return errors.New("no limit to check: give --max-duplicate, --max-unattributed, --max-peak or --baseline with --max-growth")
	}
	return nil
}

// maxChecks are the gate's fixed limits in the order it checks them: the
// row (split.Rows) each holds to its limit. A row's name, key and unit in
// a check are the row's.
var maxChecks = []struct {
	row   string
	limit func(Limits) *float64
}{
	{"duplicate", func(l Limits) *float64 { return l.MaxDuplicatePct }},
	{"unattributed_share", func(l Limits) *float64 { return l.MaxUnattributedPct }},
	{"peak", func(l Limits) *float64 { return l.MaxPeakMiB }},
}

// Input is one split given to the gate or the history, and what the user
// named it by.
type Input struct {
	Input  string
	Report split.Report
}

// GateResult is the gate's verdict on every run.
type GateResult struct {
	Schema   string    `json:"schema"`
	Pass     bool      `json:"pass"`
	Limits   Limits    `json:"limits"`
	Baseline *GateSide `json:"baseline,omitempty"`
	Runs     []GateRun `json:"runs"`
	Failed   int       `json:"failed"` // runs that failed
	Notes    []string  `json:"notes"`
}

// GateSide names a run of the gate.
type GateSide struct {
	Input string `json:"input"`
	RunID string `json:"run_id"`
	Host  string `json:"host"`
	Lane  string `json:"lane"`
	Model string `json:"model"`
	Build string `json:"llama_build"`
}

// GateRun is one run's checks.
type GateRun struct {
	GateSide
	Pass   bool        `json:"pass"`
	Checks []GateCheck `json:"checks"`
}

// GateCheck is one figure held to its limit.
type GateCheck struct {
	// Name is the figure's row as the history names it
	// (split.Labels.History): duplicate, unattributed, peak, model
	// buffer, packed, KV + state, compute; or "command" for a run whose
	// command failed.
	Name string `json:"name"`
	// Kind is "max" (a fixed limit), "growth" (against the baseline) or
	// "exit" (the command failed: a non-zero status or a signal).
	Kind string `json:"kind"`
	// Key is the report's key of the figure (split.Row.JSON).
	Key    string     `json:"key"`
	Unit   string     `json:"unit"` // "%" or "MiB"
	Value  *split.MiB `json:"value"`
	Limit  *split.MiB `json:"limit"` // nil: the baseline's figure is unknown
	Base   *split.MiB `json:"baseline,omitempty"`
	Status string     `json:"status"`
	// Text says it in words: "duplicate 33.5 % > 10 %".
	Text string `json:"text"`
}

// Gate holds each run to the limits (and to the baseline, when given).
func Gate(runs []Input, baseline *Input, l Limits) GateResult {
	g := GateResult{Schema: GateSchema, Pass: true, Limits: l, Notes: []string{}, Runs: []GateRun{}}
	var base *split.Figures
	if baseline != nil {
		s := sideOf(*baseline)
		g.Baseline = &s
		f := split.FiguresOf(baseline.Report)
		base = &f
	}
	for _, in := range runs {
		gr := GateRun{GateSide: sideOf(in), Pass: true, Checks: []GateCheck{}}
		for _, c := range l.checks(split.FiguresOf(in.Report), base) {
			c = l.judge(c)
			if c.Status == StatusFail {
				gr.Pass = false
			}
			gr.Checks = append(gr.Checks, c)
		}
		if c, ok := exitCheck(in.Report, l.AllowFailed); ok {
			if c.Status == StatusFail {
				gr.Pass = false
			}
			gr.Checks = append(gr.Checks, c)
		}
		if !gr.Pass {
			g.Pass = false
			g.Failed++
		}
		g.Notes = append(g.Notes, notes(in.Report, gr, baseline, g.Baseline)...)
		g.Runs = append(g.Runs, gr)
	}
	return g
}

// exitCheck is the check of a run whose command failed: exited with a
// non-zero status or stopped by a signal (its figures are those of a run
// that did not end well); ok is false for any other run.
func exitCheck(r split.Report, allow bool) (GateCheck, bool) {
	c := GateCheck{Name: "command", Kind: "exit", Status: StatusFail}
	switch {
	case r.Run.Signal != "":
		c.Key, c.Text = "run.signal", "command stopped by "+r.Run.Signal
	case r.Run.ExitCode != nil && *r.Run.ExitCode != 0:
		c.Key, c.Text = "run.exit_code", fmt.Sprintf("command exited with status %d", *r.Run.ExitCode)
	default:
		return c, false
	}
	if allow {
		c.Status = StatusAllowed
		c.Text += " (allowed: --allow-failed)"
	}
	return c, true
}

// checks are the checks of a run's figures f: each fixed limit given,
// then, with a baseline, the growth of each row that says Growth.
func (l Limits) checks(f split.Figures, base *split.Figures) []GateCheck {
	var out []GateCheck
	for _, m := range maxChecks {
		if lim := m.limit(l); lim != nil {
			row, _ := split.RowOf(m.row)
			out = append(out, GateCheck{Name: row.Labels.History, Kind: "max", Key: row.JSON, Unit: string(row.Unit), Value: row.OfFigures(f), Limit: asMiB(lim)})
		}
	}
	if base == nil || l.MaxGrowthPct == nil {
		return out
	}
	for _, row := range split.Rows {
		if row.Growth {
			out = append(out, GateCheck{Name: row.Labels.History, Kind: "growth", Key: row.JSON, Unit: string(row.Unit), Value: row.OfFigures(f), Base: row.OfFigures(*base)})
		}
	}
	return out
}

// judge gives a check its limit (a growth check's from the baseline's
// figure), its status and its words.
func (l Limits) judge(c GateCheck) GateCheck {
	// Compared as the report has them (two decimals), so a split read
	// from its JSON and one folded from its events agree.
	c.Value, c.Base = round2(c.Value), round2(c.Base)
	if c.Kind == "growth" && c.Base != nil {
		lim := *c.Base * split.MiB(1+*l.MaxGrowthPct/100)
		c.Limit = &lim
	}
	switch {
	case c.Value == nil || c.Limit == nil:
		c.Status = StatusFail
		if l.AllowUnknown {
			c.Status = StatusUnknown
		}
	case *c.Value > *c.Limit:
		c.Status = StatusFail
	default:
		c.Status = StatusPass
	}
	c.Text = checkText(c, l.MaxGrowthPct)
	return c
}

// notes are the caveats of a run's checks: a baseline of another model or
// of another kind of run (a control), a run that is incomplete.
func notes(r split.Report, gr GateRun, baseline *Input, b *GateSide) []string {
	var out []string
	if baseline != nil {
		if gr.Model != b.Model && gr.Model != "" && b.Model != "" {
			out = append(out, fmt.Sprintf("%s measured %s and the baseline %s: the growth compares different models", gr.RunID, gr.Model, b.Model))
		}
		switch ctl, bctl := r.Run.ControlOf != "", baseline.Report.Run.ControlOf != ""; {
		case ctl && !bctl:
			out = append(out, fmt.Sprintf("%s is a control (offload off) and the baseline is not", gr.RunID))
		case bctl && !ctl:
			out = append(out, fmt.Sprintf("the baseline is a control (offload off) and %s is not", gr.RunID))
		}
	}
	if !r.Run.Complete && (r.Run.ID != "" || r.Run.Started != "") {
		out = append(out, fmt.Sprintf("%s is incomplete: its split may miss data", gr.RunID))
	}
	return out
}

func sideOf(in Input) GateSide {
	r := in.Report
	return GateSide{Input: in.Input, RunID: r.Run.ID, Host: r.Run.Host, Lane: r.Run.Lane, Model: split.ModelName(r), Build: r.Provenance.LlamaBuild}
}

func round2(m *split.MiB) *split.MiB {
	if m == nil {
		return nil
	}
	r := split.MiB(math.Round(float64(*m)*100) / 100)
	return &r
}

func asMiB(v *float64) *split.MiB {
	if v == nil {
		return nil
	}
	m := split.MiB(*v)
	return &m
}

// checkText says a check in words: "duplicate 33.5 % > 10 %", "peak
// 3925.0 MiB ≤ 4096 MiB", "packed 795.8 MiB > 0.0 MiB (baseline 0.0 MiB
// + 10 %)", "packed unknown, limit 10 %".
func checkText(c GateCheck, growth *float64) string {
	unit := func(v float64) string {
		if c.Unit == "%" {
			return num(v) + " %"
		}
		return strconv.FormatFloat(v, 'f', 1, 64) + " MiB"
	}
	var s string
	switch {
	case c.Kind == "growth" && c.Limit == nil:
		s = fmt.Sprintf("%s unknown, and the baseline's too", c.Name)
		if c.Value != nil {
			s = fmt.Sprintf("%s %s: the baseline's is unknown", c.Name, unit(float64(*c.Value)))
		}
	case c.Value == nil:
		s = fmt.Sprintf("%s unknown, limit %s", c.Name, limitText(c, unit, growth))
	default:
		v, lim := float64(*c.Value), float64(*c.Limit)
		op := "≤"
		if v > lim {
			op = ">"
		}
		vs, ls := unit(v), limitText(c, unit, growth)
		if vs == unit(lim) && op == ">" {
			// Over by less than the shown precision: show more.
			vs = strconv.FormatFloat(v, 'f', 3, 64)
			if c.Unit == "%" {
				vs += " %"
			} else {
				vs += " MiB"
			}
		}
		s = fmt.Sprintf("%s %s %s %s", c.Name, vs, op, ls)
	}
	if c.Status == StatusUnknown {
		s += " (unknown: allowed)"
	}
	return s
}

func limitText(c GateCheck, unit func(float64) string, growth *float64) string {
	if c.Kind == "growth" {
		return fmt.Sprintf("%s (baseline %s + %s %%)", unit(float64(*c.Limit)), unit(float64(*c.Base)), num(*growth))
	}
	if c.Unit == "%" {
		return num(float64(*c.Limit)) + " %"
	}
	return num(float64(*c.Limit)) + " MiB"
}

// num formats a limit or a percentage: 10, 12.5, 33.5.
func num(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// ParsePct parses a percentage limit: "10", "10%" or "10 %" (0 or more).
func ParsePct(s string) (float64, error) { return parseLimit(s, "%", "a percentage (write 10 or 10%)") }

// ParseMiB parses a size limit in MiB: "4096" or "4096MiB" (0 or more).
func ParseMiB(s string) (float64, error) { return parseLimit(s, "MiB", "a size in MiB (write 4096)") }

// parseLimit parses a number of 0 or more, with or without its unit.
func parseLimit(s, unit, what string) (float64, error) {
	t := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), unit))
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("%q is not %s", s, what)
	}
	return v, nil
}
