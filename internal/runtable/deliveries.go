package runtable

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/gttsplit/gttsplit/pkg/sinks"
)

// Deliveries tracks which written splits every sink has settled
// (delivered, or failed for good), so a run's state can stop asking for a
// re-send: a closed run stays under its partition's open key, SinksPending,
// until then, and the partition's next owner (or this aggregator after a
// restart) writes the split to the sinks again (they are idempotent).
type Deliveries struct {
	// mu is taken last (under a partition's ckptMu, or the Fanout's mu
	// when it tells Observe): no other lock is taken while it is held.
	mu    sync.Mutex
	sinks int
	// runs: run -> what each sink did with its latest split: settled
	// (true), or gave it up in this process (false: dropped at a full
	// queue or at close, or withdrawn because the run re-opened or its
	// partition moved; the split stays pending in the state bucket).
	runs map[string]map[string]bool
	// done are the runs every sink settled, by partition (of parts).
	done  map[int][]string
	parts int
	// overflow is set when a sink dropped a split at a full queue (past
	// its deferred ids' cap): see part.resendOverflow.
	overflow atomic.Bool
	// resent are the runs whose split was read back from the state
	// bucket and handed to the sinks again (a start, a take-over, a
	// re-send after an overflow), until every sink settled or gave it up:
	// the table is catching up meanwhile (Table.Ready).
	resent map[string]struct{}
}

// NewDeliveries returns a Deliveries to give as the Fanout's Observer and
// as Config.Deliveries: the table's New tells it how many sinks the
// Fanout (Config.Sinks) writes to.
func NewDeliveries() *Deliveries {
	return &Deliveries{runs: map[string]map[string]bool{}, done: map[int][]string{}}
}

// Observe is the Fanout's observer.
func (d *Deliveries) Observe(e sinks.Event) {
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
	delete(d.resent, e.RunID)
	for _, ok := range by {
		if !ok {
			return // not settled everywhere: stays SinksPending
		}
	}
	p := partitionOf(e.RunID, d.parts)
	d.done[p] = append(d.done[p], e.RunID)
}

// track sets the sinks counted, those fan writes to, and the partition
// count the settled runs are sorted by.
func (d *Deliveries) track(fan *sinks.Fanout, partitions int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sinks = len(fan.Targets())
	d.parts = partitions
}

// queued starts counting for a split of run handed to the sinks.
func (d *Deliveries) queued(run string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runs[run] = map[string]bool{}
}

// resending is queued for a split read back from the state bucket: the
// table catches up until every sink settled it (or gave it up).
func (d *Deliveries) resending(run string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runs[run] = map[string]bool{}
	if d.resent == nil {
		d.resent = map[string]struct{}{}
	}
	d.resent[run] = struct{}{}
}

// notResent forgets a re-send the sinks did not take.
func (d *Deliveries) notResent(run string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.resent, run)
	delete(d.runs, run)
}

// catchingUp is the number of re-sent splits not settled by every sink.
func (d *Deliveries) catchingUp() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.resent)
}

// take returns the runs of partition p whose split every sink settled
// since the last call.
func (d *Deliveries) take(p int) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.done[p]
	delete(d.done, p)
	return out
}

// pending says whether a split handed to the sinks for a run of partition
// p is not settled (or given up) by every sink yet.
func (d *Deliveries) pending(p int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for run := range d.runs {
		if partitionOf(run, d.parts) == p {
			return true
		}
	}
	return false
}

// requeue puts a settled run back for the next take (its state could not
// be read this time).
func (d *Deliveries) requeue(p int, run string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done[p] = append(d.done[p], run)
}
