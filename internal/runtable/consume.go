package aggregator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
)

// MembersBucket is the key-value bucket where the aggregators of a durable
// name announce themselves; a member whose key expired is gone.
const MembersBucket = "GTTSPLIT_MEMBERS"

// Ownership timing: a member renews its key every heartbeat; its key
// expires after memberTTL without renewal; a partition's consumer moves
// its pin to another puller after pinnedTTL without a pull.
const (
	heartbeat = 500 * time.Millisecond
	memberTTL = 3 * time.Second
	pinnedTTL = 5 * time.Second
	// pullExpiry is the expiry of a pull request: a live owner renews
	// well within pinnedTTL.
	pullExpiry = 4 * time.Second
	// pullBatch bounds the messages buffered per partition.
	pullBatch = 64
	// ownerGroup is the priority group of every partition consumer.
	ownerGroup = "owner"
	// acquireTimeout bounds a partition's take-over (its consumer, its
	// open runs): a broker that does not answer fails this heartbeat's
	// take-over, tried again at the next, instead of holding the member.
	acquireTimeout = 10 * time.Second
)

// ownerConfig is what an owner needs.
type ownerConfig struct {
	Stream     string // events stream (the partitioned one is derived)
	Partitions int
	Durable    string
	Lanes      []string
	AckWait    time.Duration
	MaxPending int
	Replicas   int
}

// owner consumes the partitions that the rendezvous hash of the live
// members gives this aggregator: every member computes the same
// assignment from the member list, so each partition has one owner; the
// partition consumers' pinned priority group makes sure only one member
// receives a partition's messages even while members disagree (a member
// joined or left and not everyone saw it yet).
type owner struct {
	cfg  ownerConfig
	js   jetstream.JetStream
	mkv  jetstream.KeyValue
	svc  *Service
	h    bus.Handler
	log  zerolog.Logger
	id   string
	m    *metrics
	nak  time.Duration
	mu   sync.Mutex
	subs map[int]*partSub
	// members is the member list of the last heartbeat (see unpinFor).
	members []string
	// ready is set while the stream, the consumers and the buckets
	// answered at the last heartbeat; why says what failed otherwise.
	ready atomic.Bool
	why   atomic.Value
	// renewErr is the error of the last renewal of the member key, nil
	// once it succeeded (see renew); stopRenew ends the renewals.
	renewErr  atomic.Pointer[error]
	stopRenew func()
	// reattached is when this member last re-attached the partitioned
	// stream's stalled source (see watchSource).
	reattached time.Time
}

type partSub struct {
	cons jetstream.Consumer
	stop context.CancelFunc
	done chan struct{}
}

func newOwner(ctx context.Context, js jetstream.JetStream, cfg ownerConfig, svc *Service, h bus.Handler, nak time.Duration, m *metrics, log zerolog.Logger) (*owner, error) {
	mkv, err := js.KeyValue(ctx, MembersBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		mkv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: MembersBucket, Description: "gttsplit: live aggregators", TTL: memberTTL,
			Storage: jetstream.MemoryStorage, Replicas: max(cfg.Replicas, 1),
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			mkv, err = js.KeyValue(ctx, MembersBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("members bucket %s: %w", MembersBucket, err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	o := &owner{cfg: cfg, js: js, mkv: mkv, svc: svc, h: h, nak: nak, m: m, subs: map[int]*partSub{},
		id: cfg.Durable + "." + hex.EncodeToString(b[:]), log: log.With().Str("component", "owner").Logger()}
	o.why.Store("starting")
	return o, nil
}

// join announces this member (its key in the members bucket), starts
// renewing the key every heartbeat, and waits one heartbeat before the
// first assignment, so that aggregators started together see each other
// and each creates only its own partitions' consumers (instead of every
// one taking all of them and handing most back at once).
func (o *owner) join(ctx context.Context) {
	o.renewOnce(ctx)
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.renew(rctx)
	}()
	o.stopRenew = func() { stop(); <-done }
	select {
	case <-ctx.Done():
	case <-time.After(heartbeat):
	}
}

// run follows the assignment every heartbeat (after join and a first
// tick) until ctx ends; then it releases every partition (writes, acks
// and forgets its runs, and unpins, so the next owner takes over at once)
// and leaves the members.
func (o *owner) run(ctx context.Context) {
	t := time.NewTicker(heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			o.mu.Lock()
			ps := make([]int, 0, len(o.subs))
			for p := range o.subs {
				ps = append(ps, p)
			}
			o.mu.Unlock()
			for _, p := range ps {
				o.release(context.WithoutCancel(ctx), p)
			}
			o.leave(context.WithoutCancel(ctx))
			return
		case <-t.C:
			o.tick(ctx)
		}
	}
}

// leave stops renewing the member key and deletes it.
func (o *owner) leave(ctx context.Context) {
	if o.stopRenew != nil {
		o.stopRenew()
		o.stopRenew = nil
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_ = o.mkv.Delete(dctx, o.id)
	cancel()
}

// renew renews the member key every heartbeat until ctx ends, on its own
// goroutine: a slow take-over (a cluster settling) must not let the key
// expire, or the other members would take this member's partitions while
// it still holds them.
func (o *owner) renew(ctx context.Context) {
	t := time.NewTicker(heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			o.renewOnce(ctx)
		}
	}
}

func (o *owner) renewOnce(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := o.mkv.PutString(rctx, o.id, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		o.renewErr.Store(&err)
		return
	}
	o.renewErr.Store(nil)
}

func (o *owner) notReady(why string, err error) {
	msg := fmt.Sprintf("%s: %v", why, err)
	// Said once a cause (not at every heartbeat): a member that cannot
	// renew, list or take partitions shows why in its log as well as on
	// /readyz.
	if o.ready.Swap(false) || o.why.Load() != msg {
		o.log.Warn().Err(err).Str("part", why).Msg("not ready: partitions are not followed this heartbeat")
	}
	o.why.Store(msg)
}

// Ready says whether the broker parts answered at the last heartbeat, and
// what failed if not.
func (o *owner) Ready() (bool, string) {
	if o.ready.Load() {
		return true, ""
	}
	return false, o.why.Load().(string)
}

func (o *owner) tick(ctx context.Context) {
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := o.renewErr.Load(); err != nil {
		o.notReady("members bucket", *err)
		return
	}
	lister, err := o.mkv.ListKeys(tctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		o.notReady("members bucket", err)
		return
	}
	members := []string{o.id}
	if lister != nil {
		for k := range lister.Keys() {
			if k != o.id && len(k) > len(o.cfg.Durable) && k[:len(o.cfg.Durable)+1] == o.cfg.Durable+"." {
				members = append(members, k)
			}
		}
	}
	if err := tctx.Err(); err != nil {
		// The listing stopped short (it says so only through the
		// context): a partial member list would take others' partitions.
		o.notReady("members bucket", fmt.Errorf("member list cut short: %w", err))
		return
	}
	sort.Strings(members)
	o.mu.Lock()
	prev := o.members
	o.members = members
	o.mu.Unlock()
	want := map[int]bool{}
	for p := 0; p < o.cfg.Partitions; p++ {
		if rendezvous(p, members) == o.id {
			want[p] = true
		}
	}
	o.mu.Lock()
	var lose, gain []int
	for p := range o.subs {
		if !want[p] {
			lose = append(lose, p)
		}
	}
	for p := range want {
		if o.subs[p] == nil {
			gain = append(gain, p)
		}
	}
	o.mu.Unlock()
	sort.Ints(gain)
	// First: while the node that went is missed, take-overs and the
	// readiness checks may fail, and the source must not wait for them.
	o.watchSource(ctx)
	for _, p := range lose {
		o.release(ctx, p)
	}
	for _, p := range gain {
		if err := o.acquire(ctx, p, o.unpinFor(p, prev, members)); err != nil {
			o.notReady(fmt.Sprintf("partition %d", p), err)
			return
		}
	}
	// Lag, and whether the partitions' consumers answer.
	var lag uint64
	o.mu.Lock()
	subs := make([]*partSub, 0, len(o.subs))
	for _, s := range o.subs {
		subs = append(subs, s)
	}
	o.mu.Unlock()
	for _, s := range subs {
		ci, err := s.cons.Info(tctx)
		if err != nil {
			o.notReady("consumer "+s.cons.CachedInfo().Name, err)
			return
		}
		lag += ci.NumPending
	}
	if _, err := o.svc.kv.Status(tctx); err != nil {
		o.notReady("state bucket", err)
		return
	}
	o.m.lag.Set(float64(lag))
	o.m.owned.Set(float64(len(subs)))
	o.m.ckptAge.Set(o.svc.CheckpointAge().Seconds())
	if !o.ready.Swap(true) && o.why.Load() != "starting" {
		o.log.Info().Int("partitions", len(subs)).Msg("ready again")
	}
}

// sourceCooldown is the least time between two re-attachments of the
// partitioned stream's source: a new leader needs a moment to set it up.
const sourceCooldown = 10 * time.Second

// watchSource: the owner of partition 0 (one member at a time) checks at
// every heartbeat that the partitioned stream still hears from its source
// and re-attaches it when not (bus.ReattachStalledSource): without this,
// losing the node that leads the events stream stops every partition for
// 10–20 s.
func (o *owner) watchSource(ctx context.Context) {
	o.mu.Lock()
	mine := o.subs[0] != nil
	o.mu.Unlock()
	if !mine || time.Since(o.reattached) < sourceCooldown {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	did, err := bus.ReattachStalledSource(wctx, o.js, o.cfg.Stream, bus.SourceStall)
	if err != nil {
		o.log.Debug().Err(err).Msg("checking the partitioned stream's source")
		return
	}
	if did != "" {
		o.reattached = time.Now()
		o.m.reattached.Inc()
		o.log.Warn().Msg("partitioned stream's source re-attached: " + did)
	}
}

// rendezvous returns the member with the highest hash of (member,
// partition): every member computes the same owner from the same list, and
// a member leaving moves only its own partitions.
func rendezvous(p int, members []string) string {
	best, bestH := "", uint64(0)
	for _, m := range members {
		h := fnv.New64a()
		_, _ = fmt.Fprintf(h, "%s/%d", m, p)
		// FNV-1a alone orders members nearly the same for every
		// partition (the partition's bytes come last and barely move the
		// high bits), so one member would win almost all of them: mix
		// every bit into every other (murmur3's finalizer) first.
		if v := mix64(h.Sum64()); best == "" || v > bestH {
			best, bestH = m, v
		}
	}
	return best
}

// mix64 is murmur3's 64-bit finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb3fe1a85ec53
	x ^= x >> 33
	return x
}

// unpinFor says whether partition p, taken now, comes from an owner that
// is gone: one whose member key expired (killed, or cut off from the
// broker) and who no longer pulls, so its pin is dropped at once instead
// of after pinnedTTL. A partition that moves from a live member (a member
// joined) waits for that member's release, which unpins it. At the first
// heartbeat the last owner is the one among the other members, or unknown
// (an earlier instance, gone) when there are none.
func (o *owner) unpinFor(p int, prev, members []string) bool {
	was := prev
	if len(was) == 0 {
		was = slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == o.id })
	}
	if len(was) == 0 {
		return true
	}
	last := rendezvous(p, was)
	return last != o.id && !slices.Contains(members, last)
}

// consumerName is the durable consumer of partition p.
func (o *owner) consumerName(p int) string { return fmt.Sprintf("%s-p%02d", o.cfg.Durable, p) }

// acquire loads partition p's open runs and starts consuming it; unpin
// drops the pin of its last owner first (see unpinFor).
func (o *owner) acquire(ctx context.Context, p int, unpin bool) error {
	ctx, cancel := context.WithTimeout(ctx, acquireTimeout)
	defer cancel()
	var filters []string
	if len(o.cfg.Lanes) == 0 {
		filters = []string{bus.PartitionFilter(p, "")}
	}
	for _, l := range o.cfg.Lanes {
		filters = append(filters, bus.PartitionFilter(p, l))
	}
	replicas := o.cfg.Replicas
	if replicas <= 1 {
		replicas = 0
	}
	name := o.consumerName(p)
	if cur, err := o.js.Consumer(ctx, bus.PartitionStream(o.cfg.Stream), name); err == nil {
		replicas = max(replicas, cur.CachedInfo().Config.Replicas)
	}
	cons, err := o.js.CreateOrUpdateConsumer(ctx, bus.PartitionStream(o.cfg.Stream), jetstream.ConsumerConfig{
		Durable:        name,
		Description:    fmt.Sprintf("gttsplit aggregator, partition %d", p),
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        o.cfg.AckWait,
		MaxDeliver:     -1,
		MaxAckPending:  o.cfg.MaxPending,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{ownerGroup},
		PinnedTTL:      pinnedTTL,
		Replicas:       replicas,
	})
	if err != nil {
		return fmt.Errorf("consumer %s: %w", name, err)
	}
	if unpin {
		// Before this member pulls: it must not unpin itself. (A killed
		// owner's pulls went with its connection, so the next pull that
		// comes is this member's.)
		if st, err := o.js.Stream(ctx, bus.PartitionStream(o.cfg.Stream)); err == nil {
			_ = st.UnpinConsumer(ctx, name, ownerGroup) // (none pinned: nothing to do)
		}
	}
	if err := o.svc.Acquire(ctx, p); err != nil {
		return err
	}
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s := &partSub{cons: cons, stop: stop, done: make(chan struct{})}
	o.mu.Lock()
	o.subs[p] = s
	o.mu.Unlock()
	go func() {
		defer close(s.done)
		o.consume(pctx, p, cons)
	}()
	o.log.Info().Int("partition", p).Msg("partition taken over")
	return nil
}

// consume pulls partition p's messages (as the pinned member of its
// priority group) and hands them to the handler, one at a time, until ctx
// ends. It uses the callback form of the pull consumer: the iterator form
// buffers in a channel as long as a pull, which a leadership change or a
// missed heartbeat can overrun (a new pull is sent while the old one still
// delivers), and a message that does not fit is dropped by the client, to
// come back only after consumer.ack_wait.
func (o *owner) consume(ctx context.Context, p int, cons jetstream.Consumer) {
	// mu is held while a message is handled; once stopped, a message still
	// delivered is handed back (nak) for the next owner at once.
	var mu sync.Mutex
	stopped := false
	handle := func(jm jetstream.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			_ = jm.Nak()
			return
		}
		m, err := bus.WrapMsg(jm, o.js.Conn())
		if err != nil {
			_ = jm.Term()
			return
		}
		if err := o.h(ctx, m); err != nil {
			_ = jm.NakWithDelay(o.nak)
		}
	}
	errs := jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		o.log.Debug().Err(err).Int("partition", p).Msg("next message")
	})
	for ctx.Err() == nil {
		cc, err := cons.Consume(handle, jetstream.PullMaxMessages(min(o.cfg.MaxPending, pullBatch)),
			jetstream.PullPriorityGroup(ownerGroup), jetstream.PullExpiry(pullExpiry), errs)
		if err == nil {
			select {
			case <-ctx.Done():
				cc.Stop()
			case <-cc.Closed():
				// A terminal error (the consumer deleted): consume again.
				err = errors.New("consumer closed")
			}
		}
		if err != nil && ctx.Err() == nil {
			o.log.Debug().Err(err).Int("partition", p).Msg("partition consumer not ready")
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	// Wait for the message being handled, if any; none after it.
	mu.Lock()
	stopped = true
	mu.Unlock()
}

// abort stops consuming every partition at once, without writing or
// handing over (a start that failed; nothing was folded yet).
func (o *owner) abort() {
	defer o.leave(context.Background())
	o.mu.Lock()
	subs := o.subs
	o.subs = map[int]*partSub{}
	o.mu.Unlock()
	for _, s := range subs {
		s.stop()
		<-s.done
	}
}

// release stops consuming partition p, writes and acknowledges what its
// runs hold, forgets them and unpins the consumer, so that its next owner
// is pinned at once.
func (o *owner) release(ctx context.Context, p int) {
	o.mu.Lock()
	s := o.subs[p]
	delete(o.subs, p)
	o.mu.Unlock()
	if s == nil {
		return
	}
	s.stop()
	<-s.done
	o.svc.Release(ctx, p)
	uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if st, err := o.js.Stream(uctx, bus.PartitionStream(o.cfg.Stream)); err == nil {
		_ = st.UnpinConsumer(uctx, o.consumerName(p), ownerGroup)
	}
	cancel()
	o.log.Info().Int("partition", p).Msg("partition handed over")
}
