package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
)

// A renewal in the stream leader's pipeline (proposed, not yet applied)
// when the revision before it reaches its time to live: the leader, which
// counts only what it applied, takes the old revision for the key's last
// and proposes the expiry's marker, a roll-up of the key, after the
// renewal. The renewal is stored and answered, then the marker removes it:
// the lease key is gone while its holder counts its lease valid (its
// renewal went through a moment ago). That is how a loaded 3-node cluster
// lost leases (docs/operations.md, "Leases on a loaded machine"); a
// follower behind the leader never takes a key away (with markers on,
// only the leader expires keys, in the raft log's order).
//
// The test makes it happen on a 3-node cluster whose routes pass through
// proxies: a lease created with a 1 s time to live on the server, the
// routes frozen (the leader proposes, nothing is committed), a renewal
// sent through the leader's own server, and the routes thawed once the
// leader proposed a second entry (the marker). The lease's next fenced
// write is refused (the key's last message is the marker); the lease
// re-reads the key, finds the marker of its own revision's expiry while
// it is valid, takes the key again conditional on the marker (nobody else
// wrote it since) and sends the write again. Events, not time: the
// leader's proposals are counted, and a try whose order came out another
// way (the expiry proposed before the renewal, under load) is made again
// on another partition.
func TestLeaseKeptWhenAnOldRevisionsExpiryRemovesItsRenewalIntegration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	c, proxies := natstest.StartClusterBehindProxies(t, 3)
	f := newTestFleet(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	const tries = 6
	for try := 0; try < tries; try++ {
		l, js, ok := expiryAfterRenewal(t, ctx, c, proxies, f, try)
		if !ok {
			t.Logf("try %d: the expiry was proposed before the renewal; again", try)
			continue
		}
		rev := l.Revision()
		err := l.Fenced(ctx, func(ctx context.Context, fe Fence) error {
			_, err := js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + testBucket + ".state." + fmt.Sprint(try), Data: []byte("x")}, fe.Opt())
			return err
		})
		require.NoError(t, err, "the fenced write goes through: nobody else wrote the key since the marker (lost: %q)", l.Why())
		require.True(t, l.Valid(), "the lease is still valid")
		require.Greater(t, l.Revision(), rev, "the lease took the key again, after the marker")
		last, err := bus.GetLast(ctx, js.Conn(), "KV_"+testBucket, l.subject)
		require.NoError(t, err)
		require.Equal(t, l.Revision(), last.Seq, "the key is the lease's, at its revision")
		require.Equal(t, string(l.value), string(last.Data))
		return
	}
	t.Fatalf("in %d tries the leader never proposed the expiry after the renewal", tries)
}

// expiryAfterRenewal takes partition p's lease with a 1 s time to live on
// the server (and a minute's for the holder's renewals), freezes the routes,
// renews through the stream leader's server and thaws the routes once the
// leader proposed the renewal and the expiry's marker. ok is false when the
// order came out another way (the renewal refused, or the key not rolled
// up after it).
func expiryAfterRenewal(t *testing.T, ctx context.Context, c *natstest.Cluster, proxies []*natstest.Proxy, f *testFleet, p int) (*Lease, jetstream.JetStream, bool) {
	t.Helper()
	st, err := f.js.Stream(ctx, "KV_"+testBucket)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.NotNil(t, info.Cluster)
	var leader *server.Server
	for _, s := range c.Servers {
		if s.Name() == info.Cluster.Leader {
			leader = s
		}
	}
	require.NotNil(t, leader, "the bucket's leader %q", info.Cluster.Leader)
	group := info.Cluster.RaftGroup
	proposed := func() uint64 {
		rz := leader.Raftz(&server.RaftzOptions{AccountFilter: "$G", GroupFilter: group})
		if rz == nil {
			return 0
		}
		return (*rz)["$G"][group].PIndex
	}
	js := natstest.JetStream(t, leader.ClientURL())
	kv, err := js.KeyValue(ctx, testBucket)
	require.NoError(t, err)

	l, err := acquire(ctx, js, kv, testBucket, "g", "m", p, time.Second, 200*time.Millisecond)
	require.NoError(t, err)
	// From now on the holder renews for a minute (the margin stays): its
	// renewal makes it valid for most of a minute.
	l.ttl = time.Minute
	p0 := proposed()
	for _, px := range proxies {
		px.Freeze()
	}
	renewed := make(chan error, 1)
	go func() { renewed <- l.renew(ctx) }()
	eventually(t, "the renewal and the expiry's marker proposed", time.Minute, func() bool { return proposed() >= p0+2 })
	for _, px := range proxies {
		px.Thaw()
	}
	if err := <-renewed; err != nil {
		return nil, nil, false
	}
	last, err := bus.GetLast(ctx, js.Conn(), "KV_"+testBucket, l.subject)
	require.NoError(t, err)
	t.Logf("try %d: renewed at %d; the key's last message now %d %v", p, l.Revision(), last.Seq, last.Header)
	return l, js, last.Seq > l.Revision() && last.Marker() == markerExpired
}
