package runtable

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// The partitions' pulls kept together in the events stream: with an
// embedded broker each partition's consumer reads the stream's 8 MiB
// blocks from its own place, and the broker keeps a block 10 s after its
// last read, so partitions at different places keep as many blocks (a
// flood of 100,000 closed runs: 3 to 7 of them, 24 to 56 MiB, near its
// peak). When the broker is in this process (Config.BrokerRunCost) and the
// runs are bounded, a pull waits (at most floorStale) while its consumer,
// with events still pending, is more than pullSpan bytes of events past
// the consumer furthest behind of every partition owned with events
// pending (aheadOfFloor). A broker elsewhere keeps its blocks in its own
// memory: there the partitions pull as they go. The cost: in a backlog a
// partition ahead waits for the one furthest behind (one that got no event
// for floorStale is left out), so a backlog laid in the stream partition
// after partition is folded about in that order. That is said:
// gttsplit_pull_floor_waiting is how many pulls wait now,
// gttsplit_pull_floor_waits_total and gttsplit_pull_floor_wait_seconds_total
// count the waits and the time they took, and /readyz's body says the
// table catches up in stream order while any waits (Table.Paced; not
// unready: the partition furthest behind folds meanwhile, as fast as
// without the floor).

// pullSpan is how far in the stream (bytes of events, about) a consumer
// may run ahead of the one furthest behind.
const pullSpan = 8 << 20

// floorWaits is how many pulls wait for the floor now, and a test's
// stand-ins.
type floorWaits struct {
	waiting atomic.Int64
	// span and stale stand in (export_test.go: SetPullFloor), when not
	// 0, for pullSpan (bytes) and floorStale, and for a broker in this
	// process.
	span, stale atomic.Int64
}

// floorSpan is pullSpan, or a test's.
func (t *Table) floorSpan() int64 {
	if s := t.floor.span.Load(); s > 0 {
		return s
	}
	return pullSpan
}

// floorFor is floorStale, or a test's: how long a consumer that got no
// message stays a floor, and the longest a pull waits.
func (t *Table) floorFor() time.Duration {
	if d := t.floor.stale.Load(); d > 0 {
		return time.Duration(d)
	}
	return floorStale
}

// pullFloor is the lowest stream sequence of the consumers of the
// events stream, of every partition owned, with events pending, that
// said so within floorStale (0: none).
func (t *Table) pullFloor(now time.Time) uint64 {
	var floor uint64
	for _, pt := range t.parts() {
		for _, c := range pt.cons {
			if c.stream != t.cfg.Stream || c.behind.Load() == 0 {
				continue
			}
			if at := c.seqAt.Load(); at == 0 || now.Sub(time.Unix(0, at)) > t.floorFor() {
				continue
			}
			if s := c.seq.Load(); floor == 0 || s < floor {
				floor = s
			}
		}
	}
	return floor
}

// spanSeqs is pullSpan in sequences, by the events' mean size so far.
func (t *Table) spanSeqs() uint64 {
	n, b := t.evCount.Load(), t.evBytes.Load()
	if n == 0 || b == 0 {
		return 1 << 62
	}
	return uint64(max(1, t.floorSpan()/max(1, b/n)))
}

// aheadOfFloor says c's next pull waits: the broker is in this process,
// the runs are bounded, c reads the events stream with events pending,
// and it is more than the span past the pullFloor at now.
func (t *Table) aheadOfFloor(c *partConsumer, now time.Time) bool {
	inProc := t.cfg.BrokerRunCost > 0 || t.floor.span.Load() > 0
	if c.stream != t.cfg.Stream || t.mem.budget <= 0 || !inProc || c.behind.Load() == 0 {
		return false
	}
	floor := t.pullFloor(now)
	return floor > 0 && c.seq.Load() > floor+t.spanSeqs()
}

// waitFloor holds c's next pull while it is aheadOfFloor, at most
// floorFor, or until ctx ends. A waiting consumer is not taken for
// stalled (its last delivery's time moves on). The wait is counted while
// it lasts (Paced, gttsplit_pull_floor_waiting) and once it ended.
func (t *Table) waitFloor(ctx context.Context, c *partConsumer) {
	if !t.aheadOfFloor(c, time.Now()) {
		return
	}
	start := time.Now()
	t.floor.waiting.Add(1)
	t.m.floorWaiting.Inc()
	t.m.floorWaits.Inc()
	defer func() {
		t.floor.waiting.Add(-1)
		t.m.floorWaiting.Dec()
		t.m.floorWaitSeconds.Add(time.Since(start).Seconds())
	}()
	until := start.Add(t.floorFor())
	tk := time.NewTicker(holdTick)
	defer tk.Stop()
	for t.aheadOfFloor(c, time.Now()) && time.Now().Before(until) {
		c.last.Store(time.Now().UnixNano())
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// Paced says what the table catches up on without being unready (""
// nothing): pulls waiting for the partition furthest behind. /readyz's
// body names it (200, or beside the reasons of a 503).
func (t *Table) Paced() string {
	n := t.floor.waiting.Load()
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf("catching up in stream order: pulls of %d partitions wait for the partition furthest behind in the events stream (more than %d MiB of events past it, at most %s a pull: the broker is in this process)",
		n, t.floorSpan()>>20, t.floorFor())
}

// testPullGate, when set (by tests), holds a partition's next pull while
// it says so, given the table's group, the partition, and where its
// consumer reads the stream (seq, and the events it said were behind).
var testPullGate atomic.Pointer[func(group string, p int, seq, behind uint64) bool]

// gatePull holds c's next pull while testPullGate says so, or until ctx
// ends; c is not taken for stalled meanwhile.
func (t *Table) gatePull(ctx context.Context, p int, c *partConsumer) {
	g := testPullGate.Load()
	if g == nil {
		return
	}
	tk := time.NewTicker(holdTick)
	defer tk.Stop()
	for (*g)(t.cfg.Group, p, c.seq.Load(), c.behind.Load()) {
		c.last.Store(time.Now().UnixNano())
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}
