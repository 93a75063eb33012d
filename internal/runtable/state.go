package runtable

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// RunState is the durable state of one run: its fold and what the
// aggregator needs to close it. It is what the run's key in the state bucket
// holds (see MarshalState for the stored format).
//
// A closed run's state is compacted once its grace after the close passed
// (ServiceConfig.CompactAfter): the fold is dropped (Fold nil) and Seen
// keeps what it took in, so that a repeated event is still recognised; the
// written split (Reported), the counts and the origin stay. A compact
// record folds nothing: a new event for it is dead-lettered (see
// Service.Handle).
type RunState struct {
	Origin events.Origin `json:"origin"`
	Fold   *split.Fold   `json:"fold,omitempty"`
	// LastEvent is when (aggregator clock) an event last reached the run;
	// the idle timeout runs from it.
	LastEvent time.Time `json:"last_event"`
	// Finished is set once the run-finished event was applied.
	Finished bool `json:"finished"`
	// FinishedSeq is the stream sequence of the run-finished message (the
	// highest, if it came more than once); 0 when not from a stream.
	FinishedSeq uint64 `json:"finished_seq,omitempty"`
	// Dropped is the number of events the collector said it dropped (a
	// full spool): such a run can never be complete by content.
	Dropped uint64 `json:"dropped,omitempty"`
	// Reported is the JSON of the last split written to the sinks, so an
	// unchanged split is not written again.
	Reported string `json:"reported,omitempty"`
	// Closed is set when the run was reported complete, or incomplete after
	// the idle timeout. A later event re-opens it.
	Closed bool `json:"closed,omitempty"`
	// SinksPending is set while the last split written is not yet settled
	// by every sink; a restarted aggregator sends it to the sinks again.
	SinksPending bool `json:"sinks_pending,omitempty"`
	// Splits counts the distinct splits written (the n of the next split
	// event's id is Splits-1 after the increment).
	Splits int `json:"splits,omitempty"`
	// ClosedAt is when (aggregator clock) the run was last closed; the
	// grace before its compaction runs from it. Zero in a state written
	// before the stored format had it.
	ClosedAt time.Time `json:"closed_at,omitzero"`
	// Seen is what the dropped fold of a compact record took in; nil in a
	// full state.
	Seen *split.Seen `json:"seen,omitempty"`
	// Replaces is the incomplete split written at the run's last close,
	// once a late event of its own host re-opened it: the run's splits
	// from then on replace that one and say so (see Report). nil until a
	// run is re-opened.
	Replaces *split.Replaced `json:"replaces,omitempty"`
	// Digests are the fingerprints of the events the run folded, from its
	// first on (digest.go): a run closed complete tells by them a
	// byte-identical re-send from one that differs. nil in a state an
	// earlier version began (see finalCheck).
	Digests *Digests `json:"digests,omitempty"`

	// reopen is set when a closed state was loaded to fold a new event
	// into: its next write puts the partition's open marker again.
	reopen bool
}

// Compact reports whether st is a closed run's compact record (no fold).
func (st *RunState) Compact() bool { return st.Fold == nil }

// compacted returns the compact record of a closed full state.
func (st *RunState) compacted() *RunState {
	c := *st
	seen := st.Fold.Seen()
	c.Fold, c.Seen, c.reopen = nil, &seen, false
	return &c
}

// holds reports whether a compact record already took in everything d
// brings (a repeated event), as the fold's Apply would find.
func (st *RunState) holds(d events.Decoded) bool { return seenHolds(st.Seen, d) }

// seenHolds reports whether s, what a fold took in, holds everything d
// brings: its start, its lines, its sample, its finish.
func seenHolds(s *split.Seen, d events.Decoded) bool {
	switch {
	case d.Started != nil:
		return s.Run
	case d.Span != nil:
		for seq := d.Span.First; ; seq++ {
			if !s.Lines[d.Span.Stream].Has(seq) {
				return false
			}
			if seq == d.Span.Last {
				return true
			}
		}
	case d.Lines != nil:
		for _, l := range d.Lines {
			if !s.Lines[l.Stream].Has(l.Seq) {
				return false
			}
		}
		return true
	case d.Sample != nil:
		return s.Samples.Has(d.Sample.Seq)
	case d.Finished != nil:
		return s.Finish
	}
	return true
}

// complete reports whether st's run closed complete: its finish was
// folded and everything the finish announced (Fold.Complete), so nothing
// changes it any more (see final). A run closed incomplete (the idle
// timeout) is not.
func (st *RunState) complete() bool {
	if !st.Closed {
		return false
	}
	if st.Compact() {
		var r struct {
			Run struct {
				Complete bool `json:"complete"`
			} `json:"run"`
		}
		return json.Unmarshal([]byte(st.Reported), &r) == nil && r.Run.Complete
	}
	return st.Finished && st.Fold.Complete()
}

// reopened records, as a late event re-opens st's run (closed
// incomplete), the split written at its close: the run's next split
// replaces it. A state without a written split has nothing to replace.
func (st *RunState) reopened() {
	if st.Reported == "" {
		return
	}
	var w struct {
		Detail struct {
			Missing []string `json:"missing"`
		} `json:"detail"`
	}
	_ = json.Unmarshal([]byte(st.Reported), &w) // (the split this aggregator wrote)
	p := &split.Replaced{Split: max(st.Splits-1, 0), Missing: w.Detail.Missing}
	if !st.ClosedAt.IsZero() {
		p.Written = st.ClosedAt.UTC().Format(time.RFC3339)
	}
	st.Replaces = p
}

// Runs holds the runs an aggregator (or a replay) is folding. It is not
// safe for concurrent use.
type Runs struct {
	opts split.Options
	m    map[string]*RunState
}

// NewRuns returns an empty table folding with opts.
func NewRuns(opts split.Options) *Runs {
	return &Runs{opts: opts, m: map[string]*RunState{}}
}

// Get returns the run's state, or nil.
func (rs *Runs) Get(id string) *RunState { return rs.m[id] }

// Put installs a state (loaded from the state bucket).
func (rs *Runs) Put(id string, st *RunState) { rs.m[id] = st }

// Delete forgets a run (its state stays in the bucket).
func (rs *Runs) Delete(id string) { delete(rs.m, id) }

// IDs lists the runs, sorted.
func (rs *Runs) IDs() []string {
	ids := make([]string, 0, len(rs.m))
	for id := range rs.m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// NewState returns an empty state for a run of origin o.
func (rs *Runs) NewState(o events.Origin) *RunState { return NewRunState(o, rs.opts) }

// Apply folds one decoded event into its run, creating the run on its first
// event. now is the aggregator's clock (for the idle timeout only; it never
// reaches the split). Split events (the aggregator's own output) are not
// folded and return ok false.
func (rs *Runs) Apply(d events.Decoded, now time.Time) (id string, ok bool) {
	if d.Type == events.TypeSplit {
		return "", false
	}
	id = d.Origin.RunID
	st := rs.m[id]
	if st == nil {
		st = rs.NewState(d.Origin)
		rs.m[id] = st
	}
	ApplyTo(st, d)
	st.LastEvent = now
	return id, true
}

// ApplyTo folds one decoded event into st.
//
// It reports whether the event brought anything new: a duplicate (every
// line and sample of it already folded, a repeated start or finish) changes
// nothing and leaves a closed run closed. A compact record folds nothing
// (the caller dead-letters a new event for it first) and reports false.
func ApplyTo(st *RunState, d events.Decoded) (fresh bool) {
	if st.Compact() {
		return false
	}
	fresh = st.Fold.Apply(d.Input())
	if d.Finished != nil {
		st.Finished = true
		if n := d.Finished.Detail.DroppedEvents; n > st.Dropped {
			st.Dropped = n
		}
	}
	if fresh {
		st.Closed = false
	}
	return fresh
}

// Report computes the run's split. The run's id, host and lane come from its
// events when no run-started event said them. A compact record's split is
// the one written at its close.
func Report(st *RunState) split.Report {
	if st.Compact() {
		var r split.Report
		if err := json.Unmarshal([]byte(st.Reported), &r); err != nil || r.Run.ID == "" {
			r.Run.ID, r.Run.Host, r.Run.Lane = st.Origin.RunID, st.Origin.Host, st.Origin.Lane
		}
		return r
	}
	r := st.Fold.Report()
	if r.Run.ID == "" {
		r.Run.ID = st.Origin.RunID
	}
	if r.Run.Host == "" {
		r.Run.Host = st.Origin.Host
	}
	if r.Run.Lane == "" {
		r.Run.Lane = st.Origin.Lane
	}
	if st.Replaces != nil {
		r.Replacing(*st.Replaces)
	}
	return r
}

// StateVersion is the version of the stored run state ("v"): 2 since
// closed runs are compacted. A state without "v" (written before) is a
// full state and loads as one.
const StateVersion = 2

// stateFields is RunState without its methods, for the stored form.
type stateFields RunState

// storedState is what a run's key holds: the state, its version, and for
// a compact record the written split as a JSON object ("split", compact
// JSON) in place of "reported" (the indented split.JSON text).
type storedState struct {
	V int `json:"v"`
	*stateFields
	Split json.RawMessage `json:"split,omitempty"`
}

// MarshalState encodes a run's durable state.
func MarshalState(st *RunState) ([]byte, error) {
	if !st.Compact() {
		// The fold's own encoding is spliced in as it is: through
		// encoding/json it would be scanned and copied again (the fold is
		// most of the state).
		fb, err := st.Fold.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("encode run state: fold: %w", err)
		}
		head := *st
		head.Fold = nil
		hb, err := json.Marshal(storedState{V: StateVersion, stateFields: (*stateFields)(&head)})
		if err != nil {
			return nil, err
		}
		// hb is {"v":N,...}: the fold goes in after the version.
		i := bytes.IndexByte(hb, ',')
		if i < 0 {
			return nil, fmt.Errorf("encode run state: unexpected %q", hb)
		}
		out := make([]byte, 0, len(hb)+len(fb)+9)
		out = append(out, hb[:i]...)
		out = append(out, `,"fold":`...)
		out = append(out, fb...)
		return append(out, hb[i:]...), nil
	}
	c := *st
	w := storedState{V: StateVersion, stateFields: (*stateFields)(&c)}
	if c.Reported != "" {
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(c.Reported)); err != nil {
			return nil, fmt.Errorf("encode run state: written split: %w", err)
		}
		w.Split, c.Reported = buf.Bytes(), ""
	}
	return json.Marshal(w)
}

// UnmarshalState decodes a state written by MarshalState (any version up
// to StateVersion), folding with opts from now on.
func UnmarshalState(b []byte, opts split.Options) (*RunState, error) {
	st := &RunState{Fold: split.NewFold(opts)}
	w := storedState{stateFields: (*stateFields)(st)}
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("decode run state: %w", err)
	}
	if w.V > StateVersion {
		return nil, fmt.Errorf("decode run state: format v%d is newer than this aggregator reads (v%d): upgrade it", w.V, StateVersion)
	}
	if st.Seen != nil {
		st.Fold = nil
		if len(w.Split) > 0 {
			// The indented text split.JSON wrote, byte for byte.
			var buf bytes.Buffer
			if err := json.Indent(&buf, w.Split, "", "  "); err != nil {
				return nil, fmt.Errorf("decode run state: written split: %w", err)
			}
			buf.WriteByte('\n')
			st.Reported = buf.String()
		}
	}
	return st, nil
}
