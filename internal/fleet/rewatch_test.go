package fleet

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/natstest"
)

// A single server restarted loses the members bucket (it is kept in
// memory); a member's renewal finds it gone and creates it anew. The
// members' watches then resumed after the old bucket's last sequence and
// saw no key of the new one until its sequence got there: every member's
// own renewals "did not come back", the assignment stayed paused and not
// ready (for ever, in effect: a day of renewals every 5 s is 17,280
// sequences per member). Now a member whose renewals go through but do
// not come back starts its watch again: each one's own key comes back
// from the new bucket, both are ready again and keep their partitions
// (the leases live in the file-backed bucket, their time to live longer
// than the restart).
func TestMembersFollowABucketCreatedAgainIntegration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	store := t.TempDir()
	s := natstest.StartAt(t, store, -1)
	port := natstest.Port(s)
	f := newTestFleet(t, s.ClientURL())
	// A lease time to live short enough for the watch to be found stuck
	// a few times over in the test's time (a member key renewed every
	// 4 s, a stuck watch started again after two renewals that did not
	// come back), long enough for the leases to outlive the restart on a
	// loaded machine (valid 9.6 s, renewed every 3 s).
	cfg := Config{LeaseTTL: 12 * time.Second}
	const beat = 400 * time.Millisecond
	a := f.joinBeat(cfg, beat)
	b := f.joinBeat(cfg, beat)
	eventually(t, "shared", 20*time.Second, func() bool { return balanced(f.shares(), 2, 16) })
	// A bucket that has lived a while: its sequence far beyond what the
	// new one reaches during the test (2 renewals every 4 s).
	mkv, err := f.js.KeyValue(t.Context(), MembersBucket)
	require.NoError(t, err)
	for i := range 3000 {
		_, err := mkv.PutString(t.Context(), "other.member", fmt.Sprint(i))
		require.NoError(t, err)
	}
	// Each member's watch past them: its own key came back after them
	// (the watch of the members' keys resumes after the last of those it
	// saw).
	filled := mono()
	for _, r := range []*running{a, b} {
		eventually(t, "its own key back after the bucket's sequence grew", 4*cfg.renewEvery()+20*time.Second, func() bool {
			return r.selfSince(filled)
		})
	}

	natstest.Shutdown(s)
	restarted := mono()
	natstest.StartAt(t, store, port)
	// The bucket created anew at once, as the member renewing first
	// after the restart does (the two here renew every 4 s): before the
	// watches' consumers, idle, are found gone (after two of their idle
	// heartbeats, 5 s each) and made again; one made again on no bucket
	// fails and its watch starts afresh, which the fix is not needed for.
	eventually(t, "the members bucket created anew", 20*time.Second, func() bool {
		_, err := membersBucket(t.Context(), f.js, cfg, Settings{Replicas: 1})
		return err == nil
	})
	// Each member's own key comes back from the new bucket: only a watch
	// started again sees it (one resumed after the old bucket's sequence
	// waits for 3000 renewals). The watch is found stuck within three
	// renewals of the key's last return; ten, and the restart, leave a
	// loaded machine room.
	within := 10*cfg.renewEvery() + 20*time.Second
	for _, r := range []*running{a, b} {
		eventually(t, "its own key back from the new bucket", within, func() bool {
			return r.selfSince(restarted)
		})
	}
	eventually(t, "both ready again", within, func() bool {
		okA, _ := a.m.Ready()
		okB, _ := b.m.Ready()
		return okA && okB
	})
	require.True(t, balanced(f.shares(), 2, 16), "no partition changed hands: %v", f.shares())
}

// selfSince says whether r's own member key came back to its watch after
// at (mono()).
func (r *running) selfSince(at time.Duration) bool {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	return r.m.selfAt > at
}
