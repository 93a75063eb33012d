package fleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gttsplit/gttsplit/internal/bus"
)

// ErrLost is the error of a fenced write, a renewal or a release whose
// lease is no longer this member's: it expired (the member was paused or
// cut off for longer than its time to live) or another member holds the
// partition now.
var ErrLost = errors.New("fleet: partition lease lost")

// clockBase anchors the leases' deadlines on the monotonic clock: a wall
// clock step never makes a lease look valid for longer.
var clockBase = time.Now()

func mono() time.Duration { return time.Since(clockBase) }

// Fence is what a write guarded by a lease carries: the lease key's subject
// and revision. The server takes the write only while the lease key is still
// at that revision (Nats-Expected-Last-Subject-Sequence on the lease's
// subject), so a member that lost the lease, however late its write
// arrives, writes nothing.
type Fence struct {
	Subject string
	Rev     uint64
	// carry is the lease's renewal when one is due (Renewal).
	carry *carried
}

// carried is a renewal a fenced write takes along.
type carried struct {
	l    *Lease
	sent time.Duration // mono() when Renewal made it; 0 before
}

// Renewal is the lease's renewal, when one is due, for the write to send
// as the LAST message of its atomic batch; nil when none is due (or the
// lease's renewals do not ride in writes). It is written conditional on
// the lease's revision, as every message of the write is, with a new time
// to live: the server stores the batch with it or nothing. A write that
// sends it calls Carried once the batch is stored. A partition writing
// often so renews its lease by its writes: its renewal never waits behind
// them (renewals and fenced writes take turns, see Lease.mu).
func (f Fence) Renewal() *nats.Msg {
	if f.carry == nil {
		return nil
	}
	l := f.carry.l
	m := nats.NewMsg(f.Subject)
	m.Data = l.value
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(f.Rev, 10))
	m.Header.Set(jetstream.MsgTTLHeader, l.ttl.String())
	f.carry.sent = mono()
	return m
}

// Carried takes the renewal the write's batch carried (Renewal, its last
// message), stored with the batch at seq (the batch's commit sequence):
// the lease's new revision, valid for its time to live counted from when
// Renewal made it (before it was sent). It does nothing when no renewal
// was made.
func (f Fence) Carried(seq uint64) {
	if f.carry == nil || f.carry.sent == 0 {
		return
	}
	f.carry.l.renewedAt(seq, f.carry.sent)
}

// Opt is the publish option that makes a write of the lease's bucket
// conditional on the fence.
func (f Fence) Opt() jetstream.PublishOpt {
	return jetstream.WithExpectLastSequenceForSubject(f.Rev, f.Subject)
}

// Stamp sets the fence in m's headers, as Opt does for a publish: the
// form a message of an atomic batch needs (each message carries its own
// checks).
func (f Fence) Stamp(m *nats.Msg) {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(f.Rev, 10))
	m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, f.Subject)
}

// Lease is this member's hold on one partition: the key
// lease.<group>.<partition> of the bucket, created when it is free
// (create-if-absent) with a time to live, renewed by revision (each
// renewal is conditional on the revision the last one wrote, and sets a
// new time to live). The revision is the fencing token of every write made
// for the partition (Fenced); renewals and fenced writes take turns, so
// the token a write carries is always the current one.
//
// A lease is valid until its time to live, counted from the moment this
// member sent its last successful renewal, minus a safety margin: the
// server drops the key later than that, never sooner (given clocks that
// agree within the margin). A member checks Valid before it pulls, folds
// or hands a split to the sinks; a member paused for longer than the time
// to live finds its lease invalid when it runs again, and the server
// refuses its writes.
//
// A lease whose validity ran out without a renewal refused is in doubt,
// not lost: its renewal may have been stored and its answer be late (a
// loaded machine, a connection being replaced), and nobody else can hold
// the key while it is at the revision this lease wrote. It is not Valid
// (nothing is pulled, folded or handed to the sinks meanwhile), but it is
// renewed on, conditional on its revision as always: a renewal that goes
// through makes it valid again (the key never left this lease, so nobody
// else held the partition in between), one refused because another member
// holds the key or it expired loses it. Fenced writes made in doubt are
// sent too (the server checks the fence: they go through only while the
// key is still this lease's). A lease in doubt for a whole time to live
// with no renewal answered is lost.
type Lease struct {
	// Partition is the partition held.
	Partition int

	js      jetstream.JetStream
	key     string // lease.<group>.<partition>
	stream  string // KV_<bucket>
	subject string // $KV.<bucket>.<key>
	member  string // the member id
	value   []byte // the member id and this lease's own token (leaseValue)
	ttl     time.Duration
	margin  time.Duration
	// carryAfter is how long after a renewal was sent the next one rides
	// in a fenced write (Fence.Renewal); 0: never.
	carryAfter time.Duration

	// mu is held by a renewal (alone or in a batch) or a fenced write,
	// one at a time: rev changes only under it. (Lock order: no other
	// lock of this package is taken under mu, but another lease's mu
	// with TryLock, by lockBatch.) The turns are needed, not only for
	// rev: on a replicated bucket the server has at most one write
	// checked against a subject's last sequence in its pipeline at a
	// time, and refuses another checked against the same subject until
	// the first is applied (code 10164). A fenced write is checked
	// against the lease key's subject, as the renewal is: a renewal sent
	// while its partition's write is under way is refused, and the
	// write sent while a renewal is under way too. (Measured with the
	// renewals taken off this lock, 1,000-run backlog at load 48-58:
	// 122 renewals and 70 writes refused so, 15 leases lost, against 0
	// refused and none lost at load 39-43 with it.)
	mu  sync.Mutex
	rev uint64
	// shown is rev for Revision, which does not wait for a write in
	// flight (a renewal may wait for the broker until the lease's end).
	shown atomic.Uint64

	deadline atomic.Int64 // mono() until which the lease is valid
	// renewed is closed, and replaced, by every renewal that goes
	// through (Await).
	renewed  atomic.Pointer[chan struct{}]
	lost     chan struct{}
	lostOnce sync.Once
	why      atomic.Pointer[string]
}

// Member is the id of the member holding the lease.
func (l *Lease) Member() string { return l.member }

// Key is the lease's key in the bucket.
func (l *Lease) Key() string { return l.key }

// Revision is the lease key's current revision (the fencing token).
func (l *Lease) Revision() uint64 { return l.shown.Load() }

// Valid says the lease is held: not lost, and its time to live (minus the
// margin) has not run out since its last renewal was sent.
func (l *Lease) Valid() bool {
	select {
	case <-l.lost:
		return false
	default:
	}
	return mono() < time.Duration(l.deadline.Load())
}

// InDoubt says the lease's validity ran out without a renewal refused: it
// is neither valid nor lost (see Lease).
func (l *Lease) InDoubt() bool {
	select {
	case <-l.lost:
		return false
	default:
	}
	return mono() >= time.Duration(l.deadline.Load())
}

// Await waits while the lease is in doubt: true once it is valid (at once
// when it is), false once it is lost, ctx ended, or the doubt's own bound
// passed (the lease is lost then).
func (l *Lease) Await(ctx context.Context) bool {
	for {
		renewed := *l.renewed.Load()
		if l.Valid() {
			return true
		}
		left := l.givenUp() - mono()
		if left <= 0 {
			return false
		}
		t := time.NewTimer(left)
		select {
		case <-l.lost:
			t.Stop()
			return false
		case <-ctx.Done():
			t.Stop()
			return false
		case <-renewed:
			t.Stop()
		case <-t.C:
		}
	}
}

// givenUp is when a lease in doubt is given up: a time to live past its
// validity's end with no renewal answered.
func (l *Lease) givenUp() time.Duration { return time.Duration(l.deadline.Load()) + l.ttl }

// Lost is closed once the lease is lost (see ErrLost).
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Why says why the lease was lost ("" while it is not).
func (l *Lease) Why() string {
	if w := l.why.Load(); w != nil {
		return *w
	}
	return ""
}

func (l *Lease) lose(why string) {
	l.lostOnce.Do(func() {
		l.why.Store(&why)
		close(l.lost)
	})
}

// Fenced runs write with the lease's fence, taking turns with the
// renewals. It returns ErrLost (and loses the lease) when the lease is
// lost, or when the server refused the write for its fence and the lease
// key is no longer this member's. A lease in doubt sends the write: the
// server takes it only while the key is still at this lease's revision,
// i.e. while nobody else can hold the partition.
func (l *Lease) Fenced(ctx context.Context, write func(ctx context.Context, f Fence) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.lost:
		return fmt.Errorf("partition %d: %w", l.Partition, ErrLost)
	default:
	}
	err := l.send(ctx, true, func(rev uint64) error {
		return write(ctx, Fence{Subject: l.subject, Rev: rev, carry: l.carryDue()})
	})
	if errors.Is(err, ErrLost) {
		return fmt.Errorf("partition %d: %w", l.Partition, err)
	}
	return err
}

// carryDue is the renewal a fenced write takes along (Fence.Renewal): one
// is due once carryAfter passed since the last renewal was sent, while
// the lease is not given up. l.mu is held.
func (l *Lease) carryDue() *carried {
	now := mono()
	if l.carryAfter <= 0 || now-l.lastSent() < l.carryAfter || now >= l.givenUp() {
		return nil
	}
	return &carried{l: l}
}

// send sends a write conditional on the lease's revision. l.mu is held.
// When the server refuses it for the revision, the lease key says why:
//
//   - another member's, or gone, or this member's under another lease
//     (it lost this one and took the partition again: the writes of the
//     lease it lost must not go through under the new one): the lease is
//     lost (ErrLost);
//   - this lease's at a later revision: a renewal whose answer was lost
//     (its publish timed out here after the server had stored it) moved
//     the key on; the lease takes that revision and the write is sent once
//     more;
//   - gone by the expiry of one of this lease's own revisions while the
//     lease is valid, and retake: the key is taken again (Lease.retake)
//     and the write is sent once more;
//   - this member's at the lease's revision (the server busy with another
//     write of the subject, code 10164 on a replicated bucket), or the key
//     unreadable: the error is returned, the lease kept; a later write or
//     renewal tells.
func (l *Lease) send(ctx context.Context, retake bool, write func(rev uint64) error) error {
	for try := 0; ; try++ {
		err := write(l.rev)
		if err == nil || !refusedForRevision(err) {
			return err
		}
		switch l.recheck(ctx, retake) {
		case keyNotOurs:
			l.lose("another member holds the partition (a write was fenced out)")
			return fmt.Errorf("%w: %v", ErrLost, err)
		case keyMovedOn:
			if try == 0 {
				continue
			}
		}
		return err
	}
}

// refusedForRevision says whether err is the server refusing a write for
// the revision it was conditional on.
func refusedForRevision(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

type keyState int

const (
	keyUnknown keyState = iota // unreadable, or ours at the lease's revision
	keyNotOurs                 // gone, another member's, or another lease of ours
	keyMovedOn                 // this lease's at a later revision, now the lease's
)

// recheck reads the lease key after a refused write (for at most 5 s,
// whatever the caller's deadline: renewals wait meanwhile). l.mu is held.
//
// It reads from the bucket's stream leader, not with a direct get, which
// any replica may answer: the last message tells a key gone by its time
// to live (the server's marker) from one deleted or purged, and gives the
// marker's sequence.
//
// A key gone by its time to live while the lease is valid lost a renewal
// that went through: the stream leader expires a key's revision by what
// it has applied, so a renewal proposed and not yet applied when the
// revision before it ran out is stored, answered, and then removed by the
// expiry's marker (a roll-up of the key) that the leader proposed after
// it. Nobody else held the key since its last revision was this lease's
// and the lease is still valid (another member's lease, taken after the
// marker, would have had to live its whole time to live, longer than
// what is left of this lease's validity, to have run out as well): with
// retake, the lease takes the key again, conditional on the marker
// (Lease.retake). A lease in doubt does not: its key may have run out as
// it should.
func (l *Lease) recheck(ctx context.Context, retake bool) keyState {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := bus.GetLast(ctx, l.js.Conn(), l.stream, l.subject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return keyNotOurs
	case err != nil:
		return keyUnknown
	case m.Marker() == markerExpired && m.Seq > l.rev && retake && l.Valid():
		return l.retake(ctx, m.Seq)
	case m.Deleted() || !bytes.Equal(m.Data, l.value):
		return keyNotOurs
	case m.Seq > l.rev:
		l.rev = m.Seq
		l.shown.Store(l.rev)
		return keyMovedOn
	}
	return keyUnknown
}

// markerExpired is the reason of the marker the server writes for a key
// whose time to live ran out.
const markerExpired = "MaxAge"

// retake writes the lease key again, conditional on marker (the
// sequence of the marker of its expiry, its last message), as a renewal:
// stored, it is the lease's new revision (keyMovedOn); refused for its
// revision, another member wrote the key since (keyNotOurs); unanswered,
// or refused because another write of the key is in the server's
// pipeline, nothing is known (keyUnknown: the lease is kept, a later
// write or renewal tells). l.mu is held.
func (l *Lease) retake(ctx context.Context, marker uint64) keyState {
	sent := mono()
	m := &nats.Msg{Subject: l.subject, Data: l.value}
	pa, err := l.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(marker), jetstream.WithMsgTTL(l.ttl))
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		l.renewedAt(pa.Sequence, sent)
		return keyMovedOn
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		return keyNotOurs
	}
	return keyUnknown
}

// renew writes the lease key again, conditional on its revision, with a
// new time to live. It waits for the answer until the lease's validity
// ends (counted once l.mu is held: a fenced write may have held it), and
// at least half the time to live: an answer that comes after the
// validity ended still tells whether the key stayed this lease's (the
// lease was in doubt meanwhile). A lease in doubt for a time to live is
// lost (ErrLost).
func (l *Lease) renew(ctx context.Context) error {
	return l.renewSince(ctx, -1)
}

// renewSince is renew, but does nothing when the lease's last successful
// renewal, once its lock is held, is no longer the one sent at last (a
// batch of its member's renewals took it along while this waited for the
// lock) and it is valid. last < 0 renews in any case.
func (l *Lease) renewSince(ctx context.Context, last time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.lost:
		return ErrLost
	default:
	}
	if last >= 0 && l.lastSent() != last && l.Valid() {
		return nil
	}
	now := mono()
	if now >= l.givenUp() {
		l.lose("in doubt for a time to live: no renewal answered")
		return ErrLost
	}
	wait := min(max(time.Duration(l.deadline.Load())-now, l.ttl/2), l.givenUp()-now)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var (
		sent time.Duration
		rev  uint64
	)
	err := l.send(ctx, true, func(expect uint64) error {
		sent = mono()
		m := &nats.Msg{Subject: l.subject, Data: l.value}
		pa, err := l.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(expect), jetstream.WithMsgTTL(l.ttl))
		if err == nil {
			rev = pa.Sequence
		}
		return err
	})
	if errors.Is(err, ErrLost) {
		return ErrLost
	}
	if err != nil {
		return err
	}
	l.renewedAt(rev, sent)
	return nil
}

// renewedAt takes a renewal sent at sent and stored at revision rev.
// l.mu is held.
func (l *Lease) renewedAt(rev uint64, sent time.Duration) {
	l.rev = rev
	l.shown.Store(rev)
	l.deadline.Store(int64(sent + l.ttl - l.margin))
	next := make(chan struct{})
	close(*l.renewed.Swap(&next))
}

// lastSent is mono() when the lease's last successful renewal (or its
// creation) was sent.
func (l *Lease) lastSent() time.Duration {
	return time.Duration(l.deadline.Load()) - (l.ttl - l.margin)
}

// renewBatch is a batch of renewals whose leases' locks are held
// (lockBatch) until it is sent (send).
type renewBatch struct {
	ls []*Lease // the lease whose turn it is first
}

// lockBatch takes l's lock and those of the others it can take at once
// and that are valid, for one atomic batch of renewals: a lease whose
// lock is taken (a fenced write, a renewal of its own, another batch
// under way) is left out. It returns nil, holding no lock, when l's lock
// is taken, l was renewed since last (a batch under way ended
// meanwhile), l is not valid (in doubt: renew tells whether it is still
// this member's) or no other lease joined. It does not wait: a caller
// holding Member.renewMu must not wait for one partition's write.
func (l *Lease) lockBatch(last time.Duration, others []*Lease) *renewBatch {
	if !l.mu.TryLock() {
		return nil
	}
	if !l.Valid() || l.lastSent() != last {
		l.mu.Unlock()
		return nil
	}
	b := &renewBatch{ls: []*Lease{l}}
	for _, o := range others {
		if !o.mu.TryLock() {
			continue
		}
		if !o.Valid() {
			o.mu.Unlock()
			continue
		}
		b.ls = append(b.ls, o)
	}
	if len(b.ls) == 1 {
		l.mu.Unlock()
		return nil
	}
	return b
}

// send renews the batch's leases in one atomic batch of the bucket (a
// JetStream atomic batch publish, nats-server 2.12 or newer): the server
// stores every renewal of it or none, in one replication round, each
// conditional on its lease's revision as a renewal alone is. The batch's
// renewals are stored one after the other, the last at the commit's
// sequence, which gives each lease its revision. It waits for the answer
// until the first lease's validity ends, and at least half the time to
// live (as renew does), then gives back the leases' locks. An error
// means none of them is renewed: the batch went unanswered or was
// refused (one lease's revision moved on, the bucket takes no batches,
// ...); renew, lease by lease, tells why (a batch stored whose answer
// was lost moved every key on: renew finds its own value at a later
// revision).
func (b *renewBatch) send(ctx context.Context) error {
	defer func() {
		for _, o := range b.ls {
			o.mu.Unlock()
		}
	}()
	l := b.ls[0]
	ctx, cancel := context.WithTimeout(ctx, max(time.Duration(l.deadline.Load())-mono(), l.ttl/2))
	defer cancel()
	msgs := make([]*nats.Msg, len(b.ls))
	for i, o := range b.ls {
		m := nats.NewMsg(o.subject)
		m.Data = o.value
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(o.rev, 10))
		m.Header.Set(jetstream.MsgTTLHeader, o.ttl.String())
		msgs[i] = m
	}
	sent := mono()
	pa, err := bus.PublishAtomic(ctx, l.js, msgs)
	if err != nil {
		return err
	}
	for i, o := range b.ls {
		o.renewedAt(pa.Sequence-uint64(len(b.ls)-1-i), sent)
	}
	return nil
}

// release gives the lease back at once: the key is purged, conditional on
// its revision (a lease another member took meanwhile is left alone). The
// revision is the one the lease's last renewal or fenced write got from the
// server (Member.keepLease lets a renewal under way finish first); when the
// server still refuses it, the key is read again (Lease.send) until the
// read shows the revision the server holds: a write of the key still in
// the stream leader's pipeline (code 10164) is not in what the leader
// answers a read with yet, and the purge is sent again once it is. A key
// gone is not taken again here (there is nothing to give back).
func (l *Lease) release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.lose("released")
	select {
	case <-l.lost:
		return nil
	default:
	}
	purge := func(expect uint64) error {
		m := nats.NewMsg(l.subject)
		m.Header.Set("KV-Operation", "PURGE")
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		// The purge marker goes too after a while: nothing is left of a
		// released lease.
		_, err := l.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(expect), jetstream.WithMsgTTL(markerTTL))
		return err
	}
	for {
		err := l.send(ctx, false, purge)
		if errors.Is(err, ErrLost) {
			return nil // gone, or another member's: nothing to give back
		}
		if err == nil || !refusedForRevision(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(releaseReread):
		}
	}
}

// releaseReread is the pause before a release refused for its revision
// reads the lease key again.
const releaseReread = 20 * time.Millisecond

// markerTTL is how long the marker of a released lease stays.
const markerTTL = time.Minute

// acquire creates the lease key of partition p if it is free and returns
// the lease; ErrTaken when another member holds it.
func acquire(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, bucket, group, member string, p int, ttl, margin time.Duration) (*Lease, error) {
	key := leaseKey(group, p)
	value := leaseValue(member)
	sent := mono()
	rev, err := kv.Create(ctx, key, value, jetstream.KeyTTL(ttl))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil, ErrTaken
	}
	if err != nil {
		return nil, fmt.Errorf("lease of partition %d: %w", p, err)
	}
	l := &Lease{Partition: p, js: js, key: key, stream: "KV_" + bucket, subject: "$KV." + bucket + "." + key, member: member, value: value,
		ttl: ttl, margin: margin, rev: rev, lost: make(chan struct{})}
	l.shown.Store(rev)
	l.deadline.Store(int64(sent + ttl - margin))
	renewed := make(chan struct{})
	l.renewed.Store(&renewed)
	return l, nil
}

// leaseValue is what a new lease of member writes under its key: the
// member's id and a token of this lease alone, so that a member that lost a
// lease and took the partition again holds another lease: a write of the
// lost one, however late it reaches the server, is fenced out (the lease
// key's revision moved, and its value is not the lost lease's).
func leaseValue(member string) []byte {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return []byte(member + tokenSep + hex.EncodeToString(b[:]))
}

// tokenSep separates a lease's member id from its token.
const tokenSep = "#"

// holderOf is the member id of a lease key's value (a value an earlier
// version wrote is the member id alone).
func holderOf(value []byte) string {
	id, _, _ := strings.Cut(string(value), tokenSep)
	return id
}

// ErrTaken says a partition's lease is held by another member.
var ErrTaken = errors.New("fleet: partition held by another member")

// leaseKey is the key of partition p's lease in group.
func leaseKey(group string, p int) string { return "lease." + group + "." + strconv.Itoa(p) }

// leasePrefix starts the lease keys of group.
func leasePrefix(group string) string { return "lease." + group + "." }
