package runtable

import (
	"context"
	"fmt"
	"time"
)

// Holding for the heap. Shedding frees what the runs take, not what the
// broker takes: an embedded server's file store keeps in memory a block
// it wrote or read (4 MiB of the state bucket, 8 of the events stream)
// while writes or reads of it come and for 10 s after the last, so its
// block buffers grow with how fast the table writes and reads the
// broker, whatever the runs take (a flood of 50,000 runs closing: 162 MiB
// of block buffers in 242 MiB of heap near its peak, 105 of them blocks
// being written). While the live heap is past heapShare of the runtime's
// limit (heapExcess), or the heap's objects past holdShare of it (the
// collector behind), a partition holds what makes the broker write and
// read most:
//
//   - its next pull (the events that start new runs, each written, shed,
//     read back), holdPull;
//   - its close pass: the closes (four writes a run, its split event),
//     the read-backs of shed runs to close them, compaction, re-sends
//     (closesHeld);
//
// until the heap is back under its share: the broker lets its idle
// blocks go and the collector frees them. Its checkpoints go on (the
// events in hand are written and acknowledged), and so does the settling
// of the sinks' deliveries. A hold lasts at most holdAtMost (past the
// broker's cache expiry of 10 s); then one pull and one pass go ahead
// and the next are held again, so a heap kept past its share by anything
// else slows the table down and does not stop it. While any is held
// readiness says the table is catching up, gttsplit_memory_held says how
// many are, and gttsplit_memory_holds_total counts them.

const (
	// holdAtMost is the longest a pull or a close pass is held.
	holdAtMost = 15 * time.Second
	// holdTick is how often a held pull looks at the heap again.
	holdTick = 100 * time.Millisecond
)

// holdShare is the share of the runtime's soft memory limit the heap's
// objects (the live ones and the garbage not collected yet) may reach
// before the pulls and close passes are held too: past it the collector
// is behind what the table has the broker allocate (a block of 4 or 8
// MiB read again for a key once a collection freed it), and the limit
// would be passed. (Not the runtime's whole memory: the runtime keeps
// freed pages up to about 95 % of its limit by design.)
const holdShare = 0.95

// holding says the live heap is past its share, or the heap's objects
// past holdShare of the runtime's limit (and the runs are bounded).
func (t *Table) holding() bool {
	if t.mem.budget <= 0 {
		return false
	}
	// A test's stand-in for the heap (t.heapExcess) stands in for both.
	return t.heapExcess() > 0 || (t.mem.excess.Load() == nil && runtimeBehind())
}

// runtimeBehind says the heap's objects, live and not collected yet,
// take more than holdShare of the runtime's soft limit (false: no limit).
func runtimeBehind() bool {
	objects, limit, ok := runtimeFigure("/memory/classes/heap/objects:bytes")
	return ok && float64(objects) > holdShare*float64(limit)
}

// holdLongest is holdAtMost, or a test's.
func (t *Table) holdLongest() time.Duration {
	if d := t.mem.holdFor.Load(); d > 0 {
		return time.Duration(d)
	}
	return holdAtMost
}

// holdPull waits before c's next pull while the heap is past its share,
// at most holdLongest, or until ctx ends. A held consumer is not taken for
// stalled (its last delivery's time moves on).
func (t *Table) holdPull(ctx context.Context, c *partConsumer) {
	if !t.holding() {
		return
	}
	t.mem.pullsHeld.Add(1)
	t.m.memHolds.Inc()
	t.heldChanged()
	defer func() {
		t.mem.pullsHeld.Add(-1)
		t.heldChanged()
	}()
	until := time.Now().Add(t.holdLongest())
	tk := time.NewTicker(holdTick)
	defer tk.Stop()
	for t.holding() && time.Now().Before(until) {
		c.last.Store(time.Now().UnixNano())
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// closesHeld says the partition's close pass waits for the heap: past its
// share, and held for less than holdLongest (then one pass goes ahead,
// and the next is held again). pt.ckptMu is held.
func (pt *part) closesHeld() bool {
	t := pt.t
	now := time.Now()
	switch {
	case !t.holding():
		if !pt.heldSince.IsZero() {
			pt.heldSince = time.Time{}
			pt.held.Store(false)
			t.heldChanged()
		}
		return false
	case pt.heldSince.IsZero():
		pt.heldSince = now
		pt.held.Store(true)
		t.m.memHolds.Inc()
		t.heldChanged()
		return true
	case now.Sub(pt.heldSince) < t.holdLongest():
		return true
	}
	pt.heldSince = now // held its longest: this pass goes ahead
	return false
}

// heldChanged sets gttsplit_memory_held and readiness from the pulls and
// close passes held now.
func (t *Table) heldChanged() {
	n := t.mem.pullsHeld.Load()
	for _, pt := range t.parts() {
		if pt.held.Load() {
			n++
		}
	}
	t.m.memHeld.Set(float64(n))
	if n > 0 {
		t.health.set("held", fmt.Sprintf("catching up: %d pulls and close passes held while the live heap is past %.0f %% of the runtime's memory limit (until it is back under: the embedded broker lets go of the blocks it wrote and read)", n, 100*heapShare))
	} else {
		t.health.clear("held")
	}
}
