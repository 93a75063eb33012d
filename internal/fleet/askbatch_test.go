package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
)

// A member whose one read at Join of whether the bucket takes atomic
// batches goes unanswered renews its leases one at a time at first, asks
// again at its next renewal of the member key, takes the batches once the
// answer comes, and asks no more after that. During Join every byte the
// broker sends reaches the member bus.APITimeout+2s late: the read, bounded
// by bus.APITimeout, gives up whatever the machine's load, while the
// members bucket's reads, bounded by Join's context, are answered late.
// The test counts, at the server the member talks to, the reads of the
// bucket's configuration and the renewals of the member key: counts, not
// time.
func TestBatchAskedAgainAfterAnUnansweredReadIntegration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	c := natstest.StartCluster(t, 3)
	f := newTestFleet(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	allowAtomic(ctx, t, f)

	node := c.Servers[0]
	proxy := natstest.StartProxy(t, node.Addr().String())
	js, kv := memberBucket(t, proxy.URL())
	// What the member sends, seen at its server in the order it was sent.
	seen := make(chan *nats.Msg, 4096)
	nc := natstest.Connect(t, node.ClientURL())
	for _, subj := range []string{"$JS.API.STREAM.INFO.KV_" + testBucket, "$KV." + MembersBucket + ".>"} {
		_, err := nc.ChanSubscribe(subj, seen)
		require.NoError(t, err)
	}
	require.NoError(t, nc.FlushTimeout(time.Minute))
	reads, renewals := 0, 0
	// count takes in everything the member sent before it was called: the
	// server answers the member's ping once it handled what came before,
	// and nc's once what it delivered to nc before reached nc.
	count := func() {
		require.NoError(t, js.Conn().FlushTimeout(time.Minute))
		require.NoError(t, nc.FlushTimeout(time.Minute))
		for {
			select {
			case m := <-seen:
				if strings.HasPrefix(m.Subject, "$KV.") {
					renewals++
				} else {
					reads++
				}
			default:
				return
			}
		}
	}

	proxy.SetLatency(bus.APITimeout + 2*time.Second)
	m, err := Join(ctx, js, Config{Group: "g", LeaseTTL: 6 * time.Second},
		Settings{Partitions: 1, Bucket: testBucket, KV: kv, Heartbeat: time.Second}, handler{f},
		zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel))
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	// Every answer so far came later than a read waits: none was read.
	require.True(t, m.batchUnread.Load(), "whether the bucket takes atomic batches was read at Join, answered late")
	require.False(t, m.batch.Load())

	proxy.SetLatency(0)
	eventually(t, "the bucket read to take atomic batches", 3*time.Minute, func() bool {
		return m.batch.Load() && !m.batchUnread.Load()
	})
	count()
	require.GreaterOrEqual(t, reads, 2, "the read at Join and the one that was answered")
	read, renewed := reads, renewals
	eventually(t, "three renewals of the member key after the read", 3*time.Minute, func() bool {
		count()
		return renewals >= renewed+3
	})
	require.Equal(t, read, reads, "the bucket's configuration read again once read (%d renewals since)", renewals-renewed)
	require.True(t, m.batch.Load())
}
