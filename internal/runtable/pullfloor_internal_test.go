package runtable

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPullWaitsForTheConsumerFurthestBehind: a partition's consumer more
// than pullSpan of events past the one furthest behind (with events
// pending) waits before its next pull until that one catches up; the one
// behind, and one with nothing pending, pull at once; a consumer whose
// last message is older than floorStale is left out; with the broker
// elsewhere (or the runs not bounded) none waits.
func TestPullWaitsForTheConsumerFurthestBehind(t *testing.T) {
	t.Parallel()
	tb := &Table{cfg: Config{Stream: "EVENTS", BrokerRunCost: 512}, byPart: map[int]*part{}}
	tb.mem.budget = 1 << 30
	tb.evCount.Store(1)
	tb.evBytes.Store(1 << 10) // 1 KiB an event: the span is 8,192 events
	cons := make([]*partConsumer, 3)
	now := time.Now()
	for p := range cons {
		cons[p] = &partConsumer{stream: "EVENTS"}
		cons[p].behind.Store(100)
		cons[p].seqAt.Store(now.UnixNano())
		tb.byPart[p] = &part{t: tb, p: p, cons: []*partConsumer{cons[p]}}
	}
	cons[0].seq.Store(1_000)  // furthest behind
	cons[1].seq.Store(5_000)  // within the span
	cons[2].seq.Store(20_000) // past it
	require.False(t, tb.aheadOfFloor(cons[0], now), "the consumer furthest behind waits")
	require.False(t, tb.aheadOfFloor(cons[1], now), "a consumer within the span waits")
	require.True(t, tb.aheadOfFloor(cons[2], now), "a consumer 19,000 events past the one furthest behind pulls at once")

	// The broker elsewhere, or the runs not bounded: nobody waits.
	tb.cfg.BrokerRunCost = 0
	require.False(t, tb.aheadOfFloor(cons[2], now), "waits with the broker elsewhere")
	tb.cfg.BrokerRunCost, tb.mem.budget = 512, 0
	require.False(t, tb.aheadOfFloor(cons[2], now), "waits with the runs not bounded")
	tb.mem.budget = 1 << 30

	// Caught up: the wait ends.
	done := make(chan struct{})
	go func() { defer close(done); tb.waitFloor(context.Background(), cons[2]) }()
	cons[0].seq.Store(15_000)
	cons[1].seq.Store(15_000)
	<-done
	require.False(t, tb.aheadOfFloor(cons[2], now))

	// Nothing pending: not held, and not a floor for the others.
	cons[2].seq.Store(40_000)
	cons[0].behind.Store(0)
	cons[1].behind.Store(0)
	require.False(t, tb.aheadOfFloor(cons[2], now), "no other consumer has events pending")
	cons[2].behind.Store(0)
	cons[0].behind.Store(100)
	require.False(t, tb.aheadOfFloor(cons[2], now), "a consumer with nothing pending waits")
	cons[2].behind.Store(100)
	require.True(t, tb.aheadOfFloor(cons[2], now))
	// A floor older than floorStale is left out.
	require.False(t, tb.aheadOfFloor(cons[2], now.Add(2*floorStale)), "a consumer that got nothing for floorStale holds the others")

	// The span follows the events' mean size: at 16 KiB an event it is
	// 512 events.
	tb.evBytes.Store(16 << 10)
	cons[0].seq.Store(39_000)
	require.True(t, tb.aheadOfFloor(cons[2], now), "1,000 events of 16 KiB past the one furthest behind")
	cons[0].seq.Store(39_600)
	require.False(t, tb.aheadOfFloor(cons[2], now))
}
