package fleet

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
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
	t.Parallel()
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	c := natstest.StartCluster(t, 3)
	f := newTestFleet(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	st := allowAtomic(ctx, t, f)

	nc, err := nats.Connect(c.URLs(), nats.Timeout(natstest.ConnectTimeout))
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

// carryHandler is handler, and hands each lease acquired to leases.
type carryHandler struct {
	handler
	leases chan *Lease
}

func (h carryHandler) Acquired(ctx context.Context, l *Lease) error {
	select {
	case h.leases <- l:
	default:
	}
	return h.handler.Acquired(ctx, l)
}

// A partition folding a backlog on a slow broker keeps its lease: its
// fenced writes follow each other closely and each one's answer comes
// 4.5 s late (every byte the server sends is held that long), so a
// renewal, which takes turns with the writes (Lease.mu), waits for the
// write under way and then for its own late answer: sent up to 9.5 s
// after the last, answered up to 14 s after it, past the 12 s the lease
// is valid for. The writes take the renewal along when one is due
// (Fence.Renewal, Fence.Carried): each is sent at most 4.5 s after the
// last and answered 4.5 s later, inside the validity. Before, the lease
// fell in doubt (and its partition's work stopped) within a few renewal
// intervals. The test counts writes and watches the lease's state; it
// asserts no time.
func TestLeaseKeptByItsWritesWhenAnswersAreLateIntegration(t *testing.T) {
	t.Parallel()
	f, proxy, js, kv := behindProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	allowAtomic(ctx, t, f)

	const ttl, latency, writes = 15 * time.Second, 4500 * time.Millisecond, 6
	h := carryHandler{handler: handler{f}, leases: make(chan *Lease, 1)}
	m := runMember(t, js, Config{Group: "g", LeaseTTL: ttl}, Settings{Partitions: 1, Bucket: testBucket, KV: kv, Heartbeat: time.Second}, h)
	var l *Lease
	select {
	case l = <-h.leases:
	case <-ctx.Done():
		t.Fatal("the partition was not taken")
	}
	require.Equal(t, m.id, l.Member())

	// Watches the lease while the writes go on: in doubt for a second
	// of the watcher's own time. A stall of the test process (a loaded
	// machine under -race) holds back the handling of a renewal's answer
	// that came in time, and the watcher, resuming with it, may look
	// first: a look after a gap of its own starts the count again. (The
	// doubt this test guards against lasts up to 2 s at every renewal.)
	var doubted atomic.Bool
	watching, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		var since, last time.Time
		for {
			now := time.Now()
			switch {
			case l.Valid():
				since = time.Time{}
			case since.IsZero() || now.Sub(last) > 200*time.Millisecond:
				since = now
			case now.Sub(since) >= time.Second:
				doubted.Store(true)
			}
			last = now
			select {
			case <-watching:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	proxy.SetLatency(latency)
	carried := 0
	for i := range writes {
		err := l.Fenced(ctx, func(ctx context.Context, fc Fence) error {
			msgs := make([]*nats.Msg, 2)
			for k := range msgs {
				msgs[k] = nats.NewMsg(fmt.Sprintf("$KV.%s.state.%d", testBucket, k))
				msgs[k].Data = []byte(strconv.Itoa(i))
				msgs[k].Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(fc.Rev, 10))
				msgs[k].Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, fc.Subject)
			}
			r := fc.Renewal()
			if r != nil {
				msgs = append(msgs, r)
			}
			pa, err := bus.PublishAtomic(ctx, js, msgs)
			if err == nil && r != nil {
				fc.Carried(pa.Sequence)
				carried++
			}
			return err
		})
		require.NoError(t, err, "write %d", i)
		require.False(t, doubted.Load(), "the lease fell in doubt by write %d (%d renewals carried by writes)", i, carried)
	}
	close(watching)
	<-watched
	proxy.SetLatency(0)
	require.False(t, doubted.Load(), "the lease fell in doubt (%d renewals carried by writes)", carried)
	require.Greater(t, carried, 0)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Equal(t, []string{m.id + " +0"}, f.events, "the partition stayed the member's")
}

// allowAtomic lets the test fleet's bucket take atomic batches (as the
// aggregator's buckets do on a cluster); it returns the bucket's stream.
func allowAtomic(ctx context.Context, t *testing.T, f *testFleet) jetstream.Stream {
	t.Helper()
	st, err := f.js.Stream(ctx, "KV_"+testBucket)
	require.NoError(t, err)
	sc := st.CachedInfo().Config
	sc.AllowAtomicPublish = true
	_, err = f.js.UpdateStream(ctx, sc)
	require.NoError(t, err)
	return st
}
