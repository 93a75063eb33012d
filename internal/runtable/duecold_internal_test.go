package runtable

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDueColdOldestFirst: of many cold runs past their idle timeout, a
// pass takes the reviveBatch whose last event is the oldest, oldest first
// (their states lie together in the bucket), not as the map gives them;
// it says the oldest last event of all, and whether every due run was
// taken.
func TestDueColdOldestFirst(t *testing.T) {
	t.Parallel()
	base := time.Unix(1_700_000_000, 0)
	cold := map[string]int64{}
	var want []string
	for i := range 1000 {
		id := fmt.Sprintf("run-%04d", i)
		cold[id] = base.Add(time.Duration(i) * time.Millisecond).UnixNano()
		if i < reviveBatch {
			want = append(want, id)
		}
	}
	cold["fresh"] = base.Add(time.Hour).UnixNano() // not due
	now := base.Add(time.Hour)
	for range 5 { // the map's order changes from one range to the next
		due, oldest, whole := dueCold(cold, now, time.Minute, reviveBatch)
		require.Equal(t, want, due)
		require.Equal(t, base, oldest)
		require.False(t, whole)
	}
	due, _, whole := dueCold(cold, now, time.Minute, 2000)
	require.Len(t, due, 1000)
	require.True(t, whole, "every due run taken")
	due, _, whole = dueCold(map[string]int64{"fresh": cold["fresh"]}, now, time.Minute, reviveBatch)
	require.Empty(t, due)
	require.True(t, whole)
}
