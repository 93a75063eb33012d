package runtable

import (
	"context"
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
// after partition is folded about in that order.

// pullSpan is how far in the stream (bytes of events, about) a consumer
// may run ahead of the one furthest behind.
const pullSpan = 8 << 20

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
			if at := c.seqAt.Load(); at == 0 || now.Sub(time.Unix(0, at)) > floorStale {
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
	return uint64(max(1, pullSpan/max(1, b/n)))
}

// aheadOfFloor says c's next pull waits: the broker is in this process,
// the runs are bounded, c reads the events stream with events pending,
// and it is more than the span past the pullFloor at now.
func (t *Table) aheadOfFloor(c *partConsumer, now time.Time) bool {
	if c.stream != t.cfg.Stream || t.mem.budget <= 0 || t.cfg.BrokerRunCost <= 0 || c.behind.Load() == 0 {
		return false
	}
	floor := t.pullFloor(now)
	return floor > 0 && c.seq.Load() > floor+t.spanSeqs()
}

// waitFloor holds c's next pull while it is aheadOfFloor, at most
// floorStale, or until ctx ends. A waiting consumer is not taken for
// stalled (its last delivery's time moves on).
func (t *Table) waitFloor(ctx context.Context, c *partConsumer) {
	if !t.aheadOfFloor(c, time.Now()) {
		return
	}
	until := time.Now().Add(floorStale)
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
