package fleet

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
)

// TestMain runs up to testParallel integration tests at once (go test's
// default is GOMAXPROCS, 2 on CI's machine): they mostly wait, on lease
// TTLs, answers held by a proxy and a broker stopped, each on a server of
// its own. A -parallel given on the command line still wins.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(testParallel)); err != nil {
			panic(err)
		}
	}
	natstest.VerifyTestMain(m)
}

const testParallel = 8

const testBucket = "FLEET_TEST"

// testFleet is a bucket on a real server and the members joined to it.
type testFleet struct {
	t   *testing.T
	url string
	kv  jetstream.KeyValue
	js  jetstream.JetStream
	// owners records, for every partition, the members whose Handler
	// holds it (Acquired and not yet Released or Lost).
	mu     sync.Mutex
	owners map[int]map[string]bool
	events []string
}

func newTestFleet(t *testing.T, url string) *testFleet {
	t.Helper()
	f := &testFleet{t: t, url: url, owners: map[int]map[string]bool{}}
	f.js = connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for {
		f.kv, err = f.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: testBucket, History: 1, LimitMarkerTTL: time.Second,
			Replicas: replicasOf(url)})
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.NoError(t, err)
	return f
}

func replicasOf(url string) int {
	n := 1
	for _, c := range url {
		if c == ',' {
			n++
		}
	}
	return n
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	return natstest.JetStream(t, url)
}

// memberBucket is a member's own connection to url and the test bucket
// through it.
func memberBucket(t *testing.T, url string) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	js := connect(t, url)
	kv, err := js.KeyValue(context.Background(), testBucket)
	require.NoError(t, err)
	return js, kv
}

// handler is a member's Handler recording into the fleet.
type handler struct{ f *testFleet }

func (h handler) Acquired(_ context.Context, l *Lease) error {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	if h.f.owners[l.Partition] == nil {
		h.f.owners[l.Partition] = map[string]bool{}
	}
	h.f.owners[l.Partition][l.Member()] = true
	h.f.events = append(h.f.events, fmt.Sprintf("%s +%d", l.Member(), l.Partition))
	return nil
}

func (h handler) Release(_ context.Context, l *Lease) { h.gone(l, "release") }
func (h handler) Lost(l *Lease)                       { h.gone(l, "lost") }

func (h handler) gone(l *Lease, how string) {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	delete(h.f.owners[l.Partition], l.Member())
	h.f.events = append(h.f.events, fmt.Sprintf("%s -%d (%s)", l.Member(), l.Partition, how))
}

type running struct {
	m      *Member
	cancel context.CancelFunc
	done   chan struct{}
}

// join starts a member of cfg (group "g" when it names none) on 16
// partitions, with its own connection and a heartbeat of 100ms.
func (f *testFleet) join(cfg Config) *running {
	f.t.Helper()
	return f.joinBeat(cfg, 100*time.Millisecond)
}

// joinBeat is join with another heartbeat.
func (f *testFleet) joinBeat(cfg Config, beat time.Duration) *running {
	f.t.Helper()
	return f.joinWith(cfg, beat, handler{f: f})
}

// joinWith is joinBeat with Handler h.
func (f *testFleet) joinWith(cfg Config, beat time.Duration, h Handler) *running {
	f.t.Helper()
	js := connect(f.t, f.url)
	kv, err := js.KeyValue(context.Background(), testBucket)
	require.NoError(f.t, err)
	set := Settings{Partitions: 16, Bucket: testBucket, KV: kv, Replicas: replicasOf(f.url), Heartbeat: beat}
	if cfg.Group == "" {
		cfg.Group = "g"
	}
	m := joinAgain(f.t, js, cfg, set, h)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{m: m, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); m.Run(ctx) }()
	f.t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	r.cancel()
	<-r.done
}

// shares returns how many partitions each member's Handler holds, and
// fails the test if a partition is held by two.
func (f *testFleet) shares() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for p, ms := range f.owners {
		require.LessOrEqual(f.t, len(ms), 1, "partition %d held by %v (%v)", p, ms, f.events)
		for m := range ms {
			out[m]++
		}
	}
	return out
}

func eventually(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func balanced(shares map[string]int, members, parts int) bool {
	if len(shares) != members {
		return false
	}
	sum := 0
	for _, n := range shares {
		if n < parts/members || n > parts/members+1 {
			return false
		}
		sum += n
	}
	return sum == parts
}

// Three members started together share the partitions 6/5/5; no partition
// is ever held by two (checked at every poll), and once balanced nothing
// moves. A member stopping hands its partitions over at once; one joining
// takes its share, and only that moves, however long it takes to load each
// partition it takes.
func TestMembersShareAndHandOverIntegration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	s := natstest.Start(t)
	f := newTestFleet(t, s.ClientURL())
	// A lease time to live as long as a deployment's: members are not
	// taken for dead on a loaded machine (nobody dies in this test).
	cfg := Config{LeaseTTL: 15 * time.Second}
	var rs []*running
	for i := 0; i < 3; i++ {
		rs = append(rs, f.join(cfg))
	}
	eventually(t, "6/5/5", 30*time.Second, func() bool { return balanced(f.shares(), 3, 16) })
	f.mu.Lock()
	moves := len(f.events)
	f.mu.Unlock()
	time.Sleep(time.Second)
	f.shares()
	f.mu.Lock()
	require.Equal(t, moves, len(f.events), "nothing moves once balanced: %v", f.events[moves:])
	f.mu.Unlock()
	for _, r := range rs {
		ok, why := r.m.Ready()
		require.True(t, ok, why)
	}

	// One leaves: its partitions are given back at once (their lease
	// keys purged by the time it stopped, not left to expire) and the two
	// others take them.
	gone := rs[0].m.ID()
	rs[0].stop()
	keys, err := f.kv.ListKeys(t.Context())
	require.NoError(t, err)
	for k := range keys.Keys() {
		if e, err := f.kv.Get(t.Context(), k); err == nil {
			require.NotEqual(t, gone, holderOf(e.Value()), "%s left to expire, not handed over", k)
		}
	}
	eventually(t, "8/8", 30*time.Second, func() bool { return balanced(f.shares(), 2, 16) })
	// A fourth joins: takes 5 (16 over 3) and only that moves. It loads
	// each partition it takes for a while (a deployment's open runs):
	// the partitions given back for it meanwhile wait for it. Before,
	// one left free for 3 heartbeats was taken by an old member (6 moves,
	// or more, for 5).
	f.mu.Lock()
	before := len(f.events)
	f.mu.Unlock()
	f.joinWith(cfg, 100*time.Millisecond, slowAcquired{handler{f}, time.Second})
	eventually(t, "6/5/5 again", 60*time.Second, func() bool {
		// Nor does an old member call a partition given back for the
		// newcomer unowned while it waits for the newcomer.
		for _, r := range rs[1:] {
			_, why := r.m.Ready()
			require.NotContains(t, why, "without an owner")
		}
		return balanced(f.shares(), 3, 16)
	})
	f.mu.Lock()
	moved := 0
	for _, e := range f.events[before:] {
		if e[len(e)-1] == ')' {
			moved++ // a release
		}
	}
	events := slices.Clone(f.events[before:])
	f.mu.Unlock()
	require.Equal(t, 5, moved, "the newcomer's share moves, nothing more: %v", events)
}

// slowAcquired is a Handler that takes d to load each partition.
type slowAcquired struct {
	handler
	d time.Duration
}

func (h slowAcquired) Acquired(ctx context.Context, l *Lease) error {
	select {
	case <-time.After(h.d):
	case <-ctx.Done():
		return ctx.Err()
	}
	return h.handler.Acquired(ctx, l)
}

// leaseOn starts a server and a fleet on it, and acquires partition p's
// lease of group "g" for member (ttl, margin as acquire's): the lease
// tests' start. It skips a -short run.
func leaseOn(t *testing.T, member string, p int, ttl, margin time.Duration) (*testFleet, *Lease) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	f := newTestFleet(t, natstest.Start(t).ClientURL())
	l, err := acquire(context.Background(), f.js, f.kv, testBucket, "g", member, p, ttl, margin)
	require.NoError(t, err)
	return f, l
}

// A member cut off from renewing (here: its renewals made to fail) loses
// its leases when their time to live runs out, before anyone else can take
// them; the server refuses a write fenced with the old revision.
func TestLeaseExpiresAndFencesIntegration(t *testing.T) {
	t.Parallel()
	// A time to live the broker answers well within on a loaded machine:
	// the writes below that must go through are made while the lease
	// holds (at 2 s, a write answered after the key expired was refused).
	ttl, margin := 6*time.Second, time.Second
	f, a := leaseOn(t, "a", 3, ttl, margin)
	ctx := context.Background()
	require.True(t, a.Valid())
	_, err := acquire(ctx, f.js, f.kv, testBucket, "g", "b", 3, ttl, margin)
	require.ErrorIs(t, err, ErrTaken)

	// A fenced write with a's fence goes through while a holds it.
	w := func(fc Fence) func(context.Context, Fence) error {
		return func(ctx context.Context, _ Fence) error {
			_, err := f.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + testBucket + ".state.x", Data: []byte("a")}, fc.Opt())
			return err
		}
	}
	require.NoError(t, a.Fenced(ctx, func(ctx context.Context, fc Fence) error { return w(fc)(ctx, fc) }))
	require.NoError(t, a.renew(ctx))
	old := Fence{Subject: a.subject, Rev: a.Revision()}

	// a stops renewing: invalid after ttl-margin, and only after the
	// server dropped the key can b take the partition.
	eventually(t, "a invalid", 4*ttl, func() bool { return !a.Valid() })
	var b *Lease
	eventually(t, "b takes the partition", 6*ttl, func() bool {
		b, err = acquire(ctx, f.js, f.kv, testBucket, "g", "b", 3, ttl, margin)
		return err == nil
	})
	require.True(t, b.Valid())
	// a's write, however late, is refused by the server.
	err = w(old)(ctx, old)
	var apiErr *jetstream.APIError
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, jetstream.JSErrCodeStreamWrongLastSequence, apiErr.ErrorCode)
	require.ErrorIs(t, a.Fenced(ctx, w(old)), ErrLost)
	require.ErrorIs(t, a.renew(ctx), ErrLost)
	// b's goes through.
	require.NoError(t, b.Fenced(ctx, func(ctx context.Context, fc Fence) error { return w(fc)(ctx, fc) }))
}

// A renewal whose answer was lost (its publish timed out here after the
// server had stored it) moved the lease key on without the lease knowing.
// The next renewal, fenced write or release is refused for the revision;
// the key still holds this member's id, so the lease takes its revision
// and goes on: before, the member fenced itself out and dropped a
// partition nobody else held. A key another member holds is still lost.
func TestLeaseSurvivesARenewalWhoseAnswerWasLostIntegration(t *testing.T) {
	t.Parallel()
	ttl := 5 * time.Second
	f, a := leaseOn(t, "a", 4, ttl, time.Second)
	ctx := context.Background()
	landed := func() {
		t.Helper()
		_, err := f.js.PublishMsg(ctx, &nats.Msg{Subject: a.subject, Data: a.value},
			jetstream.WithExpectLastSequencePerSubject(a.Revision()), jetstream.WithMsgTTL(ttl))
		require.NoError(t, err)
	}
	write := func(ctx context.Context, fc Fence) error {
		_, err := f.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + testBucket + ".state.y", Data: []byte("a")}, fc.Opt())
		return err
	}

	landed()
	require.NoError(t, a.renew(ctx), "a renewal after one whose answer was lost")
	landed()
	require.NoError(t, a.Fenced(ctx, write), "a fenced write after one")
	require.True(t, a.Valid())
	e, err := f.kv.Get(ctx, a.key)
	require.NoError(t, err)
	require.Equal(t, e.Revision(), a.Revision(), "the lease carries the key's revision")
	landed()
	require.NoError(t, a.release(ctx), "a release after one")
	_, err = f.kv.Get(ctx, a.key)
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "given back")

	// The discriminating case: the key moved on under another member's
	// id. That is a lost lease, whatever its revision.
	b, err := acquire(ctx, f.js, f.kv, testBucket, "g", "b", 5, ttl, time.Second)
	require.NoError(t, err)
	_, err = f.kv.Put(ctx, b.key, []byte("c"))
	require.NoError(t, err)
	require.ErrorIs(t, b.Fenced(ctx, write), ErrLost)
	require.False(t, b.Valid())
}

// TestLeaseTakenAgainFencesTheLostOneIntegration: a member loses a
// partition's lease (its key gone: expired on a loaded machine, or deleted)
// and takes the partition again with a new lease. A write of the lost lease
// reaching the server after that (a checkpoint or a close of the partition's
// old table, late on a loaded machine) is refused for the new revision; the
// key holds this member's id again, yet the write must not go through: it is
// the lost lease's, and the new lease's table folds the same runs (a split
// written twice). The lost lease is lost; the new one keeps the partition.
// Before leases carried a token of their own, the lost lease took the new
// revision as its own and wrote.
func TestLeaseTakenAgainFencesTheLostOneIntegration(t *testing.T) {
	t.Parallel()
	ttl := 30 * time.Second
	f, old := leaseOn(t, "a", 3, ttl, time.Second)
	ctx := context.Background()
	require.Equal(t, "a", old.Member())
	require.NoError(t, f.kv.Delete(ctx, old.key)) // gone, as an expired key is
	again, err := acquire(ctx, f.js, f.kv, testBucket, "g", "a", 3, ttl, time.Second)
	require.NoError(t, err, "the same member takes the partition again")
	require.Equal(t, "a", again.Member())

	wrote := 0
	write := func(ctx context.Context, fc Fence) error {
		_, err := f.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + testBucket + ".state.z", Data: []byte("x")}, fc.Opt())
		if err == nil {
			wrote++
		}
		return err
	}
	require.True(t, old.Valid(), "its holder has not noticed yet")
	require.ErrorIs(t, old.Fenced(ctx, write), ErrLost, "a write of the lost lease")
	require.Zero(t, wrote, "nothing written under the lost lease")
	require.False(t, old.Valid())
	require.ErrorIs(t, old.renew(ctx), ErrLost)

	require.NoError(t, again.Fenced(ctx, write), "the new lease writes")
	require.Equal(t, 1, wrote)
	require.NoError(t, again.renew(ctx))
	require.True(t, again.Valid())
	// Who holds it, as every member's watch says: the member, not the
	// lease's token.
	e, err := f.kv.Get(ctx, again.key)
	require.NoError(t, err)
	require.Equal(t, "a", holderOf(e.Value()))
	require.Equal(t, "a", holderOf([]byte("a")), "a key an earlier version wrote")
}

// TestMemberSurvivesServerRestartIntegration: a server restart loses the
// members bucket (kept in memory): a member creates it again and is ready
// again, its partitions still its own.
func TestMemberSurvivesServerRestartIntegration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	store := t.TempDir()
	s := natstest.StartAt(t, store, -1)
	port := natstest.Port(s)
	f := newTestFleet(t, s.ClientURL())
	r := f.join(Config{LeaseTTL: 15 * time.Second})
	eventually(t, "16 partitions", 10*time.Second, func() bool { return f.shares()[r.m.ID()] == 16 })
	natstest.Shutdown(s)
	natstest.StartAt(t, store, port)
	eventually(t, "ready again", 20*time.Second, func() bool { ok, _ := r.m.Ready(); return ok })
	require.Equal(t, 16, f.shares()[r.m.ID()], "kept its partitions")
	ok, why := r.m.Ready()
	require.True(t, ok, why)
}

// refusing is a Handler that cannot load one partition.
type refusing struct {
	handler
	p int
}

func (h refusing) Acquired(ctx context.Context, l *Lease) error {
	if l.Partition == h.p {
		return errors.New("cannot load")
	}
	return h.handler.Acquired(ctx, l)
}

// A partition no member can take stays unowned: the member's readiness
// says so, naming it, and its view shows it without an owner.
func TestUnownedPartitionReportedIntegration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	s := natstest.Start(t)
	f := newTestFleet(t, s.ClientURL())
	js, kv := memberBucket(t, f.url)
	m := runMember(t, js, Config{Group: "g", LeaseTTL: 3 * time.Second},
		Settings{Partitions: 4, Bucket: testBucket, KV: kv, Heartbeat: 100 * time.Millisecond}, refusing{handler{f}, 2})
	eventually(t, "not ready, partition 2 named", 10*time.Second, func() bool {
		ok, why := m.Ready()
		return !ok && strings.Contains(why, "partitions without an owner: 2")
	})
	// The member keeps trying it (taken, not loaded, given back): the
	// view shows it without an owner between two tries.
	var view []PartitionView
	var members []string
	eventually(t, "partition 2 without an owner in the view", 10*time.Second, func() bool {
		view, members = m.View()
		return view[2].Owner == ""
	})
	require.Equal(t, []string{m.ID()}, members)
	for _, p := range []int{0, 1, 3} {
		require.True(t, view[p].Mine, "partition %d", p)
	}
}

// slowLoading is a Handler whose first Acquired of one partition waits
// until that partition's lease is lost (another writer took its key), and
// records whether Lost came while Acquired still ran.
type slowLoading struct {
	handler
	p        int
	kv       jetstream.KeyValue
	mu       sync.Mutex
	loaded   bool // the slow Acquired began
	loading  bool
	overlap  bool
	lost     chan struct{}
	lostOnce sync.Once
}

func (h *slowLoading) Acquired(ctx context.Context, l *Lease) error {
	h.mu.Lock()
	slow := l.Partition == h.p && !h.loaded
	if slow {
		h.loaded, h.loading = true, true
	}
	h.mu.Unlock()
	if !slow {
		return h.handler.Acquired(ctx, l)
	}
	defer func() {
		h.mu.Lock()
		h.loading = false
		h.mu.Unlock()
	}()
	if _, err := h.kv.PutString(ctx, l.Key(), "someone-else"); err != nil {
		return err
	}
	select {
	case <-l.Lost():
	case <-ctx.Done():
		return ctx.Err()
	}
	time.Sleep(300 * time.Millisecond) // the member's own notice would come meanwhile
	return h.handler.Acquired(ctx, l)
}

func (h *slowLoading) Lost(l *Lease) {
	if l.Partition == h.p {
		h.mu.Lock()
		h.overlap = h.overlap || h.loading
		h.mu.Unlock()
		h.lostOnce.Do(func() { close(h.lost) })
	}
	h.handler.Lost(l)
}

// A lease lost while the Handler still loads its partition is told to the
// Handler once Acquired returned, never during it: the Handler never has
// two calls for one partition at once.
func TestLostWhileLoadingWaitsForAcquiredIntegration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	s := natstest.Start(t)
	f := newTestFleet(t, s.ClientURL())
	js, kv := memberBucket(t, f.url)
	h := &slowLoading{handler: handler{f}, p: 1, kv: kv, lost: make(chan struct{})}
	runMember(t, js, Config{Group: "g", LeaseTTL: 3 * time.Second},
		Settings{Partitions: 2, Bucket: testBucket, KV: kv, Heartbeat: 100 * time.Millisecond}, h)
	select {
	case <-h.lost:
	case <-time.After(30 * time.Second):
		t.Fatal("the lost lease was never told")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	require.False(t, h.overlap, "Lost came while Acquired ran")
}

// A broker slow to answer (every byte it sends reaches the member 2.5 s
// late: longer than the 2 s between renewals, well inside the 8 s a lease
// is valid) does not cost the member its leases: a renewal may take until
// the lease's validity ends, and the next one is sent on time however
// late the last answer came. Before, each renewal was given up after
// LeaseTTL/5 and every lease was lost once its validity ran out.
func TestSlowAnswersKeepTheLeasesIntegration(t *testing.T) {
	t.Parallel()
	f, proxy, js, kv := behindProxy(t)
	const ttl, latency = 10 * time.Second, 2500 * time.Millisecond
	m := runMember(t, js, Config{Group: "g", LeaseTTL: ttl},
		Settings{Partitions: 2, Bucket: testBucket, KV: kv, Heartbeat: time.Second}, handler{f})
	eventually(t, "both partitions held", 30*time.Second, func() bool { return f.shares()[m.id] == 2 })

	proxy.SetLatency(latency)
	// Twice the time to live: a lease renewed only by answers within
	// LeaseTTL/5 would have been lost by then.
	for end := time.Now().Add(2 * ttl); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		f.mu.Lock()
		events := append([]string(nil), f.events...)
		f.mu.Unlock()
		require.Equal(t, 2, f.shares()[m.id], "a lease lost to slow answers: %v", events)
	}
	proxy.SetLatency(0)
}

// behindProxy starts a nats-server with a test fleet on it and a proxy in
// front of it, and opens the members' bucket through the proxy: what the
// member or lease under test sends and hears goes through the proxy, the
// test fleet sees the server directly.
func behindProxy(t *testing.T) (*testFleet, *natstest.Proxy, jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	s := natstest.Start(t)
	f := newTestFleet(t, s.ClientURL())
	proxy := natstest.StartProxy(t, s.Addr().String())
	js, kv := memberBucket(t, proxy.URL())
	return f, proxy, js, kv
}

// joinAgain joins a member of cfg and set to js's bucket with Handler h,
// as the aggregator does: a join the cluster did not answer in time (a
// bucket's stream still electing its leader on a loaded machine) is sent
// again, up to 10 times.
func joinAgain(t *testing.T, js jetstream.JetStream, cfg Config, set Settings, h Handler) *Member {
	t.Helper()
	for try := 1; ; try++ {
		m, err := Join(context.Background(), js, cfg, set, h, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel))
		if err != nil && try < 10 && bus.Transient(err) {
			t.Logf("join, try %d: %v; again", try, err)
			continue
		}
		require.NoError(t, err)
		return m
	}
}

// runMember joins a member of cfg and set to js's bucket with Handler h,
// and runs it until the test ends.
func runMember(t *testing.T, js jetstream.JetStream, cfg Config, set Settings, h Handler) *Member {
	t.Helper()
	m := joinAgain(t, js, cfg, set, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m
}

// A lease whose validity ran out while its renewal's answer is late (a
// loaded machine, a connection being replaced) is in doubt, not lost: the
// key never left it, so nobody else could take the partition. Here the
// server stores the renewal but its answers are held back past the
// validity's end; once they come, the lease is valid again at the
// renewal's revision, and a wait for it (what the run table does with the
// message in hand) returns true. Before, the renewal of a lease whose
// validity had ended lost it at once, and its partition's work was
// handed back (its messages delivered again).
func TestLeaseInDoubtKeptIntegration(t *testing.T) {
	t.Parallel()
	f, proxy, js, kv := behindProxy(t)
	// Valid for half its time to live: the renewal sent once that ran out
	// reaches the server long before the key would expire.
	const ttl, margin = 20 * time.Second, 10 * time.Second
	l, err := acquire(context.Background(), js, kv, testBucket, "g", "a", 6, ttl, margin)
	require.NoError(t, err)
	rev := l.Revision()

	proxy.HoldServer()
	eventually(t, "the lease's validity to run out", 2*ttl, func() bool { return !l.Valid() })
	require.True(t, l.InDoubt(), "in doubt, not lost")
	awaited := make(chan bool, 1)
	go func() { awaited <- l.Await(context.Background()) }()
	renewed := make(chan error, 1)
	go func() { renewed <- l.renew(context.Background()) }()
	// The renewal reaches the server (only its answers are held): the key
	// moves on, still this lease's.
	eventually(t, "the renewal stored", ttl, func() bool {
		e, err := f.kv.Get(context.Background(), l.key)
		return err == nil && e.Revision() > rev && bytes.Equal(e.Value(), l.value)
	})
	proxy.ReleaseServer()
	require.NoError(t, <-renewed, "a late answer keeps the lease")
	require.True(t, l.Valid())
	require.False(t, l.InDoubt())
	require.Greater(t, l.Revision(), rev)
	require.True(t, <-awaited, "what waited for the lease goes on")
	require.NoError(t, l.release(context.Background()))
}

// A lease in doubt whose key another member took (it expired on the
// server) is lost at its next renewal, and a wait for it returns false; one
// whose renewals are never answered is given up a time to live after its
// validity ran out.
func TestLeaseInDoubtLostIntegration(t *testing.T) {
	t.Parallel()
	const ttl, margin = 2 * time.Second, 500 * time.Millisecond
	f, a := leaseOn(t, "a", 7, ttl, margin)
	ctx := context.Background()
	eventually(t, "a in doubt", 2*ttl, a.InDoubt)
	awaited := make(chan bool, 1)
	go func() { awaited <- a.Await(ctx) }()
	var err error
	eventually(t, "b takes the partition", 10*ttl, func() bool {
		_, err = acquire(ctx, f.js, f.kv, testBucket, "g", "b", 7, ttl, margin)
		return err == nil
	})
	require.ErrorIs(t, a.renew(ctx), ErrLost)
	require.False(t, <-awaited)
	require.Contains(t, a.Why(), "another member")

	proxy := natstest.StartProxy(t, f.url[len("nats://"):])
	js, kv := memberBucket(t, proxy.URL())
	c, err := acquire(ctx, js, kv, testBucket, "g", "c", 8, ttl, margin)
	require.NoError(t, err)
	proxy.HoldServer()
	eventually(t, "c given up", 10*ttl, func() bool { return errors.Is(c.renew(ctx), ErrLost) })
	require.Contains(t, c.Why(), "in doubt")
	proxy.ReleaseServer()
}
