package runtable

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDueColdWrittenFirst: of many cold runs past their idle timeout, a
// pass takes the reviveBatch whose states were written first (they lie
// together in the bucket), in that order, not as the map gives them nor
// by their last event; it says the oldest last event of all, and whether
// every due run was taken.
func TestDueColdWrittenFirst(t *testing.T) {
	t.Parallel()
	base := time.Unix(1_700_000_000, 0)
	cold := map[string]coldRun{}
	var want []stamped
	for i := range 1000 {
		id := fmt.Sprintf("run-%04d", i)
		// The last events in the reverse order of the writes.
		cold[id] = coldRun{last: base.Add(time.Duration(1000-i) * time.Millisecond).UnixNano(), at: int64(i) << 10}
		if i < reviveBatch {
			want = append(want, stamped{id, int64(i) << 10})
		}
	}
	cold["fresh"] = coldRun{last: base.Add(time.Hour).UnixNano()} // not due, written first
	now := base.Add(time.Hour)
	for range 5 { // the map's order changes from one range to the next
		due, oldest, whole := dueCold(cold, now, time.Minute, reviveBatch)
		require.Equal(t, want, due)
		require.Equal(t, base.Add(time.Millisecond), oldest)
		require.False(t, whole)
	}
	due, _, whole := dueCold(cold, now, time.Minute, 2000)
	require.Len(t, due, 1000)
	require.True(t, whole, "every due run taken")
	due, _, whole = dueCold(map[string]coldRun{"fresh": cold["fresh"]}, now, time.Minute, reviveBatch)
	require.Empty(t, due)
	require.True(t, whole)
}

// TestColdReadBacksFollowTheFloor: the partitions' passes read back
// their idle cold runs from the same stretch of the bucket. Four
// partitions' runs were written interleaved (run i at i KiB, partition
// i%4); partition 0 gets a pass only every fourth round, the others every
// round. Each partition reading back its own oldest, the others would
// run ahead of partition 0 through the whole bucket (with the embedded
// broker, a block of it kept in memory for each place read). With the
// floor, every run a pass reads back lies within the span of the due run
// written first of them all, whoever's it is; and a partition whose
// passes stopped holds the others back only until its floor is stale.
func TestColdReadBacksFollowTheFloor(t *testing.T) {
	t.Parallel()
	const parts, runs, span = 4, 1200, 16 << 10
	base := time.Unix(1_700_000_000, 0)
	tb := &Table{cfg: Config{IdleTimeout: time.Second}, byPart: map[int]*part{}}
	tb.mem.span.Store(span)
	for p := range parts {
		tb.byPart[p] = &part{t: tb, p: p, runs: map[string]*liveRun{}, cold: map[string]coldRun{}}
	}
	for i := range runs {
		pt := tb.byPart[i%parts]
		pt.addCold(fmt.Sprintf("run-%05d", i), base, int64(i)<<10)
	}
	now := base.Add(time.Minute)
	// lowest is where the due run written first of every partition lies.
	lowest := func() int64 {
		low := int64(-1)
		for _, pt := range tb.byPart {
			for _, c := range pt.cold {
				if low < 0 || c.at < low {
					low = c.at
				}
			}
		}
		return low
	}
	for _, pt := range tb.byPart {
		pt.dueInSpan(now) // each partition's first pass says where it is
	}
	rng := rand.New(rand.NewPCG(1, 2))
	read, rounds := 0, 0
	for read < runs && rounds < 10*runs {
		rounds++
		order := rng.Perm(parts)
		for _, p := range order {
			if p == 0 && rounds%4 != 1 {
				continue // the slow partition
			}
			pt := tb.byPart[p]
			low := lowest()
			ids := pt.dueInSpan(now)
			for _, id := range ids {
				c := pt.cold[id]
				require.LessOrEqualf(t, c.at, low+span,
					"round %d: partition %d read back %s at %d KiB, %d KiB past the due run written first (at %d KiB) of every partition",
					rounds, p, id, c.at>>10, (c.at-low)>>10, low>>10)
				pt.uncold(id) // read back and closed
				read++
			}
		}
	}
	require.Equal(t, runs, read, "every idle run read back")
	require.Zero(t, tb.mem.cold.Load())

	// A partition whose passes stopped holds the others' read-backs
	// back until its floor is older than floorStale.
	for i := range 8 {
		tb.byPart[i%2].addCold(fmt.Sprintf("late-%d", i), base, int64(runs+i*(span/2))<<10)
	}
	require.Len(t, tb.byPart[0].dueInSpan(now), 1, "partition 0's first run within the span")
	require.Empty(t, tb.byPart[1].dueInSpan(now), "partition 1 waits for partition 0, further behind")
	require.NotEmpty(t, tb.byPart[1].dueInSpan(now.Add(floorStale+time.Second)), "partition 0's floor stale: partition 1 goes on")
}

// TestHeldClosesKeepToFewStretches: the partitions' close passes close
// their held runs due by the idle timeout from the same stretch of the
// bucket, so that the removals of their old values (the embedded broker
// loads a whole block to remove a message) touch few blocks a round.
// Four partitions' runs were written interleaved (run i at i KiB,
// partition i%4), their ids in no order of the writes; partition 0 gets
// a pass only every fourth round. Closed in the order of their ids, or
// each partition its own oldest, a round's closes spread over the whole
// bucket; with the held span, every run a pass closes lies within the
// span of the held due run written first of them all, and a round's
// closes touch at most two span-sized stretches. A partition whose
// passes stopped holds the others back only until its floor is stale.
func TestHeldClosesKeepToFewStretches(t *testing.T) {
	t.Parallel()
	const parts, runs, span, batch = 4, 1200, 16 << 10, 8
	base := time.Unix(1_700_000_000, 0)
	now := base.Add(time.Minute)
	tb := &Table{cfg: Config{IdleTimeout: time.Second}, byPart: map[int]*part{}}
	tb.mem.heldSpan.Store(span)
	held := map[int]map[string]int64{} // partition: id -> where its state lies
	for p := range parts {
		tb.byPart[p] = &part{t: tb, p: p, runs: map[string]*liveRun{}, cold: map[string]coldRun{}}
		held[p] = map[string]int64{}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	names := rng.Perm(runs)
	for i := range runs {
		held[i%parts][fmt.Sprintf("run-%05d", names[i])] = int64(i) << 10
	}
	due := func(p int) []stamped {
		var ds []stamped
		for id, at := range held[p] {
			ds = append(ds, stamped{id, at})
		}
		return ds
	}
	lowest := func() int64 {
		low := int64(-1)
		for p := range parts {
			for _, at := range held[p] {
				if low < 0 || at < low {
					low = at
				}
			}
		}
		return low
	}
	for p := range parts {
		tb.byPart[p].heldInSpan(now, due(p), 0) // each partition's first pass says where it is
	}
	closed, rounds, most := 0, 0, 0
	for closed < runs && rounds < 10*runs {
		rounds++
		stretches := map[int64]bool{}
		for _, p := range rng.Perm(parts) {
			if p == 0 && rounds%4 != 1 {
				continue // the slow partition
			}
			low := lowest()
			for _, id := range tb.byPart[p].heldInSpan(now, due(p), batch) {
				at := held[p][id]
				require.LessOrEqualf(t, at, low+span,
					"round %d: partition %d closed %s at %d KiB, %d KiB past the held due run written first (at %d KiB) of every partition",
					rounds, p, id, at>>10, (at-low)>>10, low>>10)
				stretches[at/span] = true
				delete(held[p], id)
				closed++
			}
		}
		most = max(most, len(stretches))
	}
	require.Equal(t, runs, closed, "every held due run closed")
	require.LessOrEqualf(t, most, 2, "a round's closes touched %d stretches of the span", most)

	// A partition whose passes stopped holds the others' closes back
	// until its floor is older than floorStale.
	for i := range 8 {
		held[i%2][fmt.Sprintf("late-%d", i)] = int64(runs+i*(span/2)) << 10
	}
	require.Len(t, tb.byPart[0].heldInSpan(now, due(0), batch), 1, "partition 0's first run within the span")
	require.Empty(t, tb.byPart[1].heldInSpan(now, due(1), batch), "partition 1 waits for partition 0, further behind")
	require.NotEmpty(t, tb.byPart[1].heldInSpan(now.Add(floorStale+time.Second), due(1), batch), "partition 0's floor stale: partition 1 goes on")
}
