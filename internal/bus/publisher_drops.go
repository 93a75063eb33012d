package bus

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gttsplit/gttsplit/pkg/events"
)

// PublisherStats counts what happened to the events handed to Publish.
type PublisherStats struct {
	Published    uint64 // acknowledged by the broker when sent directly
	Spooled      uint64 // written to the spool
	Drained      uint64 // spooled events later acknowledged by the broker
	Dropped      uint64 // neither delivered nor spooled (see Dropped)
	Rejected     uint64 // of Dropped: refused by the broker, set aside in RejectedDir
	SpoolBytes   int64  // size of the spool on disk
	SpoolCorrupt uint64 // corrupt or torn spool records cut off
}

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

// isRunEvent reports a run-started or run-finished event (subject
// gttsplit.run.…), which may use the spool's reserve.
func isRunEvent(w events.Wire) bool {
	return strings.HasPrefix(w.Subject, events.SubjectRoot+"."+string(events.KindRun)+".")
}
