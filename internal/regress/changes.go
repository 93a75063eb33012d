package regress

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gttsplit/gttsplit/pkg/conf"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// Lane changes: a lane's memory moving from one llama.cpp build to the
// next. The runs of a host, lane and model file (its controls apart) are
// taken build by build, in build order (the build number, then the
// commit's time), never in the order they arrived; a build's measurement
// is its complete run started last. Each build is compared with the build
// before it, row by row (split.Rows): a row whose figure moved by more
// than its threshold (Thresholds, by default each row's Noise) makes a
// change, naming the two builds, their commits (the range to bisect), the
// two runs and the rows that moved.

// ChangesSchema is the value of Changes.Schema.
const ChangesSchema = "gttsplit.changes.v1"

// Config is the lane_changes.* keys: the thresholds of a lane change (read
// by `aggregator history --changes`, the trend page and serve) and the
// sticky comment serve keeps per lane on its tracker issue.
type Config struct {
	// Comment posts each lane's changes as one sticky comment on the
	// issue its runs name, where the comment sink is on.
	Comment bool `mapstructure:"comment" desc:"keep one \"lane changes\" comment per host, lane and model file on the tracker issue its runs name, edited in place as its memory changes between llama.cpp builds (only where the comment sink is on: sinks.issue_comment.api)"`
	// Thresholds overrides rows' thresholds: "ROW=ABS/PCT,..." (see
	// ParseThresholds); empty keeps every row's default.
	Thresholds string `mapstructure:"thresholds" flag:"change-thresholds" desc:"the least change of a row from one build to the next that is a lane change, as ROW=ABS/PCT,... (ABS in MiB, points for duplicate; PCT of the earlier figure; ROW=off stops watching it); rows not named keep their defaults (docs/regressions.md)"`
	// PageURL is the aggregator's page as the tracker's readers reach it,
	// for the comment's links to the runs and their comparison.
	PageURL string `mapstructure:"page_url" desc:"the aggregator's live page as the tracker's readers reach it (https://gtt.example.org); the lane changes comment links each run and each comparison there; empty names them without links"`
}

// DefaultConfig returns the defaults of the lane_changes.* keys: the
// comment on, every row's default threshold, no page.
func DefaultConfig() Config { return Config{Comment: true} }

// Validate reports every problem of c (conf.FieldError, keys relative to
// lane_changes.*).
func (c Config) Validate() error {
	var p conf.Problems
	if _, err := ParseThresholds(c.Thresholds); err != nil {
		p.Check("thresholds", err)
	}
	if c.PageURL != "" {
		p.Check("page_url", conf.HTTPURL(c.PageURL))
	}
	return p.Err()
}

// Thresholds are the watched rows' thresholds, by row key.
type Thresholds map[string]split.Threshold

// DefaultThresholds are the rows' own (split.Row.Noise).
func DefaultThresholds() Thresholds {
	th := Thresholds{}
	for _, row := range split.Rows {
		if row.Kept() && row.Noise.Watched() {
			th[row.Key] = row.Noise
		}
	}
	return th
}

// ParseThresholds reads "ROW=ABS/PCT,..." over the default thresholds: ROW
// a row's key, ABS its least change in its unit (MiB, or points of a
// share; "128" or "128MiB"), PCT its least change in percent of the
// earlier figure ("5" or "5%"; left out: 0), or "off". Empty gives the
// defaults.
func ParseThresholds(s string) (Thresholds, error) {
	th := DefaultThresholds()
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		key, spec, ok := strings.Cut(part, "=")
		key, spec = strings.TrimSpace(key), strings.TrimSpace(spec)
		row, known := split.RowOf(key)
		if !ok || !known || !row.Kept() {
			return nil, fmt.Errorf("%q: not ROW=ABS/PCT with ROW one of %s", part, strings.Join(watchable(), ", "))
		}
		if spec == "off" {
			delete(th, key)
			continue
		}
		absText, pctText, _ := strings.Cut(spec, "/")
		unit := "MiB"
		if row.Unit == split.UnitPct {
			unit = "%"
		}
		abs, err := parseLimit(absText, unit, "a number")
		if err != nil {
			return nil, fmt.Errorf("%s: ABS %w", key, err)
		}
		var pct float64
		if pctText != "" {
			if pct, err = ParsePct(pctText); err != nil {
				return nil, fmt.Errorf("%s: PCT %w", key, err)
			}
		}
		t := split.Threshold{Abs: abs, Pct: pct}
		if !t.Watched() {
			return nil, fmt.Errorf("%s: a threshold of 0/0 marks every change: give one, or %s=off", key, key)
		}
		th[key] = t
	}
	return th, nil
}

// watchable are the keys of the rows a threshold may watch.
func watchable() []string {
	var out []string
	for _, row := range split.Rows {
		if row.Kept() {
			out = append(out, row.Key)
		}
	}
	return out
}

// rows are the watched rows, in split.Rows order.
func (th Thresholds) rows() []split.Row {
	var out []split.Row
	for _, row := range split.Rows {
		if _, ok := th[row.Key]; ok && row.Kept() {
			out = append(out, row)
		}
	}
	return out
}

// String is th as ParseThresholds reads it, in split.Rows order (a row
// watched by default that th does not watch is ROW=off).
func (th Thresholds) String() string {
	var parts []string
	for _, row := range split.Rows {
		t, ok := th[row.Key]
		switch {
		case ok && row.Kept():
			parts = append(parts, fmt.Sprintf("%s=%s/%s", row.Key, num(t.Abs), num(t.Pct)))
		case row.Kept() && row.Noise.Watched():
			parts = append(parts, row.Key+"=off")
		}
	}
	return strings.Join(parts, ",")
}

// Text is th in words: "peak > 128 MiB and > 5 %, ...".
func (th Thresholds) Text() string {
	var parts []string
	for _, row := range th.rows() {
		t := th[row.Key]
		abs := num(t.Abs) + " MiB"
		if row.Unit == split.UnitPct {
			abs = num(t.Abs) + " points"
			if t.Abs == 1 {
				abs = "1 point"
			}
		}
		s := row.Labels.History + " > " + abs
		if t.Pct > 0 {
			s += " and > " + num(t.Pct) + " %"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "no row watched"
	}
	return strings.Join(parts, ", ")
}

// Changes are the lane changes of each host, lane and model file.
type Changes struct {
	Schema     string     `json:"schema"`
	Thresholds Thresholds `json:"thresholds"`
	Lanes      []Lane     `json:"lanes"`
}

// Lane is one host, lane and model file's changes (its controls, runs
// with offload off, are a lane of their own).
type Lane struct {
	Host    string `json:"host"`
	Lane    string `json:"lane"`
	Model   string `json:"model"`
	Control bool   `json:"control,omitempty"`
	// Builds counts the builds compared; Skipped the runs left out: not
	// complete, or of no known build.
	Builds  int `json:"builds"`
	Skipped int `json:"skipped"`
	// Changes are the changes, the newest build first.
	Changes []LaneChange `json:"changes"`
	// first is the oldest build compared (Carry).
	first *Build
}

// Key names the lane in a comment's marker and the state bucket:
// "HOST/LANE/MODEL".
func (l Lane) Key() string { return l.Host + "/" + l.Lane + "/" + l.Model }

// Title names the lane: "strix01 gpu0 Qwen3.5-4B-Q4_K_M.gguf".
func (l Lane) Title() string {
	return Group{Host: l.Host, Lane: l.Lane, Model: l.Model, Control: l.Control}.Title()
}

// Build is one side of a change: a build of llama.cpp and the run that
// measured it.
type Build struct {
	// Build is the provenance's build text ("b9866 (40f58efe1)"), Number
	// its build number.
	Build  string `json:"llama_build"`
	Number int64  `json:"build_number"`
	// Commit is the measured commit (the source tree's, else the one the
	// build line names); CommitTime its time, when known.
	Commit     string `json:"source_commit,omitempty"`
	CommitTime string `json:"source_commit_time,omitempty"`
	Dirty      *bool  `json:"source_dirty,omitempty"`
	// RunID is the build's measurement: its complete run started last
	// (Runs counts the build's complete runs).
	RunID   string `json:"run_id"`
	Input   string `json:"input,omitempty"`
	Started string `json:"started,omitempty"`
	Issue   string `json:"issue,omitempty"`
	Runs    int    `json:"runs"`

	f    split.Figures
	seq  time.Time // the commit's time, else the build's first start
	when bool      // seq is the commit's time
}

// Name is the build as a change names it: "b9866".
func (b Build) Name() string { return "b" + strconv.FormatInt(b.Number, 10) }

// LaneChange is a lane's memory moving between two consecutive builds.
type LaneChange struct {
	Before Build `json:"before"`
	After  Build `json:"after"`
	// Range is the commits to bisect, "<before>..<after>" ("" when either
	// is unknown).
	Range string `json:"range"`
	// Rows are the rows beyond their threshold, in split.Rows order.
	Rows []RowChange `json:"rows"`
	// Issue is where the change is posted: the issue its later run names,
	// else the earlier's.
	Issue string `json:"issue,omitempty"`
}

// RowChange is one row's move.
type RowChange struct {
	Row    string     `json:"row"`
	Unit   split.Unit `json:"unit"`
	Before split.MiB  `json:"before"`
	After  split.MiB  `json:"after"`
	Diff   split.MiB  `json:"diff"`
	// Pct is the change relative to Before; null from 0 (FromZero).
	Pct      *split.Pct `json:"pct"`
	FromZero bool       `json:"from_zero,omitempty"`
}

// NewChanges finds the lane changes of the runs f selects under th.
func NewChanges(runs []Run, f Filter, th Thresholds) Changes {
	c := Changes{Schema: ChangesSchema, Thresholds: th, Lanes: []Lane{}}
	for _, g := range groupRuns(runs, f) {
		c.Lanes = append(c.Lanes, laneChanges(g.key, g.runs, th))
	}
	return c
}

// laneChanges compares each build of one group's runs with the build
// before it.
func laneChanges(k key, runs []Run, th Thresholds) Lane {
	l := Lane{Host: k.host, Lane: k.lane, Model: k.model, Control: k.control, Changes: []LaneChange{}}
	bs := builds(runs)
	l.Builds = len(bs)
	for _, b := range bs {
		l.Skipped -= b.Runs
	}
	l.Skipped += len(runs)
	if len(bs) > 0 {
		l.first = &bs[0]
	}
	for i := 1; i < len(bs); i++ {
		if ch, ok := compare(bs[i-1], bs[i], th); ok {
			l.Changes = append(l.Changes, ch)
		}
	}
	slices.Reverse(l.Changes)
	return l
}

// compare is the change from build a to build b, if a row moved beyond
// its threshold.
func compare(a, b Build, th Thresholds) (LaneChange, bool) {
	ch := LaneChange{Before: a, After: b, Issue: cmp.Or(b.Issue, a.Issue)}
	if a.Commit != "" && b.Commit != "" {
		ch.Range = a.Commit + ".." + b.Commit
	}
	for _, row := range th.rows() {
		from, to := row.OfFigures(a.f), row.OfFigures(b.f)
		d, ok := row.Change(from, to)
		if !ok || !d.Exceeds(th[row.Key]) {
			continue
		}
		ch.Rows = append(ch.Rows, RowChange{Row: row.Key, Unit: row.Unit, Before: *round2(from), After: *round2(to),
			Diff: d.Diff, Pct: d.Pct, FromZero: d.FromZero})
	}
	return ch, len(ch.Rows) > 0
}

// builds takes a group's runs build by build, in build order: a build is
// a build number and a commit (two commits are one when one starts with
// the other: a build line names 8 or 9 characters of it); its
// measurement is its complete run started last. Runs that are not
// complete or name no build number are left out.
func builds(runs []Run) []Build {
	var bs []*Build
	byNumber := map[int64][]*Build{} // a number's builds, one a commit
	for _, r := range runs {
		n, ok := split.BuildNumber(r.F.Build)
		if !ok || !r.F.Complete {
			continue
		}
		var b *Build
		for _, c := range byNumber[n] {
			if sameCommit(c.Commit, r.F.Commit) {
				b = c
				break
			}
		}
		if b == nil {
			b = &Build{Number: n}
			bs = append(bs, b)
			byNumber[n] = append(byNumber[n], b)
		}
		started := startTime(r.F.Started)
		if !b.when {
			if ct, err := time.Parse(time.RFC3339, r.F.CommitTime); err == nil {
				b.seq, b.when = ct, true
			} else if b.seq.IsZero() || started.Before(b.seq) {
				b.seq = started
			}
		}
		if len(r.F.Commit) > len(b.Commit) {
			b.Commit = r.F.Commit
		}
		b.Runs++
		if b.RunID == "" || later(r, b) {
			b.Build, b.CommitTime, b.Dirty = r.F.Build, r.F.CommitTime, r.F.Dirty
			b.RunID, b.Input, b.Started, b.Issue, b.f = r.ID, r.Input, r.F.Started, r.F.Issue, r.F
		}
	}
	slices.SortStableFunc(bs, func(a, b *Build) int {
		return cmp.Or(cmp.Compare(a.Number, b.Number), boolCmp(!a.when, !b.when), a.seq.Compare(b.seq), cmp.Compare(a.Commit, b.Commit))
	})
	out := make([]Build, len(bs))
	for i, b := range bs {
		out[i] = *b
	}
	return out
}

// later says run r started after the build's measurement so far (the
// same time: the larger run id).
func later(r Run, b *Build) bool {
	t, bt := startTime(r.F.Started), startTime(b.Started)
	if c := t.Compare(bt); c != 0 {
		return c > 0
	}
	return r.ID > b.RunID
}

func startTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

// sameCommit says two commits name the same one: equal, or one the
// start of the other ("" matches only "").
func sameCommit(a, b string) bool {
	if a == "" || b == "" {
		return a == b
	}
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
}

// Carry returns l's changes with those of old (the changes posted before)
// that l's runs no longer show because their runs left the store: the
// changes up to l's oldest build (by build order), which is where l's
// runs begin now. The result is newest first.
func Carry(old []LaneChange, l Lane) []LaneChange {
	out := slices.Clone(l.Changes)
	if l.first == nil {
		return append(out, old...)
	}
	for _, c := range old {
		if !buildAfter(c.After, *l.first) && !slices.ContainsFunc(out, func(n LaneChange) bool { return n.Before.RunID == c.Before.RunID && n.After.RunID == c.After.RunID }) {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b LaneChange) int { return -buildCmp(a.After, b.After) })
	return out
}

// buildAfter says a comes after b in build order.
func buildAfter(a, b Build) bool { return buildCmp(a, b) > 0 }

// buildCmp orders two builds as builds does, from what a change records
// of them (a recorded build's first start is gone: its measurement's
// start stands in).
func buildCmp(a, b Build) int {
	if a.Number != b.Number {
		return cmp.Compare(a.Number, b.Number)
	}
	if sameCommit(a.Commit, b.Commit) {
		return 0
	}
	at, aok := time.Parse(time.RFC3339, a.CommitTime)
	bt, bok := time.Parse(time.RFC3339, b.CommitTime)
	if (aok == nil) != (bok == nil) {
		return boolCmp(aok != nil, bok != nil)
	}
	if aok != nil {
		at, bt = startTime(a.Started), startTime(b.Started)
	}
	return cmp.Or(at.Compare(bt), cmp.Compare(a.Commit, b.Commit))
}
