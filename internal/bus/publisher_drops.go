package bus

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gttsplit/gttsplit/pkg/events"
)

// counters are what happened to the events handed to Publish: the pump
// counts, Stats reads them without a lock.
type counters struct {
	published, spooled, drained, dropped, corrupt, rejected atomic.Uint64
	spoolBytes                                              atomic.Int64
}

func (c *counters) stats() PublisherStats {
	return PublisherStats{
		Published:    c.published.Load(),
		Spooled:      c.spooled.Load(),
		Drained:      c.drained.Load(),
		Dropped:      c.dropped.Load(),
		Rejected:     c.rejected.Load(),
		SpoolBytes:   c.spoolBytes.Load(),
		SpoolCorrupt: c.corrupt.Load(),
	}
}

// dropBook counts, by run, the events dropped and the spooled events the
// broker acknowledged: a spool may hold an earlier run's events, whose
// drops are not this run's (DroppedOf, RunLost, DrainedRuns). Its zero
// value is empty and ready.
type dropBook struct {
	// mu is taken last (after Publisher.mu and pump.mu): nothing is
	// locked while it is held.
	mu      sync.Mutex
	dropped map[string]runDrops // by run token
	drained map[string]int      // by run token
}

// runDrops counts the dropped events of a run.
type runDrops struct {
	events    uint64 // all of them
	runEvents uint64 // its run-started and run-finished events
}

// runOf returns the run token of an event's subject.
func runOf(w events.Wire) string { return w.Subject[strings.LastIndexByte(w.Subject, '.')+1:] }

// noteDropped counts a dropped event for its run.
func (b *dropBook) noteDropped(w events.Wire) {
	run := runOf(w)
	b.mu.Lock()
	if b.dropped == nil {
		b.dropped = map[string]runDrops{}
	}
	d := b.dropped[run]
	d.events++
	if isRunEvent(w) {
		d.runEvents++
	}
	b.dropped[run] = d
	b.mu.Unlock()
}

// noteDrained counts a spooled event the broker acknowledged, for its run.
func (b *dropBook) noteDrained(w events.Wire) {
	b.mu.Lock()
	if b.drained == nil {
		b.drained = map[string]int{}
	}
	b.drained[runOf(w)]++
	b.mu.Unlock()
}

// of returns the drops of the run runID.
func (b *dropBook) of(runID string) runDrops {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped[events.Token(runID)]
}

// drainedRuns returns a copy of the drained counts by run token.
func (b *dropBook) drainedRuns() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.drained)
}

// countDrop counts a dropped event, in all and for its run.
func (pm *pump) countDrop(w events.Wire) {
	pm.n.dropped.Add(1)
	pm.runs.noteDropped(w)
}
