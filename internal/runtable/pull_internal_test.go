package runtable

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A partition's pulls as the consumer's loop and its pulls' subscriptions
// see them: a message that comes on a pull the loop gave up is queued and
// handled as one of the current pull's, late, its ack wait counted from
// when its pull was sent; a pull ends when all it asked for came or at
// the broker's status for it, a status of an earlier pull ends nothing;
// once the consumer stopped, what comes is handed back.
func TestPulledKeepsWhatComesLate(t *testing.T) {
	p := newPulled()
	t0 := time.Unix(1000, 0)
	var at time.Time
	add := func(a time.Time) *flight { at = a; return &flight{} }
	msg := func(id uint64, now time.Time) (bool, *flight) { return p.message(id, &coreMsg{}, "pin-1", now, add) }

	id, pin := p.next()
	require.Equal(t, uint64(1), id)
	require.Empty(t, pin)
	require.False(t, p.none(), "no pull waited for")
	p.start(1, nil, 2, time.Second, "", t0)
	require.True(t, p.none(), "nothing came on pull 1 yet")
	late, back := msg(1, t0.Add(500*time.Millisecond))
	require.False(t, p.none())
	require.False(t, late)
	require.Nil(t, back)
	require.Equal(t, t0.Add(500*time.Millisecond), at, "in time: its ack wait from when it came")
	jm, _ := p.pop(t.Context())
	require.NotNil(t, jm)

	// The loop gives pull 1 up (its grace ran out) and sends pull 2.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	jm, _ = p.pop(ctx)
	require.Nil(t, jm)
	require.ErrorIs(t, p.end(), context.Canceled)
	id, pin = p.next()
	require.Equal(t, uint64(2), id)
	require.Equal(t, "pin-1", pin, "the pin the broker gave")
	p.start(2, nil, 64, time.Second, "", t0.Add(6*time.Second))

	late, _ = msg(1, t0.Add(7*time.Second))
	require.True(t, late, "pull 1 was given up")
	require.Equal(t, t0, at, "its ack wait from when its pull was sent")
	late, _ = msg(2, t0.Add(8500*time.Millisecond))
	require.False(t, late)
	require.Equal(t, t0.Add(6*time.Second), at, "past its pull's expiry: from when the pull was sent")
	p.status(1, pullExpired, nil)
	for range 2 {
		jm, _ = p.pop(t.Context())
		require.NotNil(t, jm, "the late message and pull 2's are handled")
	}
	p.status(2, pullExpired, nil)
	jm, _ = p.pop(t.Context())
	require.Nil(t, jm, "pull 2 expired")
	require.NoError(t, p.end())
	require.Empty(t, p.pulls, "both pulls ended: not listened to")

	// A pull that brought all it asked for ends; a pin mismatch drops the
	// pin.
	p.start(3, nil, 1, time.Second, "", t0.Add(10*time.Second))
	msg(3, t0.Add(10*time.Second))
	jm, _ = p.pop(t.Context())
	require.NotNil(t, jm)
	jm, _ = p.pop(t.Context())
	require.Nil(t, jm)
	require.Empty(t, p.pulls)
	p.start(4, nil, 8, time.Second, "", t0.Add(11*time.Second))
	errPin := errors.New("pin mismatch")
	p.status(4, pinMismatch, errPin)
	jm, _ = p.pop(t.Context())
	require.Nil(t, jm)
	require.ErrorIs(t, p.end(), errPin)
	_, pin = p.next()
	require.Empty(t, pin)

	// Stopped: what was queued is returned, what comes is handed back.
	p.start(5, nil, 8, time.Second, "", t0.Add(12*time.Second))
	msg(5, t0.Add(12*time.Second))
	require.Len(t, p.stop(), 1)
	_, back = msg(5, t0.Add(13*time.Second))
	require.NotNil(t, back)
}

// A stopped consumer's pulls are still listened to until the broker ends
// them: what they bring meanwhile is handed back (not dropped with their
// subscriptions, to come back an ack wait later); a pull that brought all
// it asked for, or whose status came, is no longer listened to, and the
// drain ends once none is left, or at once when the table stops.
func TestStoppedPullsListenedUntilTheyEnd(t *testing.T) {
	p := newPulled()
	now := time.Now()
	add := func(time.Time) *flight { return &flight{} }
	msg := func(id uint64) *flight {
		_, back := p.message(id, &coreMsg{}, "pin-1", time.Now(), add)
		return back
	}
	// Pull 1 given up (still listened to), pull 2 current; both expire
	// an hour from now: only their ends end the drain.
	p.start(1, nil, 2, time.Hour, "", now)
	p.start(2, nil, 8, time.Hour, "", now)
	require.Nil(t, msg(2))
	require.Len(t, p.stop(), 1, "what was pulled and not handled goes back")
	require.NotNil(t, msg(2), "what comes after the stop goes back")
	drained := make(chan struct{})
	go func() { defer close(drained); p.drain(nil, 0) }()
	require.NotNil(t, msg(1))
	require.NotNil(t, msg(1), "pull 1 brought all it asked for")
	p.status(2, pinMismatch, errors.New("pin mismatch"))
	select {
	case <-drained:
	case <-time.After(time.Minute):
		t.Fatal("the drain did not end once every pull ended")
	}
	require.Empty(t, p.pulls)

	// A stopping table ends the drain at once.
	p.start(3, nil, 8, time.Hour, "", now)
	p.stop()
	quit := make(chan struct{})
	close(quit)
	p.drain(quit, 0)
	require.Empty(t, p.pulls)
}

// A stop's drain is cut once nothing delivered waits for an
// acknowledgement: the pulls sent with the pin (which the broker ends,
// once the partition is unpinned, rather than serve), and, when no event
// waits, every pull.
func TestSettledPullsCut(t *testing.T) {
	p := newPulled()
	now := time.Now()
	p.start(1, nil, 8, time.Hour, "", now)
	p.start(2, nil, 8, time.Hour, "pin-1", now)
	p.stop()
	drained := make(chan struct{})
	go func() { defer close(drained); p.drain(nil, 0) }()
	require.False(t, p.cutSettled(true), "a pull sent without a pin may still be pinned and served while events wait")
	p.mu.Lock()
	require.Len(t, p.pulls, 1)
	require.Contains(t, p.pulls, uint64(1))
	p.mu.Unlock()
	require.True(t, p.cutSettled(false), "no event waits: nothing can come")
	select {
	case <-drained:
	case <-time.After(time.Minute):
		t.Fatal("the drain did not end once its pulls were cut")
	}
}
