package aggregator

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/gttsplit/gttsplit/pkg/sinks"
)

// deliveries tracks which written splits every sink has settled (delivered,
// or failed for good), so a run's state can stop asking for a re-send: a
// closed run keeps SinksPending until then, and an aggregator that restarts
// (or takes the run's partition over) before it was settled writes the split
// to the sinks again (they are idempotent).
type deliveries struct {
	mu    sync.Mutex
	sinks int
	// runs: run -> what each sink did with its latest split: settled
	// (true), or gave it up in this process (false: dropped at a full
	// queue or at close, or withdrawn because the run re-opened or its
	// partition moved; the split stays pending in the state bucket).
	runs map[string]map[string]bool
	done []string
	// overflow is set when a sink dropped a split at a full queue (past
	// its deferred ids' cap): see Service.resendOverflow.
	overflow atomic.Bool
}

func newDeliveries(nSinks int) *deliveries {
	return &deliveries{sinks: nSinks, runs: map[string]map[string]bool{}}
}

// Observe is the Fanout's observer.
func (d *deliveries) Observe(e sinks.Event) {
	var settled bool
	switch e.Outcome {
	case sinks.OutcomeDelivered, sinks.OutcomeFailed:
		settled = true
	case sinks.OutcomeDropped, sinks.OutcomeWithdrawn:
		if errors.Is(e.Err, sinks.ErrQueueFull) {
			d.overflow.Store(true)
		}
	default:
		return // retrying, deferred (reloaded in its turn) or requeued
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	by := d.runs[e.RunID]
	if by == nil {
		by = map[string]bool{}
		d.runs[e.RunID] = by
	}
	by[e.Sink] = settled
	if len(by) < d.sinks {
		return
	}
	delete(d.runs, e.RunID)
	for _, ok := range by {
		if !ok {
			return // not settled everywhere: stays SinksPending
		}
	}
	d.done = append(d.done, e.RunID)
}

// queued starts counting for a split of run handed to the sinks.
func (d *deliveries) queued(run string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runs[run] = map[string]bool{}
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
// selects is not settled (or given up) by every sink yet.
func (d *deliveries) pending(match func(run string) bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for run := range d.runs {
		if match(run) {
			return true
		}
	}
	return false
}
