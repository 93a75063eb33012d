package sinks

import (
	"maps"
	"sync"
	"time"
)

// Outcome is what happened to one attempt, or one report, at one sink.
type Outcome uint8

// Outcomes reported to an Observer.
const (
	// OutcomeDelivered: the sink accepted the report.
	OutcomeDelivered Outcome = iota + 1
	// OutcomeRetrying: a transient failure; the report stays queued and is
	// retried after Event.Delay.
	OutcomeRetrying
	// OutcomeFailed: a permanent failure; the report is dropped for this
	// sink.
	OutcomeFailed
	// OutcomeDropped: the report was dropped without a permanent error: the
	// sink's queue was full (ErrQueueFull) or Close's context ended first
	// (ErrUndelivered).
	OutcomeDropped
	// OutcomeDeferred: the sink's queue held FanoutConfig.MaxPending
	// reports; this one keeps its place with only its run id, and is
	// reloaded (FanoutConfig.Reload) when its turn comes (Err is
	// ErrQueueFull). Not an end: one Requeued, Withdrawn or Dropped
	// follows (a reloaded report whose write fails and finds no room is
	// deferred again).
	OutcomeDeferred
	// OutcomeRequeued: a deferred report was reloaded and is being written
	// (its Delivered, Retrying or Failed follows).
	OutcomeRequeued
	// OutcomeWithdrawn: Reload had nothing to write for a deferred report,
	// or Keep refused a report right before its write (the run changed
	// meanwhile, or is no longer this process's to write).
	OutcomeWithdrawn
)

// String returns the outcome's lower-case name, usable as a metric label.
func (o Outcome) String() string {
	switch o {
	case OutcomeDelivered:
		return "delivered"
	case OutcomeRetrying:
		return "retrying"
	case OutcomeFailed:
		return "failed"
	case OutcomeDropped:
		return "dropped"
	case OutcomeDeferred:
		return "deferred"
	case OutcomeRequeued:
		return "requeued"
	case OutcomeWithdrawn:
		return "withdrawn"
	}
	return "unknown"
}

// Event describes one attempt or drop at one sink of a Fanout.
type Event struct {
	Sink    string // Target.Name
	RunID   string // the report's run id
	Outcome Outcome
	Attempt int           // 1-based attempt number of this report at this sink (0 for a drop before any attempt)
	Err     error         // nil for OutcomeDelivered
	Delay   time.Duration // the wait before the next attempt (OutcomeRetrying)
}

// Observer receives every Event of a Fanout, so the aggregator can count
// and expose sink failures. Observe is called from the Fanout's worker
// goroutines, possibly concurrently, and must return quickly.
type Observer interface {
	Observe(e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(e Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Counters is an Observer that counts events per sink. The zero value is
// ready to use and safe for concurrent use.
type Counters struct {
	mu sync.Mutex
	m  map[string]SinkCounts
}

// SinkCounts are the counts of one sink.
type SinkCounts struct {
	Delivered uint64 // reports accepted
	Retries   uint64 // transient failures (each followed by a retry)
	Failed    uint64 // reports dropped on a permanent error
	Dropped   uint64 // reports dropped because the queue was full or Close ended first
	Deferred  uint64 // reports deferred by a full queue (only the run id kept)
	Requeued  uint64 // deferred reports reloaded for a write
	Withdrawn uint64 // deferred reports Reload had nothing for
	LastError string // the most recent failure's text ("" if none)
}

var _ Observer = (*Counters)(nil)

// Observe counts e.
func (c *Counters) Observe(e Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]SinkCounts)
	}
	s := c.m[e.Sink]
	switch e.Outcome {
	case OutcomeDelivered:
		s.Delivered++
	case OutcomeRetrying:
		s.Retries++
	case OutcomeFailed:
		s.Failed++
	case OutcomeDropped:
		s.Dropped++
	case OutcomeDeferred:
		s.Deferred++
	case OutcomeRequeued:
		s.Requeued++
	case OutcomeWithdrawn:
		s.Withdrawn++
	}
	if e.Err != nil && e.Outcome != OutcomeDeferred { // a deferral is no failure
		s.LastError = e.Err.Error()
	}
	c.m[e.Sink] = s
}

// Snapshot returns a copy of the counts, keyed by sink name.
func (c *Counters) Snapshot() map[string]SinkCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m)
}
