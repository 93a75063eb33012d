package aggregator

import (
	"sync"

	"github.com/gttsplit/gttsplit/pkg/sinks"
)

// deliveries tracks which written splits every sink has settled (delivered,
// or failed for good), so a run's state can stop asking for a re-send: a
// closed run keeps SinksPending until then, and an aggregator that restarts
// before it was settled writes the split to the sinks again (they are
// idempotent).
type deliveries struct {
	mu      sync.Mutex
	sinks   int
	settled map[string]int // run -> sinks that settled its latest split
	done    []string
}

func newDeliveries(nSinks int) *deliveries {
	return &deliveries{sinks: nSinks, settled: map[string]int{}}
}

// Observe is the Fanout's observer.
func (d *deliveries) Observe(e sinks.Event) {
	switch e.Outcome {
	case sinks.OutcomeDelivered, sinks.OutcomeFailed:
	default:
		return // retrying, or dropped (not delivered: keep pending)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.settled[e.RunID]++
	if d.settled[e.RunID] >= d.sinks {
		delete(d.settled, e.RunID)
		d.done = append(d.done, e.RunID)
	}
}

// queued starts counting for a split of run handed to the sinks.
func (d *deliveries) queued(run string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.settled[run] = 0
}

// take returns the runs whose split every sink settled since the last call.
func (d *deliveries) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.done
	d.done = nil
	return out
}

// pending says whether a split handed to the sinks for a run that match
// selects is not settled by every sink yet.
func (d *deliveries) pending(match func(run string) bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for run := range d.settled {
		if match(run) {
			return true
		}
	}
	return false
}
