package runtable

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A pull's client waits half the ack wait past the pull's expiry for the
// broker's end of it, at least a second: a client a loaded machine
// schedules seconds late still takes the messages sent near the expiry
// (with a second, all of seven pulls' messages were delivered again after
// the ack wait at load 30–50).
func TestPullGraceIsHalfTheAckWait(t *testing.T) {
	require.Equal(t, 5*time.Second, newFlow(10*time.Second, 64).pullGrace())
	require.Equal(t, 15*time.Second, newFlow(30*time.Second, 64).pullGrace())
	require.Equal(t, time.Second, newFlow(time.Second, 64).pullGrace(), "at least a second")
}
