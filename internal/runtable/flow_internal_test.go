package runtable

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/natstest"
)

// A progress acknowledgement is a message to the broker and a write of
// the consumer's state on every replica: only a message that waited 40 %
// of the ack wait gets one. Of two messages in flight, one waiting 35 % of
// the ack wait gets none, one waiting 45 % gets one (and none again until
// it waited 40 % once more). Before, a message got one after a third of
// the ack wait: both did.
func TestProgressAckedOnlyNearTheAckWait(t *testing.T) {
	const ackWait = time.Hour // no redelivery while the test runs, however loaded the machine
	msgs := fetched(t, ackWait, 2)
	var l ledger
	now := time.Now()
	young := l.add(msgs[0], msgs[0].Reply(), now.Add(-ackWait*35/100))
	old := l.add(msgs[1], msgs[1].Reply(), now.Add(-ackWait*45/100))

	f := newFlow(ackWait, 64)
	require.Equal(t, 1, l.progress(now, f.progressAfter(), f.writeGrace()), "progress acknowledged only for the message that waited 45 %% of the ack wait")
	require.Equal(t, now.Add(-ackWait*35/100), young.at, "the young message was left alone")
	require.Equal(t, now, old.at)
	require.Zero(t, l.progress(now, f.progressAfter(), f.writeGrace()), "not again until it waited 40 %% of the ack wait again")
	l.done(old)
	l.done(old)
	require.Equal(t, 1, l.len())
	l.done(young)
	require.Zero(t, l.len())
}

// A message a write under way holds (its acknowledgement comes with the
// write) gets no progress acknowledgement until it waited writeGrace, the
// latest it would get one otherwise; then it does, the write still under
// way. Before, it got one at 40 % of the ack wait like any other: a
// checkpoint that ended after that cost every message it held one.
func TestProgressAckedForAWriteOnlyPastItsGrace(t *testing.T) {
	const ackWait = time.Hour
	msgs := fetched(t, ackWait, 2)
	var l ledger
	now := time.Now()
	f := newFlow(ackWait, 64)
	require.Greater(t, f.writeGrace(), f.progressAfter())
	writing := l.add(msgs[0], msgs[0].Reply(), now.Add(-ackWait*45/100))
	other := l.add(msgs[1], msgs[1].Reply(), now.Add(-ackWait*45/100))
	l.setWriting([]*flight{writing}, true, nil)
	require.Equal(t, 1, l.progress(now, f.progressAfter(), f.writeGrace()), "only the message no write holds")
	require.Equal(t, now, other.at)
	require.Equal(t, now.Add(-ackWait*45/100), writing.at, "the written message was left alone")
	late := now.Add(f.writeGrace() - ackWait*45/100 + time.Millisecond)
	require.Equal(t, 1, l.progress(late, f.progressAfter(), f.writeGrace()), "past its grace it gets one")
	require.Equal(t, late, writing.at)
	l.setWriting([]*flight{writing}, false, nil)
	require.Zero(t, l.progress(late, f.progressAfter(), f.writeGrace()))
}

// A message's progress is acknowledged while its partition's lock is held
// (a long fold, a checkpoint taking its runs' states on a loaded machine),
// and counted from when the message came, not from when it was folded.
// Before, the table's progress goroutine took each partition's lock in
// turn, and a folded message's ack wait was counted from its fold: a
// message that waited in the pull and in the handler's hand for most of
// the ack wait was delivered again before its first progress ack.
func TestProgressAckedWhileThePartitionIsBusy(t *testing.T) {
	const ackWait = time.Hour
	msgs := fetched(t, ackWait, 1)
	tb := &Table{flow: newFlow(time.Second, 64), m: NewMetrics(), byPart: map[int]*part{}}
	pt := &part{t: tb}
	tb.byPart[0] = pt
	came := time.Now().Add(-900 * time.Millisecond) // pulled, then in the handler's hand
	fl := pt.fl.add(msgs[0], msgs[0].Reply(), came)
	pt.fl.folded(fl, msgs[0])
	pt.mu.Lock() // folding, or a checkpoint taking the runs' states
	defer pt.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); tb.progress(ctx) }()
	defer func() { cancel(); <-done }()
	// Polled: the goroutine looks every tenth of its 1 s ack wait.
	for deadline := time.Now().Add(time.Minute); progressAcks(t, tb) < 1; time.Sleep(20 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "no progress acknowledgement while the partition's lock is held")
	}
	pt.fl.mu.Lock()
	defer pt.fl.mu.Unlock()
	require.True(t, fl.at.After(came), "its ack wait started again")
}

// fetched publishes n messages and fetches them from a consumer with the
// ack wait given.
func fetched(t *testing.T, ackWait time.Duration, n int) []jetstream.Msg {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a nats-server")
	}
	t.Parallel()
	s := natstest.Start(t)
	js := natstest.JetStream(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "P", Subjects: []string{"p.>"}})
	require.NoError(t, err)
	cons, err := js.CreateOrUpdateConsumer(ctx, "P", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait})
	require.NoError(t, err)
	for i := range n {
		_, err := js.Publish(ctx, fmt.Sprintf("p.%d", i), []byte("x"))
		require.NoError(t, err)
	}
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(30*time.Second))
	require.NoError(t, err)
	var msgs []jetstream.Msg
	for jm := range batch.Messages() {
		msgs = append(msgs, jm)
	}
	require.NoError(t, batch.Error())
	require.Len(t, msgs, n)
	return msgs
}

func progressAcks(t *testing.T, tb *Table) float64 {
	var m dto.Metric
	require.NoError(t, tb.m.progress.Write(&m))
	return m.GetCounter().GetValue()
}

// len is the number of messages in flight.
func (l *ledger) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.fs)
}

// How late a partition's writes start is bounded: writes measured late
// again and again (a machine stalled for seconds, a checkpoint held behind
// a slow close) leave writeBy at least half of progressAfter, so the
// partition keeps writing a changed run only when its messages need it.
// Before, a lateness measured past what writeBy left fed on itself (the
// shorter writeBy, the later a write looked) until it overflowed.
func TestWriteLatenessBounded(t *testing.T) {
	const ackWait = 10 * time.Second
	tb := &Table{flow: newFlow(ackWait, 64)}
	pt := &part{t: tb}
	by := pt.writeBy()
	require.Greater(t, by, tickEvery)
	for range 1000 {
		pt.late(time.Hour)
	}
	require.LessOrEqual(t, time.Duration(pt.writeLate.Load()), tb.flow.maxLate())
	require.GreaterOrEqual(t, pt.writeBy(), tb.flow.progressAfter()/2, "writeBy after writes measured an hour late")
	for range 100 {
		pt.late(pt.writeBy())
	}
	require.Less(t, time.Duration(pt.writeLate.Load()), time.Millisecond, "on time again: the lateness comes down")
	require.InDelta(t, float64(by), float64(pt.writeBy()), float64(2*time.Millisecond))
}

// A folded message waiting for its run's write makes the write due only
// once its progress was acknowledged twice and it waited writeBy since:
// a progress acknowledgement costs the broker one replicated update of
// the consumer's state, a run's write a replicated store of its state.
// Before, the write was due once it waited writeBy at all (its first
// progress acknowledgement near).
func TestWriteDueAfterTwoProgressAcks(t *testing.T) {
	const ackWait = time.Hour
	msgs := fetched(t, ackWait, 1)
	tb := &Table{flow: newFlow(ackWait, 64)}
	pt := &part{t: tb}
	by, after := pt.writeBy(), tb.flow.progressAfter()
	now := time.Now()
	fl := pt.fl.add(msgs[0], msgs[0].Reply(), now.Add(-by))
	pt.pending = []pendingMsg{{run: &liveRun{folds: 1}, gen: 1, fl: fl}}
	require.False(t, pt.writeDue(now), "waited writeBy, its progress not acknowledged yet")
	t1 := now.Add(after - by + time.Millisecond)
	require.Equal(t, 1, pt.fl.progress(t1, after, tb.flow.writeGrace()))
	require.False(t, pt.writeDue(t1.Add(by)), "its progress acknowledged once")
	t2 := t1.Add(after + time.Millisecond)
	require.Equal(t, 1, pt.fl.progress(t2, after, tb.flow.writeGrace()))
	require.False(t, pt.writeDue(t2.Add(by-time.Millisecond)))
	require.True(t, pt.writeDue(t2.Add(by)), "acknowledged twice, then waited writeBy")
	pt.pending[0].run.written = 1
	require.False(t, pt.writeDue(t2.Add(by)), "written")
}
