package fleet

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A zero lease_ttl, heartbeat or step given to Join means its documented
// default, in one place: consumer.lease_ttl's is DefaultConfig's.
func TestZeroConfigIsTheDefaults(t *testing.T) {
	t.Parallel()
	cfg, set := withDefaults(Config{Group: "g"}, Settings{Partitions: 4})
	require.Equal(t, DefaultConfig().LeaseTTL, cfg.LeaseTTL)
	require.Equal(t, time.Second, set.Heartbeat)
	require.Equal(t, 2, set.Step)
	cfg, set = withDefaults(Config{Group: "g", LeaseTTL: 4 * time.Second}, Settings{Heartbeat: time.Millisecond, Step: 9})
	require.Equal(t, 4*time.Second, cfg.LeaseTTL)
	require.Equal(t, time.Millisecond, set.Heartbeat)
	require.Equal(t, 9, set.Step)
}

// The keys a member reads are checked with the consumer.* key names.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, DefaultConfig().Validate())
	err := Config{Group: "a b", LeaseTTL: time.Second}.Validate()
	require.ErrorContains(t, err, "durable")
	require.ErrorContains(t, err, "lease_ttl: must be at least 3s, got 1s")
}
