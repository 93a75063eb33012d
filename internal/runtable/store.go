package runtable

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/fleet"
)

// Bucket is the JetStream key-value bucket holding every run's durable
// state, the run index's summaries and the partitions' leases.
const Bucket = "GTTSPLIT_RUNS"

// The keys of the bucket (<skey> is stateKey of the run id):
//
//	open.<partition>.<skey>  the state of an open run: what the
//	                         partition's next owner resumes
//	<skey>                   the state of a closed run (full for
//	                         store.compact_after, then its compact record)
//	pend.<partition>.<skey>  a closed run whose split not every sink
//	                         settled yet: the partition's next owner sends
//	                         it again (a small marker, purged once settled)
//	sum.<skey>               the run's summary (the run index)
//	lanechg.<hash>           a lane's changes comments: per issue the
//	                         comment's id, the digest of its body and
//	                         its changes (lanechanges.go), written by the
//	                         owner of the lane's partition, fenced by its
//	                         lease
//	lease.<group>.<p>        partition p's lease (package fleet)
//
// Every write of a run's keys is fenced by its partition's lease.

// markerTTL is how long the marker of a purged key stays (then nothing of
// the key is left in the bucket's stream).
const markerTTL = 10 * time.Minute

// limitMarkerTTL is how long the marker of a key whose time to live ran
// out (an expired lease) stays: watchers see it, then it goes.
const limitMarkerTTL = time.Minute

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)

// stateKey is the bucket key of a closed run: its id when that is a valid
// key, a hash otherwise (ids come from the network).
func stateKey(runID string) string {
	if plainKey.MatchString(runID) {
		return "run." + runID
	}
	h := sha256.Sum256([]byte(runID))
	return "runx." + hex.EncodeToString(h[:16])
}

// openKey is the key of a run of partition p while it is open.
func openKey(p int, runID string) string { return "open." + strconv.Itoa(p) + "." + stateKey(runID) }

// openPrefix starts the open keys of partition p.
func openPrefix(p int) string { return "open." + strconv.Itoa(p) + "." }

// pendKey marks a closed run of partition p whose split the sinks have not
// all settled.
func pendKey(p int, runID string) string { return pendPrefix(p) + stateKey(runID) }

// pendPrefix starts the pending markers of partition p.
func pendPrefix(p int) string { return "pend." + strconv.Itoa(p) + "." }

// EnsureBucket opens the state bucket, creating it with replicas when it
// is missing; an existing bucket with fewer replicas is raised to them, one
// with more keeps them (with a warning), and one made by an earlier
// version gets per-key time to live (the leases need it).
func EnsureBucket(ctx context.Context, js jetstream.JetStream, replicas int, log zerolog.Logger) (jetstream.KeyValue, error) {
	replicas = max(replicas, 1)
	kvc := jetstream.KeyValueConfig{
		Bucket:         Bucket,
		Description:    "gttsplit: durable state of every run, the run index and the partitions' leases",
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       replicas,
		LimitMarkerTTL: limitMarkerTTL,
	}
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, kvc)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("state bucket %s: %w", Bucket, err)
	}
	st, err := js.Stream(ctx, "KV_"+Bucket)
	if err != nil {
		return nil, fmt.Errorf("state bucket %s: %w", Bucket, err)
	}
	cur := st.CachedInfo().Config
	bus.Drift(log.With().Str("bucket", Bucket).Logger(), "nats.replicas", "state bucket", cur.Replicas, replicas)
	upd := cur
	if replicas > cur.Replicas {
		log.Info().Int("from", cur.Replicas).Int("to", replicas).Msg("nats.replicas: raising the state bucket's replicas")
		upd.Replicas = replicas
	}
	if !cur.AllowMsgTTL || cur.SubjectDeleteMarkerTTL == 0 {
		log.Info().Msg("state bucket: allowing per-key time to live (the partitions' leases)")
		upd.AllowMsgTTL, upd.SubjectDeleteMarkerTTL = true, limitMarkerTTL
	}
	if upd.Replicas != cur.Replicas || upd.AllowMsgTTL != cur.AllowMsgTTL || upd.SubjectDeleteMarkerTTL != cur.SubjectDeleteMarkerTTL {
		si, err := js.UpdateStream(ctx, upd)
		if err != nil {
			return nil, fmt.Errorf("state bucket %s: update: %w", Bucket, err)
		}
		cur = si.CachedInfo().Config
		if kv, err = js.KeyValue(ctx, Bucket); err != nil {
			return nil, fmt.Errorf("state bucket %s: %w", Bucket, err)
		}
	}
	// Atomic batches (nats-server 2.12 or newer; an older server does
	// not know the setting and leaves it off): a checkpoint's writes, a
	// pass of closes, go as one (batch.go). Without them, one at a time.
	if !cur.AllowAtomicPublish {
		upd := cur
		upd.AllowAtomicPublish = true
		si, err := js.UpdateStream(ctx, upd)
		switch {
		case err != nil:
			log.Warn().Err(err).Msg("state bucket: the update allowing atomic batches was refused or went unanswered (it may still be applied): each aggregator writes run states one at a time until it reads that the bucket takes them")
		case !si.CachedInfo().Config.AllowAtomicPublish:
			log.Info().Msg("state bucket: the server takes no atomic batches (nats-server 2.12 or newer does): run states are written one at a time")
		default:
			log.Info().Msg("state bucket: allowing atomic batches (a checkpoint's writes go as one)")
		}
	}
	return kv, nil
}

// store reads and writes the bucket's keys.
type store struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	subj   string // $KV.<bucket>.
	stream string // KV_<bucket>
	// room is how full the bucket is, against its max_bytes: the run
	// states stop short of it by leaseReserve, so that the partitions'
	// leases (renewed in the same bucket, and tiny) always have room.
	room bucketRoom
	// atomic: the bucket takes atomic batches and is replicated (see
	// commit).
	atomic atomic.Bool
	// pos is the bytes commit wrote so far (writeOp.size): about where
	// the bucket's stream is at, so that what was written at about the
	// same pos lies in the same blocks of the broker's store.
	pos atomic.Int64
}

// leaseReserve is the room of a bucket with a max_bytes that the run
// states leave to the leases: a lease renewal is a few hundred bytes
// written before its previous revision is dropped.
// The leases live in the run states' bucket, not one of their own: every
// state write is fenced by its partition's lease revision
// (Nats-Expected-Last-Subject-Sequence), which JetStream checks only
// within one stream. So they get a reserve of the bucket instead; a full
// server or account store refuses them too (room.go says it beforehand).
const leaseReserve = 64 << 10

// errReserve is a write the store refused itself: it would eat into the
// leases' reserve of a bucket near its max_bytes.
var errReserve = errors.New("the state bucket is full: what is left of its max_bytes is kept for the partitions' leases")

// bucketRoom is the bucket's size against its max_bytes, as the table's
// watch last read it, plus what was written since (an overestimate: a
// rewritten key's old value is dropped).
type bucketRoom struct {
	max  atomic.Int64 // <= 0: no max_bytes
	used atomic.Int64
	// mu orders take and done with set: taken is the bytes of every
	// write taken, settled of those done (written or given back).
	mu      sync.Mutex
	taken   int64
	settled int64
}

// take counts n more bytes if they leave the leases their reserve, at
// once (partitions write at the same time: writers racing for the last
// room do not all get it); it reports whether it did. A write taken is
// done once its answer came (done).
func (r *bucketRoom) take(n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if mx := r.max.Load(); mx > 0 && r.used.Load()+int64(n) > mx-leaseReserve {
		return false
	}
	r.used.Add(int64(n))
	r.taken += int64(n)
	return true
}

// done ends the write of n bytes take counted: written, or given back.
func (r *bucketRoom) done(n int, written bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settled += int64(n)
	if !written {
		r.used.Add(-int64(n))
	}
}

// mark is what set needs, taken before the bucket's size is read: the
// bytes of the writes taken and done by then (the size read holds those
// written; those given back are in neither).
func (r *bucketRoom) mark() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.settled
}

// set sets the bucket's max_bytes, and its size to bytes (read after
// mark gave settled) plus what the size may not hold yet: the writes not
// done at the mark and those taken since. Writes answered before the
// read are counted twice until the next set (an overestimate, as a
// rewritten key's is); before, only bytes was kept, and the writes in
// flight while it was read were counted by no one, so the writes that
// followed ate into the leases' reserve.
func (r *bucketRoom) set(max, bytes, settled int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.max.Store(max)
	r.used.Store(bytes + r.taken - settled)
}

// writeOverhead is what a write takes in the bucket's store beside its
// subject and value, rather more than less: its headers (the fence's
// two, with the lease's subject) and the store's own bytes a message.
const writeOverhead = 256

// refreshRoom reads the bucket's size and max_bytes.
func (s *store) refreshRoom(ctx context.Context) {
	settled := s.room.mark()
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return
	}
	info := st.CachedInfo()
	s.room.set(info.Config.MaxBytes, int64(info.State.Bytes), settled)
	// Atomic batches follow the bucket's configuration: allowed after
	// the table started (another aggregator's update, or the table's own
	// read unanswered), or again after a commit found them disallowed.
	s.atomic.Store(bus.AtomicConfig(info.Config))
}

func newStore(js jetstream.JetStream, kv jetstream.KeyValue) *store {
	return &store{js: js, kv: kv, subj: "$KV." + Bucket + ".", stream: "KV_" + Bucket}
}

// put writes key, fenced by l.
func (s *store) put(ctx context.Context, l *fleet.Lease, key string, b []byte) error {
	m := &nats.Msg{Subject: s.subj + key, Data: b}
	n := len(m.Subject) + len(b) + writeOverhead
	if !s.room.take(n) {
		return errReserve
	}
	err := s.publishFenced(ctx, l, m, 0)
	s.room.done(n, err == nil)
	if err != nil {
		if bus.StoreFull(err) {
			// Full before the watch read the bucket's max_bytes (it
			// changed, or the table just started): read it now, so the
			// next writes keep off the leases' reserve at once.
			s.refreshRoom(ctx)
		}
		return err
	}
	return nil
}

// purge removes key with every revision, fenced by l; the marker it
// leaves goes after markerTTL.
func (s *store) purge(ctx context.Context, l *fleet.Lease, key string) error {
	return s.purgeTTL(ctx, l, key, markerTTL)
}

// purgeTTL is purge with a marker that goes after ttl.
func (s *store) purgeTTL(ctx context.Context, l *fleet.Lease, key string, ttl time.Duration) error {
	m := nats.NewMsg(s.subj + key)
	m.Header.Set(kvOperation, "PURGE")
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	return s.publishFenced(ctx, l, m, ttl)
}

// publishFenced publishes m with l's fence. The write holds the lease's
// lock (renewals wait for it), so it is bounded by bus.APITimeout whatever
// the caller's deadline: an unanswered one fails and is made again by the
// caller (the next checkpoint, the next take-over).
//
// In a bucket that takes atomic batches, the lease's renewal rides along
// when one is due (store.publish), so m's fence and ttl (when not 0) are
// set in its headers, as in an atomic batch.
func (s *store) publishFenced(ctx context.Context, l *fleet.Lease, m *nats.Msg, ttl time.Duration) error {
	return l.Fenced(ctx, func(ctx context.Context, f fleet.Fence) error {
		ctx, cancel := context.WithTimeout(ctx, bus.APITimeout)
		defer cancel()
		f.Stamp(m)
		if ttl > 0 {
			m.Header.Set(jetstream.MsgTTLHeader, ttl.String())
		}
		return s.publish(ctx, f, []*nats.Msg{m}, s.atomic.Load())
	})
}

const kvOperation = "KV-Operation"

// getTimeout bounds a read when the caller's context has no deadline; each
// request is bounded by bus.APITimeout and sent again when unanswered (a
// request the server dropped, restarting, is not waited for for ever).
const getTimeout = 10 * time.Second

// errNotFound is get's error for a key that is not there (never written,
// purged, or expired).
var errNotFound = jetstream.ErrKeyNotFound

// get reads key's value from the bucket's stream leader (a replica may
// lag behind a write the last owner of a partition made just before it
// handed it over).
func (s *store) get(ctx context.Context, key string) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, getTimeout)
		defer cancel()
	}
	var last bus.Last
	err := bus.Retry(ctx, func(ctx context.Context) error {
		var err error
		last, err = bus.GetLast(ctx, s.js.Conn(), s.stream, s.subj+key)
		return err
	})
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, errNotFound
	case err != nil:
		return nil, fmt.Errorf("state bucket: get %s: %w", key, err)
	case last.Deleted():
		return nil, errNotFound
	}
	return last.Data, nil
}

// entry is one key of a partition as load reads it.
type entry struct {
	key   string
	value []byte
}

// load calls fn for every key starting with prefix (the last value of
// each), in one pass over the bucket's stream: an ordered consumer that
// the server feeds from its subject index, so the time it takes depends on
// the keys read, not on the bucket's size.
func (s *store) load(ctx context.Context, prefix string, fn func(entry) error) error {
	var (
		c    jetstream.Consumer
		drop = func() {}
		info *jetstream.ConsumerInfo
	)
	err := bus.Retry(ctx, func(ctx context.Context) error {
		drop() // an earlier attempt's
		st, err := s.js.Stream(ctx, s.stream)
		if err != nil {
			return err
		}
		c, drop, err = bus.Ordered(ctx, st, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{s.subj + prefix + ">"},
			DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		})
		if err != nil {
			return err
		}
		info, err = c.Info(ctx)
		return err
	})
	defer func() { drop() }()
	if err != nil {
		return fmt.Errorf("state bucket: keys %s: %w", prefix, err)
	}
	left := info.NumPending
	var refused bus.Refusals
	for left > 0 {
		// Each pull bounded by bus.APITimeout (a timeout is pulled again),
		// not by ctx: a pull the bucket's old leader took is never answered.
		batch, err := c.Fetch(int(min(left, 256)), jetstream.FetchMaxWait(bus.APITimeout))
		if err != nil {
			return fmt.Errorf("state bucket: keys %s: %w", prefix, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			left--
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			if h := m.Headers(); h.Get(kvOperation) != "" || h.Get(jetstream.MarkerReasonHeader) != "" {
				if md.NumPending == 0 {
					left = 0
				}
				continue
			}
			if err := fn(entry{key: m.Subject()[len(s.subj):], value: m.Data()}); err != nil {
				return err
			}
			if md.NumPending == 0 {
				left = 0
			}
		}
		err = batch.Error()
		if again, werr := refused.Again(ctx, got, err); werr != nil {
			return fmt.Errorf("state bucket: keys %s: cut short: %w", prefix, werr)
		} else if again {
			continue
		}
		if err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("state bucket: keys %s: %w", prefix, err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("state bucket: keys %s: cut short: %w", prefix, err)
		}
	}
	return nil
}
