package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Metadata is where a message sits in the stream.
type Metadata struct {
	StreamSeq   uint64
	ConsumerSeq uint64
	// NumDelivered is 1 on the first delivery.
	NumDelivered uint64
	NumPending   uint64
	// Timestamp is when the stream stored the message.
	Timestamp time.Time
	Stream    string
	Consumer  string
}

// Msg is one delivered message: a structured CloudEvent.
type Msg struct {
	m    jetstream.Msg
	meta Metadata
	nc   *nats.Conn // the connection it came on, when known (see AckRef)
}

// WrapMsg wraps a message delivered by a JetStream consumer on nc (for
// callers that consume on their own, as the aggregator's partition owner
// does); nc may be nil.
func WrapMsg(m jetstream.Msg, nc *nats.Conn) (Msg, error) {
	w, err := newMsg(m)
	w.nc = nc
	return w, err
}

// AckRef settles a message without holding on to it: a handler that
// acknowledges long after it read the message (after a checkpoint) keeps
// this and lets the message's data go.
type AckRef struct {
	nc    *nats.Conn
	reply string
	m     jetstream.Msg // when the connection is not known
}

// AckRef returns the message's AckRef.
func (m Msg) AckRef() AckRef {
	if r := m.m.Reply(); m.nc != nil && r != "" {
		return AckRef{nc: m.nc, reply: r}
	}
	return AckRef{m: m.m}
}

// The JetStream acknowledgement bodies (see Msg.Ack, Msg.Nak and
// Msg.InProgress).
var (
	ackBody = []byte("+ACK")
	nakBody = []byte("-NAK")
	wpiBody = []byte("+WPI")
)

// Ack is Msg.Ack.
func (r AckRef) Ack() error {
	if r.m != nil {
		return r.m.Ack()
	}
	return r.nc.Publish(r.reply, ackBody)
}

// InProgress is Msg.InProgress: the message's ack wait starts again.
func (r AckRef) InProgress() error {
	if r.m != nil {
		return r.m.InProgress()
	}
	return r.nc.Publish(r.reply, wpiBody)
}

// Nak is Msg.Nak.
func (r AckRef) Nak() error {
	if r.m != nil {
		return r.m.Nak()
	}
	return r.nc.Publish(r.reply, nakBody)
}

func newMsg(m jetstream.Msg) (Msg, error) {
	md, err := m.Metadata()
	if err != nil {
		return Msg{}, fmt.Errorf("message metadata: %w", err)
	}
	return Msg{m: m, meta: Metadata{
		StreamSeq:    md.Sequence.Stream,
		ConsumerSeq:  md.Sequence.Consumer,
		NumDelivered: md.NumDelivered,
		NumPending:   md.NumPending,
		Timestamp:    md.Timestamp,
		Stream:       md.Stream,
		Consumer:     md.Consumer,
	}}, nil
}

// Data returns the message body: the structured JSON CloudEvent.
func (m Msg) Data() []byte { return m.m.Data() }

// Subject returns the subject the event was published on.
func (m Msg) Subject() string { return m.m.Subject() }

// Headers returns the message headers (Nats-Msg-Id, Content-Type).
func (m Msg) Headers() nats.Header { return m.m.Headers() }

// Metadata returns the message's stream position and delivery count.
func (m Msg) Metadata() Metadata { return m.meta }

// Decode decodes the event (events.DecodeBytes).
func (m Msg) Decode() (events.Decoded, error) { return events.DecodeBytes(m.m.Data()) }

// DecodeFiltered decodes the event keeping only the log lines f keeps
// (events.DecodeFiltered).
func (m Msg) DecodeFiltered(f events.LineFilter) (events.Decoded, error) {
	return events.DecodeFiltered(m.m.Data(), f)
}

// Ack acknowledges the message; it is not delivered again.
func (m Msg) Ack() error { return m.m.Ack() }

// AckSync acknowledges the message and waits for the server to confirm.
func (m Msg) AckSync(ctx context.Context) error { return m.m.DoubleAck(ctx) }

// Nak asks for redelivery now.
func (m Msg) Nak() error { return m.m.Nak() }

// NakWithDelay asks for redelivery after d.
func (m Msg) NakWithDelay(d time.Duration) error { return m.m.NakWithDelay(d) }

// InProgress resets the ack timer of a message still being worked on.
func (m Msg) InProgress() error { return m.m.InProgress() }

// Term tells the server never to deliver the message again (poison).
func (m Msg) Term() error { return m.m.Term() }

// Range selects part of a stream for Export. Zero Start or End is open.
// Times are the stream's storage times, not the events' time attributes.
type Range struct {
	// Subjects are filters (default: the whole stream).
	Subjects []string
	Start    time.Time
	End      time.Time
	// Batch is the fetch size (default 256).
	Batch int
}

// Export reads the messages of stream in r, in stream order, and hands
// each to fn; it stops at the end of r or at the message that was last when
// Export began, and returns how many messages fn got. An error from fn
// stops it. It uses an ordered consumer and does not acknowledge.
func Export(ctx context.Context, js jetstream.JetStream, stream string, r Range, fn func(Msg) error) (int, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("export %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("export %s: %w", stream, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return 0, nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: r.Subjects, DeliverPolicy: jetstream.DeliverAllPolicy}
	if !r.Start.IsZero() {
		start := r.Start
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	}
	cons, drop, err := Ordered(ctx, s, cfg)
	if err != nil {
		return 0, fmt.Errorf("export %s: %w", stream, err)
	}
	defer drop()
	ci, err := cons.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("export %s: %w", stream, err)
	}
	if ci.NumPending == 0 {
		return 0, nil
	}
	batch := r.Batch
	if batch <= 0 {
		batch = 256
	}
	n := 0
	var refused Refusals
	for {
		mb, err := cons.Fetch(batch, jetstream.FetchContext(ctx))
		if err != nil {
			return n, fmt.Errorf("export %s: fetch: %w", stream, err)
		}
		got := 0
		for jm := range mb.Messages() {
			got++
			m, err := newMsg(jm)
			if err != nil {
				return n, fmt.Errorf("export %s: %w", stream, err)
			}
			if (!r.End.IsZero() && m.meta.Timestamp.After(r.End)) || m.meta.StreamSeq > last {
				return n, nil
			}
			if err := fn(m); err != nil {
				return n, err
			}
			n++
			if m.meta.NumPending == 0 || m.meta.StreamSeq == last {
				return n, nil
			}
		}
		err = mb.Error()
		if again, werr := refused.Again(ctx, got, err); werr != nil {
			return n, werr
		} else if again {
			continue
		}
		// A pull that timed out, or whose heartbeats stopped for twice
		// their interval (a reader or a broker starved on a loaded
		// machine), is pulled again: the ordered consumer resumes after
		// the last message handed over.
		if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoHeartbeat) {
			return n, fmt.Errorf("export %s: fetch: %w", stream, err)
		}
		if got == 0 {
			if err := ctx.Err(); err != nil {
				return n, err
			}
		}
	}
}

// Refusals is a reader's patience with fetches that find no responders:
// in a cluster, a consumer just created (an ordered consumer, say) is not
// reachable from every node for a moment, and its first pull requests
// come back with "no responders".
type Refusals struct{ n int }

// maxRefusals bounds the fetches retried in a row (about 10 s in all).
const maxRefusals = 20

// Again says whether a fetch that returned got messages and the batch
// error err is to be asked again; it waits a growing backoff first. It
// returns ctx's error when ctx ends during the wait.
func (r *Refusals) Again(ctx context.Context, got int, err error) (bool, error) {
	if got > 0 || !(errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)) || r.n >= maxRefusals {
		r.n = 0
		return false, nil
	}
	r.n++
	t := time.NewTimer(50 * time.Millisecond * time.Duration(r.n))
	defer t.Stop()
	select {
	case <-t.C:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}
