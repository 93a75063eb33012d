package fleet

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
	s, a, b, beat := twoMembers(t, Config{LeaseTTL: 30 * time.Second}, 200*time.Millisecond)
	natstest.Shutdown(s)
	return a, b, beat
}

// twoMembers is two members of cfg sharing the partitions and seeing each
// other, the second joined stagger after the first (they renew their keys
// that far apart).
func twoMembers(t *testing.T, cfg Config, stagger time.Duration) (s *server.Server, a, b *running, beat time.Duration) {
	t.Helper()
	s = natstest.Start(t)
	f := newTestFleet(t, s.ClientURL())
	// Heartbeats long against the polling.
	beat = 400 * time.Millisecond
	a = f.joinBeat(cfg, beat)
	time.Sleep(stagger)
	b = f.joinBeat(cfg, beat)
	eventually(t, "shared", 20*time.Second, func() bool { return balanced(f.shares(), 2, 16) })
	eventually(t, "each sees the other", 10*time.Second, func() bool {
		return unownedIn(a.m.View()) == 0 && unownedIn(b.m.View()) == 0
	})
	return s, a, b, beat
}

// View (the metrics read it every second) answers while the broker is
// away. It read each held lease's revision under the lock a renewal holds
// while it waits for the broker, which is until the lease's validity
// ends: the view, and the metrics with it, waited for as long (22 s of a
// 30 s lease here), and answered only once the leases were lost.
func TestViewAnswersWhileTheBrokerIsAwayIntegration(t *testing.T) {
	t.Parallel()
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
// only once its own key was overdue, so a member whose last renewal (of
// its key or a lease) came before this one's own key last came back was
// taken for dead by it for that long before: its partitions counted
// unowned (3-4 of 16 were seen during elections with every owner alive).
// The broker goes away at such a moment (found by polling: one member's
// own key came back after every sign of the other, whose next renewal is
// not due for a while), and stays away until every key is overdue.
func TestNoOwnerTakenForDeadWhileTheBucketIsAwayIntegration(t *testing.T) {
	// Serial (TestMain runs the others 8 at once): it polls for a moment a
	// few milliseconds wide, which did not come within 120 s beside the
	// other tests at load ~70.
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	// Keys overdue within the test's time (a member key renewed every
	// 4 s, taken for live 9 s), the keys renewed half an interval apart.
	cfg := Config{LeaseTTL: 12 * time.Second}
	every := cfg.renewEvery()
	s, a, b, _ := twoMembers(t, cfg, every/2)
	// The gap the old rule showed as unowned, and how long before the
	// other's next renewal the broker must be gone.
	const gap = 250 * time.Millisecond
	ahead := every / 4
	var x, y *running
	eventually(t, "a member's own key back after the other's last renewal", 10*cfg.LeaseTTL, func() bool {
		for _, p := range [][2]*running{{a, b}, {b, a}} {
			if lastFirst(p[0], p[1]) >= gap && nextRenewal(p[1], cfg)-mono() >= ahead {
				x, y = p[0], p[1]
				return true
			}
		}
		return false
	})
	natstest.Shutdown(s)
	require.Positive(t, lastFirst(x, y), "a renewal of %s came back to %s before the broker went", y.m.ID(), x.m.ID())
	seen := 0
	// Until every key is overdue, and a renewal interval more.
	overdue := func(r *running) bool {
		r.m.mu.Lock()
		defer r.m.mu.Unlock()
		return mono()-r.m.selfAt > cfg.memberTTL()+every
	}
	for !overdue(a) || !overdue(b) {
		seen = max(seen, unownedIn(a.m.View()), unownedIn(b.m.View()))
		time.Sleep(2 * time.Millisecond)
	}
	require.Zero(t, seen, "partitions counted unowned while every owner lived")
}

// lastFirst is how long before x's own key last came back to it the
// last sign of y (its key or a lease renewed) did (negative: after).
func lastFirst(x, y *running) time.Duration {
	x.m.mu.Lock()
	defer x.m.mu.Unlock()
	sm, ok := x.m.members[y.m.ID()]
	if !ok || !x.m.seen {
		return -1
	}
	return x.m.selfAt - sm.at
}

// nextRenewal is when (mono()) y next sends a renewal, of its member key
// or of a lease (in the past while one is under way).
func nextRenewal(y *running, cfg Config) time.Duration {
	y.m.mu.Lock()
	defer y.m.mu.Unlock()
	next := y.m.selfAt + cfg.renewEvery()
	for _, hl := range y.m.held {
		sent := time.Duration(hl.l.deadline.Load()) - hl.l.ttl + hl.l.margin
		next = min(next, sent+cfg.LeaseTTL/leaseRenewals)
	}
	return next
}

// Members of one group with lease time to lives far apart (12 s and 3 s:
// member keys renewed every 4 s and every 1 s, taken for live 9 s and
// 2.25 s) take nobody for dead while the broker is away. The view counted
// the others fresh until one of this member's own renewal intervals after
// its own key last came back: 4 s, against the other's 2.25 s of life
// after its last renewal, so the slow renewer took the fast one for dead
// (its partitions unowned) with every member alive. The broker goes away
// just after the slow renewer's own key came back, and stays away until
// every key is overdue.
func TestNoOwnerTakenForDeadAcrossLeaseTTLsIntegration(t *testing.T) {
	// Serial (TestMain runs the others 8 at once): it polls for a moment a
	// few milliseconds wide, which did not come within 120 s beside the
	// other tests at load ~70.
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	s := natstest.Start(t)
	f := newTestFleet(t, s.ClientURL())
	const beat = 400 * time.Millisecond
	slow, fast := Config{LeaseTTL: 12 * time.Second}, Config{LeaseTTL: 3 * time.Second}
	a := f.joinBeat(slow, beat)
	b := f.joinBeat(fast, beat)
	eventually(t, "shared", 30*time.Second, func() bool { return balanced(f.shares(), 2, 16) })
	eventually(t, "each sees the other", 30*time.Second, func() bool {
		return unownedIn(a.m.View()) == 0 && unownedIn(b.m.View()) == 0
	})
	// Right after a's own key came back: a's view is then fresh for a
	// renewal interval of a's (4 s), the fast member lives 2.25 s after
	// its last renewal. The fast member renews in time then (a loaded
	// machine may delay it past its time to live: then it did die).
	eventually(t, "a's own key just back, b's renewals in time", 10*slow.LeaseTTL, func() bool {
		a.m.mu.Lock()
		defer a.m.mu.Unlock()
		sb, ok := a.m.members[b.m.ID()]
		return a.m.seen && ok && mono()-a.m.selfAt < fast.renewEvery()/4 &&
			a.m.selfStored.Sub(sb.stored) < fast.renewEvery()
	})
	natstest.Shutdown(s)
	overdue := func(r *running, cfg Config) bool {
		r.m.mu.Lock()
		defer r.m.mu.Unlock()
		return mono()-r.m.selfAt > cfg.memberTTL()+cfg.renewEvery()
	}
	seen := map[string]int{}
	for !overdue(a, slow) || !overdue(b, fast) {
		seen["a"] = max(seen["a"], unownedIn(a.m.View()))
		seen["b"] = max(seen["b"], unownedIn(b.m.View()))
		time.Sleep(2 * time.Millisecond)
	}
	require.Zero(t, seen["a"]+seen["b"], "partitions counted unowned while every owner lived: %v", seen)
}
