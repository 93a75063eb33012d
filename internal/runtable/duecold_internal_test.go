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
