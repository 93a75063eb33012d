package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
)

// A member key says how often its member renews it, and the others take
// it for live for three quarters of the lease time to live that makes
// (whatever their own lease_ttl); a key of an earlier version (the time
// alone, renewed every heartbeat) lives five heartbeats.
func TestMemberKeySaysItsRenewals(t *testing.T) {
	t.Parallel()
	cfg := Config{LeaseTTL: 15 * time.Second}
	require.Equal(t, 5*time.Second, cfg.renewEvery())
	v := memberValue(cfg.renewEvery())
	require.Equal(t, cfg.memberTTL(), memberTTLOf([]byte(v), time.Second))
	require.Equal(t, 9*time.Second, memberTTLOf([]byte(memberValue(4*time.Second)), time.Second))
	require.Equal(t, 5*time.Second, memberTTLOf([]byte(time.Now().UTC().Format(time.RFC3339Nano)), time.Second))
	require.Greater(t, cfg.memberTTL(), 2*cfg.renewEvery(), "two renewals may fail")
	require.Less(t, cfg.memberTTL(), cfg.LeaseTTL-max(cfg.LeaseTTL/5, time.Second), "a dead member is known before its leases expire")
}

// A member warns, once, of another member of its group whose key says it
// renews at another pace (its consumer.lease_ttl differs: a lease taken
// again after its previous revision's expiry counts on the same one), and
// not of a member with the same lease_ttl.
func TestOtherLeaseTTLWarnedOnceIntegration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	s := natstest.Start(t)
	f := newTestFleet(t, s.ClientURL())
	js, kv := memberBucket(t, f.url)
	var logs sinktest.Buffer
	set := Settings{Partitions: 16, Bucket: testBucket, KV: kv, Replicas: replicasOf(f.url), Heartbeat: 100 * time.Millisecond}
	a, err := Join(t.Context(), js, Config{Group: "g", LeaseTTL: 6 * time.Second}, set, handler{f}, zerolog.New(&logs))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	same := f.join(Config{LeaseTTL: 6 * time.Second}).m.ID()
	other := f.join(Config{LeaseTTL: 9 * time.Second}).m.ID()

	eventually(t, "the other lease_ttl warned of", 30*time.Second, func() bool {
		return strings.Contains(logs.String(), `"other":"`+other+`"`)
	})
	// Two more renewals of the other member's key (3 s apart) and of the
	// same one's (2 s apart): still one warning, none of the same.
	time.Sleep(7 * time.Second)
	require.Equal(t, 1, strings.Count(logs.String(), "another consumer.lease_ttl"), logs.String())
	require.NotContains(t, logs.String(), same)
	require.Contains(t, logs.String(), `"other_lease_ttl":9000`)
}
