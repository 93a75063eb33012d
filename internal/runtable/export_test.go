package runtable

import (
	"encoding/json"

	"github.com/gttsplit/gttsplit/pkg/events"
)

// What the external tests (package runtable_test) look at inside.
var (
	StateKey   = stateKey
	OpenKey    = openKey
	PendKey    = pendKey
	SummaryKey = summaryKey

	Fingerprint     = fingerprint
	DigestFalseRate = digestFalseRate
)

// The bounds of a run's fingerprints.
const (
	DigestExact       = digestExact
	DigestFilterBytes = digestFilterBytes
)

// Compacted is RunState.compacted.
func (st *RunState) Compacted() *RunState { return st.compacted() }

// Holds is RunState.holds.
func (st *RunState) Holds(d events.Decoded) bool { return st.holds(d) }

// PlainState is st as encoding/json writes the stored form (MarshalState
// splices the fold in instead).
func PlainState(st *RunState) ([]byte, error) {
	return json.Marshal(storedState{V: StateVersion, stateFields: (*stateFields)(st)})
}
