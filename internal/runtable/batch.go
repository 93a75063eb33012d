package runtable

import (
	"context"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/fleet"
)

// Writes in batches: what a checkpoint or a pass of closes or of settled
// splits writes for a partition is one writeBatch, committed under the
// partition's lease. Each write the broker replicates costs it about the
// same whatever its size (a round trip and a replication round), so a
// replicated state bucket that takes atomic batches (nats-server 2.12 or
// newer: the bucket's stream allows them, see EnsureBucket) gets up to
// maxBatchOps writes (or maxBatchBytes) as one atomic publish: one round
// trip, one replication round, all of them or none, each write carrying
// the lease's fence. A single server, or one without atomic batches, gets
// the writes one at a time, in order (see bus.AtomicAllowed).

const (
	// maxBatchOps bounds the writes of one atomic batch (the server takes
	// up to 1,000).
	maxBatchOps = 256
	// maxBatchBytes bounds the bytes of one atomic batch: a batch holds
	// the lease's lock (renewals wait) while it is sent.
	maxBatchBytes = 4 << 20
)

// writeOp is one write of a batch: a value, or a purge of the key.
type writeOp struct {
	key   string
	data  []byte
	purge bool
}

// size is about what op takes in the bucket's store, rather more than
// less: its subject, its value and its headers (the fence's, the
// batch's, a purge's) with the store's own per-message bytes.
func (op writeOp) size() int { return len(op.key) + len(op.data) + writeOverhead + 128 }

// writeBatch is a set of writes to the state bucket, in order; a key
// written twice keeps its first place and its last value (the bucket keeps
// one value a key).
type writeBatch struct {
	ops []writeOp
	at  map[string]int
}

func (b *writeBatch) add(op writeOp) {
	if i, ok := b.at[op.key]; ok {
		b.ops[i] = op
		return
	}
	if b.at == nil {
		b.at = map[string]int{}
	}
	b.at[op.key] = len(b.ops)
	b.ops = append(b.ops, op)
}

// put writes data under key.
func (b *writeBatch) put(key string, data []byte) { b.add(writeOp{key: key, data: data}) }

// purge removes key with every revision (its marker goes after markerTTL).
func (b *writeBatch) purge(key string) { b.add(writeOp{key: key, purge: true}) }

// len is the number of writes.
func (b *writeBatch) len() int { return len(b.ops) }

// msg is op's message, fenced by f.
func (s *store) msg(op writeOp, f fleet.Fence) *nats.Msg {
	m := nats.NewMsg(s.subj + op.key)
	m.Data = op.data
	if op.purge {
		m.Header.Set(kvOperation, "PURGE")
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		m.Header.Set(jetstream.MsgTTLHeader, markerTTL.String())
	}
	f.Stamp(m)
	return m
}

// commit writes b under l's fence: in atomic batches when the bucket takes
// them, else one write at a time. It returns how many of b's writes (from
// the first, in order) are written: all of them, or those before the batch
// or the write that failed with err. A refused fence loses the lease
// (fleet.ErrLost).
func (s *store) commit(ctx context.Context, l *fleet.Lease, b *writeBatch) (int, error) {
	done, single := 0, 0
	for done < len(b.ops) {
		n := 1
		if s.atomic.Load() && done >= single {
			bytes := b.ops[done].size()
			for n < maxBatchOps && done+n < len(b.ops) && bytes+b.ops[done+n].size() <= maxBatchBytes {
				bytes += b.ops[done+n].size()
				n++
			}
		}
		chunk := b.ops[done : done+n]
		size := 0
		for _, op := range chunk {
			size += op.size()
		}
		// Taken before the write (partitions commit at once), given
		// back when it fails.
		if !s.room.take(size) {
			return done, errReserve
		}
		// In one atomic batch, with the lease's renewal when one is
		// due, unless the bucket takes none or writes go one at a time.
		batched := s.atomic.Load() && done >= single
		err := l.Fenced(ctx, func(ctx context.Context, f fleet.Fence) error {
			ctx, cancel := context.WithTimeout(ctx, bus.APITimeout)
			defer cancel()
			msgs := make([]*nats.Msg, len(chunk), len(chunk)+1)
			for i, op := range chunk {
				msgs[i] = s.msg(op, f)
			}
			return s.publish(ctx, f, msgs, batched)
		})
		s.room.done(size, err == nil)
		if err != nil {
			if batched && bus.AtomicDisabled(err) {
				// The bucket no longer takes atomic batches (its stream
				// was changed, or a server without them leads it): one
				// write at a time until the watch reads that it takes
				// them again (refreshRoom).
				s.atomic.Store(false)
				continue
			}
			if batched && bus.AtomicRefused(err) {
				// Not taken (too many batches open on the stream at
				// once, more writes than the server takes in one, or
				// its leader changed while it was sent): nothing of
				// it was written; these writes go one at a time.
				single = done + n
				continue
			}
			if bus.StoreFull(err) {
				// A limit the last look did not know: at once, so
				// that the leases' reserve is kept from now on.
				s.refreshRoom(ctx)
			}
			return done, err
		}
		done += n
		s.pos.Add(int64(size))
		if f := committed.Load(); f != nil {
			(*f)(b.ops[done-1].key)
		}
	}
	return done, nil
}

// committed, when set (by tests), is told the last key of each write or
// atomic batch commit went through, before the next is sent.
var committed atomic.Pointer[func(key string)]

// publish sends msgs, fenced by f: one atomic batch (bus.PublishAtomic)
// when the bucket takes them (batched), with the lease's renewal as its
// last message when one is due (fleet.Fence.Renewal: the partition's
// writes renew its lease, it does not wait behind them); else the one
// message alone.
func (s *store) publish(ctx context.Context, f fleet.Fence, msgs []*nats.Msg, batched bool) error {
	if !batched {
		_, err := s.js.PublishMsg(ctx, msgs[0])
		return err
	}
	r := f.Renewal()
	if r != nil {
		msgs = append(msgs, r)
	}
	if len(msgs) == 1 {
		_, err := s.js.PublishMsg(ctx, msgs[0])
		return err
	}
	pa, err := bus.PublishAtomic(ctx, s.js, msgs)
	if err == nil && r != nil {
		f.Carried(pa.Sequence)
	}
	return err
}
