package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
)

// MembersBucket is the key-value bucket where the aggregators of every
// group announce themselves (one key a member, renewed every third of the
// lease time to live, gone once the member stops renewing it).
const MembersBucket = "GTTSPLIT_MEMBERS"

// How often the keys are renewed: a member key every LeaseTTL/renewals
// (Config.renewEvery), a lease every LeaseTTL/leaseRenewals: two renewals
// are sent within its validity (LeaseTTL less the margin), and one whose
// answer comes late (it waits behind the partition's fenced writes, which
// a loaded broker answers slowly) leaves the lease in doubt, not lost
// (Lease); a member's leases are renewed together, in one atomic batch,
// where the bucket takes them (renewLease). A member is taken for live
// for Config.memberTTL after its member key or one of its leases was last
// renewed; the margin a lease holder takes off its validity is a fifth of
// LeaseTTL (Member.margin). Nothing else is sent to the broker while
// nothing moves: an idle fleet's control traffic is these renewals (and
// what watches them). memberBeats bounds, in heartbeats, how long Join
// waits to see itself and the leases.
const (
	renewals      = 3
	leaseRenewals = 3
	memberBeats   = 5
	// staleBeats is the least a partition stays free before any member
	// takes it and Ready reports it unowned (it waits a lease's time to
	// live for the member short of its target).
	staleBeats = 3
	// missedBeats is how many heartbeats a condition must last before
	// Ready reports it (one slow heartbeat is not a fault).
	missedBeats = 3
)

// Handler is told what happens to this member's partitions. Its methods
// are called from the member's goroutines, never two at a time for the
// same partition.
type Handler interface {
	// Acquired is called once a partition's lease is held, before any
	// of its messages is pulled: load what the partition needs and start
	// consuming it. An error gives the lease back.
	Acquired(ctx context.Context, l *Lease) error
	// Release hands a partition over: stop consuming, write what it
	// holds (the lease is still valid: fenced writes go through) and
	// acknowledge. The lease is given back right after it returns.
	Release(ctx context.Context, l *Lease)
	// Lost says the lease is gone (expired or taken): stop at once and
	// write nothing more; what was not written is delivered again to
	// the partition's next owner.
	Lost(l *Lease)
}

// Member is one aggregator of a group: it announces itself, follows the
// other members and the leases, and takes and gives back partitions (see
// decide) so that each partition has exactly one owner.
type Member struct {
	id  string
	cfg Config
	set Settings
	js  jetstream.JetStream
	mkv jetstream.KeyValue
	h   Handler
	log zerolog.Logger

	// mu guards held, views and the fields below it. Lock order: mu is
	// never held while a Lease's mu is taken or a Handler is called.
	mu      sync.Mutex
	held    map[int]*heldLease
	members map[string]seenMember // member -> its last update
	// ttlWarned: the members warned of for another lease_ttl (warnOtherTTL).
	ttlWarned map[string]bool
	holders   []string        // partition -> holder, from the lease watch
	free      []time.Duration // partition -> mono() since it is seen free (0: held)
	selfAt    time.Duration   // mono() our own key last came back
	seen      bool            // our own key came back at least once
	leaseOK   bool            // the lease watch delivered its initial values
	// selfStored is when the server stored our own key's last renewal
	// that came back (the bucket's clock, as seenMember.stored).
	selfStored time.Time

	// tickMu is held while the assignment is computed and acted on (a
	// tick); frozen (set under it) ends the ticks: Freeze. Lock order:
	// tickMu, then mu.
	tickMu sync.Mutex
	frozen bool
	// freezing is set as Freeze starts: a tick under way takes no more
	// partitions.
	freezing atomic.Bool

	// batch says the leases are renewed in atomic batches (the bucket
	// takes them and is replicated: batchesAllowed); renewMu is held
	// while one is chosen and its leases' locks taken (not while it is
	// sent), so that the renewals due together go in one.
	batch   atomic.Bool
	renewMu sync.Mutex
	// batchUnread: whether the bucket takes atomic batches went unread
	// at Join (a busy broker); keepMember asks again until it is read.
	batchUnread atomic.Bool

	renewErr atomic.Pointer[error]
	faults   map[string]time.Duration // condition -> mono() since it holds
	ready    atomic.Bool
	why      atomic.Pointer[string]
	wg       sync.WaitGroup
	stopBg   context.CancelFunc

	// rewatch starts the members watch again (renewMember); rewatchAt
	// (under mu) is mono() when it last did.
	rewatch   chan struct{}
	rewatchAt time.Duration
	// probe asks keepMember for a renewal of the member key now: a
	// member looks overdue and only this member's own key coming back
	// after its deadline tells whether it died (View). probeAt (under
	// mu) is mono() when one was last asked.
	probe   chan struct{}
	probeAt time.Duration
}

type heldLease struct {
	l    *Lease
	stop context.CancelFunc
	done chan struct{}
	// releasing is set (under Member.mu) while the partition is handed
	// over: a loss meanwhile is the release's to handle.
	releasing bool
	// loading is set (under Member.mu) while Handler.Acquired runs: a
	// loss meanwhile (lostLoading) is told once it returned, so that the
	// Handler never has two calls for one partition at once.
	loading, lostLoading bool
}

// Join announces a new member of cfg.Group, starts following the members
// and the leases, and takes its first partitions (a few at a time, the
// members read again between). Run goes on following the assignment;
// Abort leaves without running.
func Join(ctx context.Context, js jetstream.JetStream, cfg Config, set Settings, h Handler, log zerolog.Logger) (*Member, error) {
	cfg, set = withDefaults(cfg, set)
	if cfg.Group == "" || set.Partitions <= 0 || set.KV == nil || set.Bucket == "" {
		return nil, errors.New("fleet: group, partitions and bucket are required")
	}
	mkv, err := membersBucket(ctx, js, cfg, set)
	if err != nil {
		return nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	m := &Member{id: cfg.Group + "." + hex.EncodeToString(b[:]), cfg: cfg, set: set, js: js, mkv: mkv, h: h,
		held: map[int]*heldLease{}, members: map[string]seenMember{}, holders: make([]string, set.Partitions),
		free: make([]time.Duration, set.Partitions), faults: map[string]time.Duration{}, rewatch: make(chan struct{}, 1),
		probe: make(chan struct{}, 1)}
	m.log = log.With().Str("component", "fleet").Str("member", m.id).Logger()
	m.askBatch(ctx)
	starting := "starting"
	m.why.Store(&starting)
	m.renewMember(ctx)
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	m.stopBg = stop
	m.wg.Add(3)
	go func() { defer m.wg.Done(); m.keepMember(bg) }()
	go func() { defer m.wg.Done(); m.watchMembers(bg) }()
	go func() { defer m.wg.Done(); m.watchLeases(bg) }()
	// Wait until this member sees itself and the leases (a few
	// heartbeats at most): members starting together see each other
	// before any takes a partition.
	deadline := time.Now().Add(memberBeats * set.Heartbeat)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		m.mu.Lock()
		ok := m.seen && m.leaseOK
		m.mu.Unlock()
		if ok {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The first assignment, so the caller reports ready at once.
	for m.tick(ctx) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	return m, nil
}

// Abort hands over what Join took and leaves (a start that failed before
// Run). Run's end does the same.
func (m *Member) Abort() {
	m.releaseAll(context.Background())
	m.stopBg()
	m.wg.Wait()
	dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = m.mkv.Delete(dctx, m.id)
	cancel()
}

// membersBucket opens the members bucket, creating it when it is missing
// (it is kept in memory: a server's restart loses it). Its keys live
// LeaseTTL: a bucket whose keys live shorter than a member key's renewals
// need (an earlier version's: five heartbeats) is given that.
func membersBucket(ctx context.Context, js jetstream.JetStream, cfg Config, set Settings) (jetstream.KeyValue, error) {
	ttl := cfg.LeaseTTL
	mkv, err := js.KeyValue(ctx, MembersBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		mkv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: MembersBucket, Description: "gttsplit: live aggregators", TTL: ttl,
			Storage: jetstream.MemoryStorage, Replicas: max(set.Replicas, 1),
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			mkv, err = js.KeyValue(ctx, MembersBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("members bucket %s: %w", MembersBucket, err)
	}
	if st, err := js.Stream(ctx, "KV_"+MembersBucket); err == nil {
		if c := st.CachedInfo().Config; c.MaxAge > 0 && c.MaxAge < ttl {
			c.MaxAge = ttl
			if _, err := js.UpdateStream(ctx, c); err != nil {
				return nil, fmt.Errorf("members bucket %s: its keys' time to live to %s: %w", MembersBucket, ttl, err)
			}
		}
	}
	return mkv, nil
}

// Freeze stops following the assignment: once it returns, no partition is
// taken or given back by a heartbeat any more (a tick under way finished
// first), while the leases held stay renewed, until Run's end or Abort
// hands them all over at once. A stopping aggregator freezes its member
// first, so that what it folds and writes meanwhile stays its own.
func (m *Member) Freeze() {
	m.freezing.Store(true)
	m.tickMu.Lock()
	m.frozen = true
	m.tickMu.Unlock()
}

// ID is the member's id (<group>.<random>).
func (m *Member) ID() string { return m.id }

// Run follows the assignment until ctx ends: at once, then every
// heartbeat (sooner while it takes partitions: a few at a time, the
// members read again between); then it hands every partition over
// (Handler.Release, then the lease is purged so the next owner takes it at
// once) and leaves.
func (m *Member) Run(ctx context.Context) {
	defer m.Abort()
	for {
		wait := m.set.Heartbeat
		if m.tick(ctx) {
			wait = min(wait, 100*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// keepMember renews the member key every renewEvery, and when a probe
// asks (the next renewal renewEvery after that one).
func (m *Member) keepMember(ctx context.Context) {
	t := time.NewTicker(m.cfg.renewEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.probe:
			t.Reset(m.cfg.renewEvery())
		}
		m.renewMember(ctx)
		if m.batchUnread.Load() {
			m.askBatch(ctx)
		}
	}
}

// askBatch reads whether the bucket takes atomic batches (renewals go in
// one); unread, the leases are renewed one at a time until keepMember's
// next turn asks again.
func (m *Member) askBatch(ctx context.Context) {
	ok, err := bus.AtomicAllowed(ctx, m.js, "KV_"+m.set.Bucket)
	m.batch.Store(ok)
	m.batchUnread.Store(err != nil)
	if err != nil {
		m.log.Debug().Err(err).Msg("fleet: whether the bucket takes atomic batches went unread: asked again at the member key's next renewal")
	}
}

func (m *Member) renewMember(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, m.cfg.renewEvery())
	defer cancel()
	if _, err := m.mkv.PutString(rctx, m.id, memberValue(m.cfg.renewEvery())); err != nil {
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
			// The bucket is gone (a restarted server loses it): again.
			_, _ = membersBucket(rctx, m.js, m.cfg, m.set)
		}
		m.renewErr.Store(&err)
		return
	}
	m.renewErr.Store(nil)
	// Renewals go through but our own key does not come back: the watch
	// is stuck (a members bucket created anew, by us or another member,
	// after a restarted server lost it: the watch would resume after the
	// old bucket's last sequence and miss every key until the new one
	// got there). Start it again, at most once every two renewals.
	now := mono()
	ttl := m.cfg.renewEvery()
	m.mu.Lock()
	stuck := m.seen && now-m.selfAt > 2*ttl && now-m.rewatchAt > 2*ttl
	if stuck {
		m.rewatchAt = now
	}
	m.mu.Unlock()
	if stuck {
		select {
		case m.rewatch <- struct{}{}:
		default:
		}
	}
}

// watchMembers follows the members bucket: a member is live while its
// renewals keep coming (their expiry is silent).
func (m *Member) watchMembers(ctx context.Context) {
	prefix := m.cfg.Group + "."
	watch(ctx, m.mkv, prefix+">", m.log, m.rewatch, nil, func(e jetstream.KeyValueEntry) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if e.Operation() != jetstream.KeyValuePut {
			delete(m.members, e.Key())
			delete(m.ttlWarned, e.Key())
			return
		}
		now := mono()
		stored := e.Created()
		if sm, ok := m.members[e.Key()]; ok && sm.stored.After(stored) {
			stored = sm.stored // a lease renewed later
		}
		m.members[e.Key()] = seenMember{at: now, ttl: memberTTLOf(e.Value(), m.set.Heartbeat), stored: stored}
		m.warnOtherTTL(e.Key(), e.Value())
		if e.Key() == m.id {
			m.selfAt, m.seen = now, true
			m.selfStored = e.Created()
		}
	})
}

// watchLeases follows who holds each partition's lease.
func (m *Member) watchLeases(ctx context.Context) {
	prefix := leasePrefix(m.cfg.Group)
	watch(ctx, m.set.KV, prefix+">", m.log, nil, func() {
		m.mu.Lock()
		m.leaseOK = true
		m.mu.Unlock()
	}, func(e jetstream.KeyValueEntry) {
		var p int
		if _, err := fmt.Sscanf(strings.TrimPrefix(e.Key(), prefix), "%d", &p); err != nil || p < 0 || p >= m.set.Partitions {
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if e.Operation() != jetstream.KeyValuePut {
			m.holders[p] = ""
			return
		}
		holder := holderOf(e.Value())
		m.holders[p] = holder
		// A lease renewed says its holder was alive then, as its member
		// key renewed would (a member already seen, of this group).
		if sm, ok := m.members[holder]; ok {
			sm.at = max(sm.at, mono()-max(time.Since(e.Created()), 0))
			if e.Created().After(sm.stored) {
				sm.stored = e.Created()
			}
			m.members[holder] = sm
		}
	})
}

// watch follows the keys of kv matching filter until ctx ends, calling
// caughtUp once the values present at the start were delivered, and
// starting again after an error or when restart says so (nil: never).
func watch(ctx context.Context, kv jetstream.KeyValue, filter string, log zerolog.Logger, restart <-chan struct{}, caughtUp func(), fn func(jetstream.KeyValueEntry)) {
	for ctx.Err() == nil {
		w, err := kv.Watch(ctx, filter)
		if err != nil {
			log.Debug().Err(err).Str("keys", filter).Msg("watch")
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
				continue
			}
		}
	follow:
		for {
			select {
			case e, ok := <-w.Updates():
				switch {
				case !ok:
					break follow
				case e == nil:
					if caughtUp != nil {
						caughtUp()
					}
				default:
					fn(e)
				}
			case <-restart:
				log.Info().Str("keys", filter).Msg("watch started again: renewals go through but do not come back")
				break follow
			}
		}
		_ = w.Stop()
	}
}

// tick computes the assignment once and acts on it: one heartbeat's work.
// It reports whether it moved a partition (more may follow soon).
func (m *Member) tick(ctx context.Context) bool {
	m.tickMu.Lock()
	defer m.tickMu.Unlock()
	if m.frozen {
		return false
	}
	faults := map[string]string{}
	if err := m.renewErr.Load(); err != nil {
		faults["members"] = fmt.Sprintf("members bucket: member key not renewed: %v", *err)
	}
	now := mono()
	m.mu.Lock()
	ttl := m.cfg.memberTTL()
	var members []string
	for id, sm := range m.members {
		if sm.live(now) {
			members = append(members, id)
		}
	}
	if !slices.Contains(members, m.id) {
		members = append(members, m.id)
	}
	slices.Sort(members)
	m.probeOverdue(now)
	stale := !m.seen || now-m.selfAt > ttl
	holders := slices.Clone(m.holders)
	for p, h := range holders {
		if h == m.id && m.held[p] == nil {
			holders[p] = "" // given back or lost, the watch not there yet
		}
	}
	for p, hl := range m.held {
		holders[p] = m.id
		if !hl.l.Valid() && !hl.l.InDoubt() {
			holders[p] = "" // lost (a lease in doubt is still this member's: not taken again)
		}
	}
	// A partition free for as long as a lease lives is anyone's to take
	// (see view.stale) and reported unowned; until then it waits for the
	// member short of its target, which may be loading those it took
	// before.
	overdue := make([]bool, len(holders))
	var unowned []string
	for p, h := range holders {
		switch {
		case h != "":
			m.free[p] = 0
		case m.free[p] == 0:
			m.free[p] = now
		}
		overdue[p] = m.free[p] != 0 && now-m.free[p] > max(staleBeats*m.set.Heartbeat, m.cfg.LeaseTTL)
		if overdue[p] {
			unowned = append(unowned, fmt.Sprint(p))
		}
	}
	leaseOK := m.leaseOK
	m.mu.Unlock()
	if stale {
		faults["members"] = "members bucket: this member's own renewals do not come back (the bucket has no leader?): assignment paused"
	}
	if !leaseOK {
		faults["leases"] = "leases: not read yet"
	}
	if len(unowned) > 0 {
		faults["unowned"] = "partitions without an owner: " + strings.Join(unowned, ", ")
	}
	m.report(faults)
	if stale || !leaseOK {
		return false
	}
	pl := decide(view{me: m.id, members: members, holders: holders, stale: overdue, step: m.set.Step})
	if pl.release >= 0 {
		m.releaseOne(ctx, pl.release)
	}
	took := false
	for _, p := range pl.acquire {
		if ctx.Err() != nil || m.freezing.Load() {
			return false
		}
		took = m.take(ctx, p) || took
	}
	return took || pl.release >= 0
}

// probeOverdue asks for a renewal of the member key (at most once a
// renewal interval) when a member's renewals are overdue here but this
// member's own key has not come back after the member's deadline yet: the
// member is dead, or the members bucket is away (View tells them apart by
// whether the renewal comes back). m.mu is held.
func (m *Member) probeOverdue(now time.Duration) {
	if !m.seen || now-m.probeAt <= m.cfg.renewEvery() {
		return
	}
	for _, sm := range m.members {
		if !sm.live(now) && !sm.outlivedBy(m.selfStored) {
			m.probeAt = now
			select {
			case m.probe <- struct{}{}:
			default:
			}
			return
		}
	}
}

// report updates readiness: a fault is reported once it lasted
// missedBeats heartbeats (and logged once).
func (m *Member) report(faults map[string]string) {
	var why []string
	now := mono()
	for k, v := range faults {
		if _, ok := m.faults[k]; !ok {
			m.faults[k] = now
		}
		if now-m.faults[k] >= missedBeats*m.set.Heartbeat {
			why = append(why, v)
		}
	}
	for k := range m.faults {
		if _, ok := faults[k]; !ok {
			delete(m.faults, k)
		}
	}
	if len(why) == 0 {
		if !m.ready.Swap(true) {
			if w := m.why.Load(); w != nil && *w != "starting" {
				m.log.Info().Msg("fleet: ready again")
			}
		}
		return
	}
	slices.Sort(why)
	msg := strings.Join(why, "; ")
	if m.ready.Swap(false) || *m.why.Load() != msg {
		m.log.Warn().Str("why", msg).Msg("fleet: not ready")
	}
	m.why.Store(&msg)
}

// Ready says whether this member follows the fleet (its member key is
// renewed and seen, the leases are read, every partition has an owner),
// and why not.
func (m *Member) Ready() (bool, string) {
	if m.ready.Load() {
		return true, ""
	}
	return false, *m.why.Load()
}

// loadTimeout bounds Handler.Acquired (a partition's open runs are read
// while its lease is renewed).
const loadTimeout = 2 * time.Minute

// take acquires partition p's lease and hands it to the Handler; it
// reports whether the partition is this member's now.
func (m *Member) take(ctx context.Context, p int) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	l, err := acquire(cctx, m.js, m.set.KV, m.set.Bucket, m.cfg.Group, m.id, p, m.cfg.LeaseTTL, m.margin())
	cancel()
	if errors.Is(err, ErrTaken) {
		return false
	}
	if err != nil {
		m.log.Warn().Err(err).Int("partition", p).Msg("fleet: partition not taken")
		return false
	}
	// A write of the partition takes the renewal along once half a
	// renewal interval passed (Fence.Renewal): a partition folding a
	// backlog renews by its writes, not behind them.
	l.carryAfter = m.cfg.LeaseTTL / leaseRenewals / 2
	hl := m.hold(l)
	actx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	if err := m.h.Acquired(actx, l); err != nil {
		m.log.Warn().Err(err).Int("partition", p).Msg("fleet: partition taken but not loaded; given back")
		m.drop(p, hl)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = l.release(rctx)
		rcancel()
		return false
	}
	m.mu.Lock()
	hl.loading = false
	lost := hl.lostLoading
	m.mu.Unlock()
	if lost {
		m.lost(hl)
		return false
	}
	m.log.Info().Int("partition", p).Uint64("lease_revision", l.Revision()).Msg("fleet: partition taken")
	return true
}

// margin is what a holder takes off a lease's validity: clocks that
// disagree by less keep one owner.
func (m *Member) margin() time.Duration { return max(m.cfg.LeaseTTL/5, time.Second) }

// hold starts renewing l until it is released or lost; the Handler is
// loading it (take clears loading once Acquired returned).
func (m *Member) hold(l *Lease) *heldLease {
	ctx, stop := context.WithCancel(context.Background())
	hl := &heldLease{l: l, stop: stop, done: make(chan struct{}), loading: true}
	m.mu.Lock()
	m.held[l.Partition] = hl
	m.mu.Unlock()
	go func() {
		defer close(hl.done)
		m.keepLease(ctx, hl)
	}()
	return hl
}

// keepLease sends a renewal of hl's lease every LeaseTTL/leaseRenewals
// (counted from the last one's sending, its own or a batch's that took
// it along: a slow answer does not push the next renewal later; sooner
// after a failed renewal) until ctx ends or
// the lease is lost; a lost lease is handed to Handler.Lost. A renewal
// may take until the lease's validity ends and past it (see Lease.renew),
// not just until the next one is due: on a busy machine or broker an
// answer can take longer than that, and every renewal given up that
// early would lose a lease that still had most of its time to live. A
// lease whose validity ran out unanswered is in doubt and renewed on; it
// is lost only when a renewal is refused (the key expired or another
// member holds it) or after a time to live in doubt.
func (m *Member) keepLease(ctx context.Context, hl *heldLease) {
	l := hl.l
	every := m.cfg.LeaseTTL / leaseRenewals
	next := every
	doubted := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.Lost():
			m.lost(hl)
			return
		case <-time.After(next):
		}
		// A lease whose validity ran out is in doubt, renewed on:
		// renew tells whether it is still this member's, and gives it
		// up a time to live later.
		if since := mono() - l.lastSent(); since < every && l.Valid() {
			next = every - since // renewed meanwhile in another lease's batch
			continue
		}
		// A renewal under way is not cut short by a release: the
		// server may have stored it, and the lease's revision must be
		// the key's when the release deletes it (Lease.renew bounds it
		// by the lease's validity).
		err := m.renewLease(context.WithoutCancel(ctx), l, every)
		switch {
		case err == nil:
			next = max(every-(mono()-l.lastSent()), 0)
			if doubted {
				doubted = false
				m.log.Info().Int("partition", l.Partition).Uint64("lease_revision", l.Revision()).Msg("fleet: lease in doubt renewed: the partition stayed this member's, its work is kept")
			}
		case errors.Is(err, ErrLost):
		default:
			if ctx.Err() == nil {
				m.log.Debug().Err(err).Int("partition", l.Partition).Msg("fleet: lease not renewed; retrying")
			}
			next = min(every, 500*time.Millisecond)
		}
		if !doubted && l.InDoubt() {
			doubted = true
			m.log.Warn().Err(err).Int("partition", l.Partition).Msg("fleet: lease in doubt: its time to live ran out with its renewal unanswered; nothing is folded or written to the sinks until a renewal says whose the partition is (it is lost a time to live later)")
		}
	}
}

// renewLease renews l. When the leases are renewed in batches, every
// other lease of this member renewed at least half a renewal interval ago
// goes with it (Lease.lockBatch, renewBatch.send): a member's leases come
// due together after a round or two, and its renewals are one write a
// renewal interval instead of one a lease. renewMu is held only while a
// batch is chosen and its leases' locks taken, not while it waits for the
// broker: a lease left out (its partition writing) is renewed alone
// without waiting for the others' answer. A lease whose lock a batch under
// way holds waits for it and is not renewed again (Lease.renewSince); a
// batch refused or unanswered leaves l to be renewed alone (which tells
// why), the others to their own turn.
func (m *Member) renewLease(ctx context.Context, l *Lease, every time.Duration) error {
	if !m.batch.Load() {
		return l.renew(ctx)
	}
	m.renewMu.Lock()
	last, now := l.lastSent(), mono()
	if now-last < every/2 && l.Valid() {
		m.renewMu.Unlock()
		return nil // in the batch just sent
	}
	var others []*Lease
	m.mu.Lock()
	for _, hl := range m.held {
		if hl.l != l && !hl.releasing && now-hl.l.lastSent() >= every/2 {
			others = append(others, hl.l)
		}
	}
	m.mu.Unlock()
	b := l.lockBatch(last, others)
	m.renewMu.Unlock()
	if b == nil {
		return l.renewSince(ctx, last)
	}
	err := b.send(ctx)
	if err == nil {
		return nil
	}
	if bus.AtomicDisabled(err) {
		m.batch.Store(false)
		m.log.Info().Err(err).Msg("fleet: the bucket takes no atomic batches: each lease is renewed on its own")
	} else {
		m.log.Debug().Err(err).Int("partition", l.Partition).Msg("fleet: batch of renewals not taken; renewing the lease on its own")
	}
	return l.renew(ctx)
}

// lost tells the Handler, and forgets the lease; while the Handler is
// still loading the partition, take tells it once Acquired returned.
func (m *Member) lost(hl *heldLease) {
	l := hl.l
	m.mu.Lock()
	if hl.loading {
		hl.lostLoading = true
		m.mu.Unlock()
		return
	}
	mine := m.held[l.Partition] == hl && !hl.releasing
	if mine {
		delete(m.held, l.Partition)
	}
	m.mu.Unlock()
	if !mine {
		return
	}
	m.log.Warn().Int("partition", l.Partition).Str("why", l.Why()).Msg("fleet: partition lease lost; its unacknowledged events go to its next owner")
	m.h.Lost(l)
}

// drop forgets a held lease without telling the Handler.
func (m *Member) drop(p int, hl *heldLease) {
	m.mu.Lock()
	if m.held[p] == hl {
		delete(m.held, p)
	}
	m.mu.Unlock()
	hl.stop()
	<-hl.done
}

// releaseOne hands partition p over.
func (m *Member) releaseOne(ctx context.Context, p int) {
	m.mu.Lock()
	hl := m.held[p]
	if hl != nil {
		hl.releasing = true
	}
	m.mu.Unlock()
	if hl == nil {
		return
	}
	m.h.Release(ctx, hl.l)
	m.drop(p, hl)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := hl.l.release(rctx); err != nil {
		m.log.Warn().Err(err).Int("partition", p).Msg("fleet: lease not given back; it expires by itself")
		return
	}
	m.log.Info().Int("partition", p).Msg("fleet: partition handed over")
}

// releaseAll hands every partition held over at once: each its own
// Handler.Release and lease deletion, side by side (a stop hands the
// partitions over together, not one after the other).
func (m *Member) releaseAll(ctx context.Context) {
	m.mu.Lock()
	ps := make([]int, 0, len(m.held))
	for p := range m.held {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { m.releaseOne(ctx, p) })
	}
	wg.Wait()
}

// PartitionView is one partition as this member sees it.
type PartitionView struct {
	Partition int    `json:"partition"`
	Owner     string `json:"owner"` // "" when no lease is held
	Mine      bool   `json:"mine"`
	// LeaseRevision is the lease key's revision (the fencing token) of a
	// partition this member holds.
	LeaseRevision uint64 `json:"lease_revision,omitempty"`
}

// View returns every partition's owner as this member sees it, and the
// live members: those not shown dead by this member's own key. A member
// is dead once this member's own renewal came back stored (by the bucket's
// clock) more than the member's time to live after the member's last
// renewal (of its key or a lease): renewals come back in the order they
// were stored, so one of a member renewing in time came back first. While
// the members bucket answers nobody (its leader being elected, this
// member cut off) nothing comes back and nobody is taken for dead,
// whatever the members' lease time to lives and however late their
// renewals come back. A member overdue by this member's clock makes it
// renew its own key at once (probeOverdue), so a dead one is known as
// soon as its time to live ran out.
func (m *Member) View() ([]PartitionView, []string) {
	m.mu.Lock()
	out := make([]PartitionView, len(m.holders))
	for p, h := range m.holders {
		out[p] = PartitionView{Partition: p, Owner: h}
	}
	held := make(map[int]*Lease, len(m.held))
	for p, hl := range m.held {
		held[p] = hl.l
	}
	var members []string
	for id, sm := range m.members {
		if !m.seen || !sm.outlivedBy(m.selfStored) {
			members = append(members, id)
		}
	}
	m.mu.Unlock()
	for p, l := range held {
		out[p].Mine, out[p].Owner, out[p].LeaseRevision = true, m.id, l.Revision()
	}
	slices.Sort(members)
	return out, members
}
