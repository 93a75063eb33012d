package fleet

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/natstest"
)

// A member of a 3-node cluster whose bucket takes atomic batches renews
// its leases together: after a round or two every renewal interval is one
// write for all of them (one batch, one replication round), not one a
// lease; the leases stay valid and nothing moves. The test counts, on the
// leases' subjects, the renewals and the writes they came in (a batch, or
// a renewal alone) over several renewal intervals, and how many intervals
// passed by the leases' own count (their renewals): counts, not time.
// A partition whose write holds its lease past its turn is left out of
// the batches and holds back none of the others; a batch refused for
// one lease (another member's key now) costs the others nothing.
func TestLeasesRenewedInOneBatchIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	c := natstest.StartCluster(t, 3)
	f := newTestFleet(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	st, err := f.js.Stream(ctx, "KV_"+testBucket)
	require.NoError(t, err)
	sc := st.CachedInfo().Config
	sc.AllowAtomicPublish = true
	_, err = f.js.UpdateStream(ctx, sc)
	require.NoError(t, err)

	nc, err := nats.Connect(c.URLs())
	require.NoError(t, err)
	defer nc.Close()
	var mu sync.Mutex
	renewals, writes := map[string]int{}, 0
	batches := map[string]bool{}
	_, err = nc.Subscribe("$KV."+testBucket+".lease.>", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		renewals[m.Subject]++
		switch id := m.Header.Get("Nats-Batch-Id"); {
		case id == "":
			writes++
		case !batches[id]:
			batches[id] = true
			writes++
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	cfg := Config{LeaseTTL: 6 * time.Second}
	r := f.join(cfg)
	eventually(t, "every partition held", time.Minute, func() bool { return f.shares()[r.m.ID()] == 16 })
	// Two rounds to come due together, then a few counted.
	rounds := func() int {
		mu.Lock()
		defer mu.Unlock()
		least := -1
		for _, n := range renewals {
			if least < 0 || n < least {
				least = n
			}
		}
		if len(renewals) < 16 {
			return 0
		}
		return least
	}
	eventually(t, "two renewals of every lease", 5*time.Minute, func() bool { return rounds() >= 3 })
	mu.Lock()
	w0, r0 := writes, total(renewals)
	mu.Unlock()
	from := rounds()
	const counted = 4
	eventually(t, "four more renewals of every lease", 5*time.Minute, func() bool { return rounds() >= from+counted })
	mu.Lock()
	w, n := writes-w0, total(renewals)-r0
	mu.Unlock()
	t.Logf("%d renewals of 16 leases in %d writes over %d renewal intervals", n, w, counted)
	// Each interval one batch (and, under load, a lease whose turn came
	// while another's batch was in flight renewed alone now and then).
	require.LessOrEqual(t, w, 2*(counted+1), "the leases' renewals are not written together")
	require.LessOrEqual(t, n, 16*(counted+2), "leases renewed more often than their time to live needs")
	require.Equal(t, 16, f.shares()[r.m.ID()], "a lease moved (%v)", f.events)

	// A partition writing for longer than the renewal interval (its
	// lease's lock held by a fenced write) holds back no other lease's
	// renewals: they go on in their batches without it.
	r.m.mu.Lock()
	busy := r.m.held[0].l
	r.m.mu.Unlock()
	hold, writing, entered := make(chan struct{}), make(chan error, 1), make(chan uint64, 1)
	var released sync.Once
	release := func() { released.Do(func() { close(hold) }) }
	t.Cleanup(release) // before the member stops, if the test failed
	go func() {
		writing <- busy.Fenced(ctx, func(_ context.Context, fc Fence) error { entered <- fc.Rev; <-hold; return nil })
	}()
	// Counted from when the write holds the lease: a renewal of it
	// answered before may still be on its way to the subscriber.
	held := <-entered
	mu.Lock()
	before := map[string]int{}
	for k, v := range renewals {
		before[k] = v
	}
	mu.Unlock()
	eventually(t, "two renewals of every other lease while partition 0 writes", 5*time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for k, v := range renewals {
			if k != busy.subject && v < before[k]+2 {
				return false
			}
		}
		return true
	})
	// Its key, at the broker, still at the revision the write holds.
	last, err := st.GetLastMsgForSubject(ctx, busy.subject)
	require.NoError(t, err)
	require.Equal(t, held, last.Sequence, "partition 0 renewed while its write held its lease")
	release()
	require.NoError(t, <-writing)
	// Its own renewal follows the write (in doubt meanwhile if the write
	// outlasted its validity; given up only past a time to live more,
	// which a very slow machine may reach: not this test's point).
	eventually(t, "partition 0 renewed after its write, or given up", time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return renewals[busy.subject] > before[busy.subject] || !busy.Valid() && !busy.InDoubt()
	})
	for p := 1; p < 16; p++ {
		f.mu.Lock()
		_, held := f.owners[p][r.m.ID()]
		f.mu.Unlock()
		require.True(t, held, "partition %d", p)
	}

	// A batch the server refuses for one lease (its key is someone
	// else's now: the revision it is conditional on moved) stores none
	// of its renewals; the lease is lost, the others are renewed on
	// (alone, then in batches without it) and none of them is lost.
	r.m.mu.Lock()
	taken := r.m.held[1].l
	r.m.mu.Unlock()
	putRev, err := f.kv.Put(ctx, taken.Key(), []byte("another member#0"))
	require.NoError(t, err)
	eventually(t, "partition 1 lost", 5*time.Minute, func() bool {
		select {
		case <-taken.Lost():
			return true
		default:
			return false
		}
	})
	// Stored renewals of the others: their revisions past the put's.
	eventually(t, "partitions 2-15 renewed after partition 1 was taken", 5*time.Minute, func() bool {
		r.m.mu.Lock()
		defer r.m.mu.Unlock()
		for p := 2; p < 16; p++ {
			if hl := r.m.held[p]; hl == nil || hl.l.Revision() <= putRev {
				return false
			}
		}
		return true
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	for p := 2; p < 16; p++ {
		_, held := f.owners[p][r.m.ID()]
		require.True(t, held, "partition %d (%v)", p, f.events)
		for _, e := range f.events {
			require.NotEqual(t, fmt.Sprintf("%s -%d (lost)", r.m.ID(), p), e, "partition %d lost (%v)", p, f.events)
		}
	}
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
