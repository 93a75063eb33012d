package runtable

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/natstest"
)

// A progress acknowledgement is a message to the broker and a write of
// the consumer's state on every replica: only a message that waited 40 %
// of the ack wait gets one. Of two messages pulled and not handled yet,
// one waiting 35 % of the ack wait gets none, one waiting 45 % gets one
// (and none again until it waited 40 % once more). Before, a message got
// one after a third of the ack wait: both did.
func TestProgressAckedOnlyNearTheAckWait(t *testing.T) {
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
	const ackWait = time.Hour // no redelivery while the test runs, however loaded the machine
	cons, err := js.CreateOrUpdateConsumer(ctx, "P", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait})
	require.NoError(t, err)
	for _, subj := range []string{"p.young", "p.old"} {
		_, err := js.Publish(ctx, subj, []byte("x"))
		require.NoError(t, err)
	}
	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(30*time.Second))
	require.NoError(t, err)
	var p pulled
	p.start()
	for jm := range batch.Messages() {
		p.push(jm)
	}
	require.NoError(t, batch.Error())
	require.Len(t, p.q, 2)
	now := time.Now()
	p.q[0].at = now.Add(-ackWait * 35 / 100)
	p.q[1].at = now.Add(-ackWait * 45 / 100)

	f := newFlow(ackWait, 64)
	require.Equal(t, 1, p.progress(now, f.progressAfter()), "progress acknowledged only for the message that waited 45 %% of the ack wait")
	require.Equal(t, now.Add(-ackWait*35/100), p.q[0].at, "the young message was left alone")
	require.Equal(t, now, p.q[1].at)
	require.Zero(t, p.progress(now, f.progressAfter()), "not again until it waited 40 %% of the ack wait again")
}
