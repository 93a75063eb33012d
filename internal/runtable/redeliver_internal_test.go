package runtable

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A redelivery is traced to what this member saw of its earlier
// delivery: still in the ledger (where: pulled, in the handler's hand,
// folded, held by a write under way, after a write that failed),
// acknowledged here, handed back here, or not seen here at all.
func TestRedeliveryTracedToItsEarlierDelivery(t *testing.T) {
	msgs := fetched(t, time.Hour, 1)
	var l ledger
	now := time.Now()
	add := func(seq uint64) *flight { return l.addSeq(msgs[0], msgs[0].Reply(), seq, 1, now.Add(-time.Second)) }
	cause := func(seq uint64) string { return l.trace(seq, add(seq), now).cause }

	add(1)
	require.Equal(t, "held_pulled", cause(1))
	l.take(add(2))
	require.Equal(t, "held_in_hand", cause(2))
	f := add(3)
	l.folded(f, msgs[0])
	require.Equal(t, "held_folded", cause(3))
	l.setWriting([]*flight{f}, true, nil)
	require.Equal(t, "held_writing", cause(3))
	l.writeFailed([]*flight{f})
	tr := l.trace(3, add(3), now)
	require.Equal(t, "held_failed_write", tr.cause)
	require.Equal(t, 1, tr.fails)
	require.Equal(t, time.Second, tr.since)

	l.done(add(4))
	require.Equal(t, "acked", cause(4))
	l.handBack(add(5))
	require.Equal(t, "handed_back", cause(5))
	require.Equal(t, "unseen", cause(6))
	// Only the last settledKept settled messages are remembered.
	l.done(add(7))
	for seq := uint64(100); seq < 100+settledKept; seq++ {
		l.done(add(seq))
	}
	require.Equal(t, "unseen", cause(7))
	require.Equal(t, "acked", cause(100))
}

// add enters a message that came at at, acknowledged on subject reply
// (its stream sequence not known).
func (l *ledger) add(a acker, reply string, at time.Time) *flight {
	return l.addSeq(a, reply, 0, 1, at)
}
