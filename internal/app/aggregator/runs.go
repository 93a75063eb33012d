package aggregator

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// RunState is the durable state of one run: its fold and what the
// aggregator needs to close it. It is what the run's key in the state bucket
// holds.
type RunState struct {
	Origin events.Origin `json:"origin"`
	Fold   *split.Fold   `json:"fold"`
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
// nothing and leaves a closed run closed.
func ApplyTo(st *RunState, d events.Decoded) (fresh bool) {
	fresh = d.ApplyTo(st.Fold)
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
// events when no run-started event said them.
func Report(st *RunState) split.Report {
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
	return r
}

// MarshalState encodes a run's durable state.
func MarshalState(st *RunState) ([]byte, error) { return json.Marshal(st) }

// UnmarshalState decodes a state written by MarshalState, folding with
// opts from now on.
func UnmarshalState(b []byte, opts split.Options) (*RunState, error) {
	st := &RunState{Fold: split.NewFold(opts)}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("decode run state: %w", err)
	}
	return st, nil
}
