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
// the ack wait at load 30–50). Its context's deadline stays the one the
// broker's expiry is derived from.
func TestPullGraceIsHalfTheAckWait(t *testing.T) {
	require.Equal(t, 5*time.Second, newFlow(10*time.Second, 64).pullGrace())
	require.Equal(t, 15*time.Second, newFlow(30*time.Second, 64).pullGrace())
	require.Equal(t, time.Second, newFlow(time.Second, 64).pullGrace(), "at least a second")

	ctx, cancel := pullContext(t.Context(), 4*time.Second, 5*time.Second)
	defer cancel()
	deadline, ok := ctx.Deadline()
	require.True(t, ok)
	inner, ok := ctx.(pullCtx).Context.Deadline()
	require.True(t, ok)
	// nats.go asks the broker for nine tenths of the time to the deadline
	// (the expiry, 4 s); the context ends the grace after that expiry.
	require.Equal(t, 5*time.Second-4*time.Second/9, inner.Sub(deadline))
}
