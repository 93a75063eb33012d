package fleet

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/natstest"
)

// A single server restarted after longer than a member key lives loses the
// members bucket (it is kept in memory); a member's renewal finds it gone
// and creates it anew. The members' watches then resumed after the old
// bucket's last sequence and saw no key of the new one until its
// sequence got there: every member's own renewals "did not come back",
// the assignment stayed paused and not ready (for ever, in effect: a day
// of 1 s renewals is 86,400 sequences per member). Now a member whose
// renewals go through but do not come back starts its watch again: both
// are ready again and keep their partitions (the leases live in the
// file-backed bucket, their time to live longer than the outage).
func TestMembersFollowABucketCreatedAgainIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	store := t.TempDir()
	s := natstest.StartAt(t, store, -1)
	port := natstest.Port(s)
	f := newTestFleet(t, s.ClientURL())
	// A heartbeat long enough for a renewal to see the bucket gone (the
	// client tries a publish nobody answers again for 0.5 s first).
	const beat = 400 * time.Millisecond
	a := f.joinBeat(Config{LeaseTTL: 30 * time.Second}, beat)
	b := f.joinBeat(Config{LeaseTTL: 30 * time.Second}, beat)
	eventually(t, "shared", 20*time.Second, func() bool { return balanced(f.shares(), 2, 16) })
	// A bucket that has lived a while: its sequence far beyond what the
	// new one reaches during the test (2 renewals a beat).
	mkv, err := f.js.KeyValue(t.Context(), MembersBucket)
	require.NoError(t, err)
	for i := range 3000 {
		_, err := mkv.PutString(t.Context(), "other.member", fmt.Sprint(i))
		require.NoError(t, err)
	}

	natstest.Shutdown(s)
	away := time.Now()
	for time.Since(away) < 3*memberBeats*beat { // longer than a member key lives
		time.Sleep(50 * time.Millisecond)
	}
	natstest.StartAt(t, store, port)
	eventually(t, "both ready again", 25*time.Second, func() bool {
		okA, _ := a.m.Ready()
		okB, _ := b.m.Ready()
		return okA && okB
	})
	require.True(t, balanced(f.shares(), 2, 16), "no partition changed hands: %v", f.shares())
}
