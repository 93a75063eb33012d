package runtable

import (
	"time"
)

// Tracing redeliveries: a message JetStream delivers again (its
// delivery count past one) is traced to what this member saw of its
// earlier delivery, from the partition's ledger (flow.go) and the
// messages it settled last:
//
//   - held: the earlier delivery is still in the ledger: the broker's ack
//     wait ran out while this member held it (in a pull not handed to the
//     handler yet, in the handler's hand, folded and waiting for its
//     run's write, held by a write under way, or after a write holding
//     it failed);
//   - acked: this member acknowledged it (or terminated it): the
//     acknowledgement reached the broker after the ack wait;
//   - handed_back: this member handed it back (a release, a stop, a lost
//     lease, a fold that failed);
//   - unseen: none of those: another member's delivery (handed back at a
//     hand-over, or held too long), one sent on a pull this member ended
//     before it arrived, or one settled before the last settledKept.
//
// Each is counted in gttsplit_events_redelivered_causes_total and said
// at debug level with what the earlier delivery waited.

// settledKept is how many settled messages a partition remembers.
const settledKept = 1024

// settledHow is how a message was settled.
type settledHow uint8

const (
	settledAcked settledHow = iota
	settledHandedBack
)

// settledMsg is a settled message as a redelivery traces it.
type settledMsg struct {
	seq     uint64
	how     settledHow
	at      time.Time     // when it was settled
	waited  time.Duration // since its ack wait last started, when settled
	longest time.Duration // the longest it waited between two starts
	fails   int
}

// settledRing is the last settledKept settled messages of a ledger.
type settledRing struct {
	ms   []settledMsg
	next int
}

// add records f settled at now. The ledger's lock is held.
func (r *settledRing) add(f *flight, how settledHow, now time.Time) {
	if f.seq == 0 {
		return
	}
	if r.ms == nil {
		r.ms = make([]settledMsg, settledKept)
	}
	w := now.Sub(f.at)
	r.ms[r.next] = settledMsg{seq: f.seq, how: how, at: now, waited: w, longest: max(f.longest, w), fails: f.fails}
	r.next = (r.next + 1) % settledKept
}

// find returns the last settled message of sequence seq.
func (r *settledRing) find(seq uint64) (settledMsg, bool) {
	for i := range r.ms {
		k := (r.next - 1 - i + 2*settledKept) % settledKept
		if r.ms[k].seq == seq {
			return r.ms[k], true
		}
	}
	return settledMsg{}, false
}

// take marks f as taken by the handler.
func (l *ledger) take(f *flight) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f.inHand = true
}

// trace is what a redelivery was traced to.
type trace struct {
	cause   string
	since   time.Duration // since the earlier delivery came (held), or was settled
	waited  time.Duration // since its ack wait last started
	longest time.Duration
	fails   int
}

// trace traces a redelivery of stream sequence seq (self its own entry)
// to its earlier delivery here.
func (l *ledger) trace(seq uint64, self *flight, now time.Time) trace {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.fs {
		if f == self || f.seq != seq {
			continue
		}
		tr := trace{since: now.Sub(f.came), waited: now.Sub(f.at), longest: max(f.longest, now.Sub(f.at)), fails: f.fails}
		switch {
		case f.writing:
			tr.cause = "held_writing"
		case f.fails > 0:
			tr.cause = "held_failed_write"
		case f.kept:
			tr.cause = "held_folded"
		case f.inHand:
			tr.cause = "held_in_hand"
		default:
			tr.cause = "held_pulled"
		}
		return tr
	}
	if s, ok := l.settled.find(seq); ok {
		tr := trace{since: now.Sub(s.at), waited: s.waited, longest: s.longest, fails: s.fails, cause: "acked"}
		if s.how == settledHandedBack {
			tr.cause = "handed_back"
		}
		return tr
	}
	return trace{cause: "unseen"}
}

// redelivered traces a redelivered message (fl its entry in the ledger),
// counts it by cause and says it at debug level.
func (pt *part) redelivered(seq, delivered uint64, fl *flight) {
	tr := pt.fl.trace(seq, fl, time.Now())
	t := pt.t
	t.m.redeliveredBy.WithLabelValues(tr.cause).Inc()
	t.log.Debug().Int("partition", pt.p).Uint64("seq", seq).Uint64("delivered", delivered).Str("cause", tr.cause).
		Dur("since", tr.since).Dur("waited", tr.waited).Dur("longest_wait", tr.longest).Int("failed_writes", tr.fails).
		Msg("event redelivered")
}

// handBack takes fl out of the ledger, negatively acknowledged (why: what
// handed it back), and says so at debug level.
func (pt *part) handBack(fl *flight, why string) {
	if fl == nil {
		return
	}
	pt.fl.handBack(fl)
	pt.t.log.Debug().Int("partition", pt.p).Uint64("seq", fl.seq).Str("why", why).Msg("event handed back")
}
