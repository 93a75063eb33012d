package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
