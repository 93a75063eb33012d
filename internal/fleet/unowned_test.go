package fleet

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/natstest"
)

// unownedIn counts the partitions a member's view shows with no live
// owner, as gttsplit_partitions_unowned does.
func unownedIn(view []PartitionView, members []string) int {
	n := 0
	for _, v := range view {
		if !v.Mine && (v.Owner == "" || len(members) > 0 && !slices.Contains(members, v.Owner)) {
			n++
		}
	}
	return n
}

// awayFleet is two members whose broker is then shut down.
func awayFleet(t *testing.T) (a, b *running, beat time.Duration) {
	t.Helper()
	s := natstest.Start(t)
	f := newTestFleet(t, s.ClientURL())
	// Heartbeats long against the polling; the two members renew at
	// different moments of each.
	beat = 400 * time.Millisecond
	a = f.joinBeat(Config{LeaseTTL: 30 * time.Second}, beat)
	time.Sleep(beat / 2)
	b = f.joinBeat(Config{LeaseTTL: 30 * time.Second}, beat)
	eventually(t, "shared", 20*time.Second, func() bool { return balanced(f.shares(), 2, 16) })
	eventually(t, "each sees the other", 10*time.Second, func() bool {
		return unownedIn(a.m.View()) == 0 && unownedIn(b.m.View()) == 0
	})
	natstest.Shutdown(s)
	return a, b, beat
}

// View (the metrics read it every second) answers while the broker is
// away. It read each held lease's revision under the lock a renewal holds
// while it waits for the broker, which is until the lease's validity
// ends: the view, and the metrics with it, waited for as long (22 s of a
// 30 s lease here), and answered only once the leases were lost.
func TestViewAnswersWhileTheBrokerIsAwayIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	a, _, _ := awayFleet(t)
	a.m.mu.Lock()
	held := make([]*Lease, 0, len(a.m.held))
	for _, hl := range a.m.held {
		held = append(held, hl.l)
	}
	a.m.mu.Unlock()
	require.NotEmpty(t, held)
	// A renewal waits for the broker (it holds its lease's lock).
	eventually(t, "a renewal in flight", 30*time.Second, func() bool {
		for _, l := range held {
			if !l.mu.TryLock() {
				return true
			}
			l.mu.Unlock()
		}
		return false
	})
	view, _ := a.m.View()
	for _, l := range held {
		require.True(t, l.Valid(), "the view answered only after partition %d's lease ran out", l.Partition)
		require.True(t, view[l.Partition].Mine)
		require.Positive(t, view[l.Partition].LeaseRevision)
	}
}

// While the members bucket answers nobody (here its server is away; in a
// cluster, the bucket electing a leader), every key stops coming back at
// once: no member may take another for dead. Each member froze its view
// only once its own key was overdue, so a member that renews earlier in
// each heartbeat than another was taken for dead by it for up to a
// heartbeat before that: its partitions counted unowned (3-4 of 16 were
// seen during elections with every owner alive).
func TestNoOwnerTakenForDeadWhileTheBucketIsAwayIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	a, b, beat := awayFleet(t)
	away := time.Now()
	seen := 0
	// Until well after every key is overdue (a member key lives 5 beats).
	for time.Since(away) < 3*memberBeats*beat {
		seen = max(seen, unownedIn(a.m.View()), unownedIn(b.m.View()))
		time.Sleep(2 * time.Millisecond)
	}
	require.Zero(t, seen, "partitions counted unowned while every owner lived")
}
