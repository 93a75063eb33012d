package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// ConsumerConfig configures a durable pull consumer.
type ConsumerConfig struct {
	// Stream to read (default GTTSPLIT).
	Stream string `mapstructure:"stream"`
	// Durable is the consumer's name; aggregators sharing it share the
	// work (default "aggregator").
	Durable string `mapstructure:"durable"`
	// FilterSubjects select the events (default run, log and fdinfo of
	// every host, lane and run).
	FilterSubjects []string `mapstructure:"filter_subjects"`
	// AckWait is how long a delivered message may stay unacknowledged
	// before it is delivered again (default 30s).
	AckWait time.Duration `mapstructure:"ack_wait"`
	// MaxDeliver bounds deliveries of one message (default -1: no bound).
	MaxDeliver int `mapstructure:"max_deliver"`
	// MaxAckPending bounds messages delivered and not yet acknowledged
	// (default 1000).
	MaxAckPending int `mapstructure:"max_ack_pending"`
	// NakDelay is the redelivery delay of a message whose handler failed
	// (default 1s).
	NakDelay time.Duration `mapstructure:"nak_delay"`
	// Replicas of the consumer's state (0: the stream's). An existing
	// consumer with more keeps them.
	Replicas int `mapstructure:"replicas"`
}

// DefaultConsumerConfig returns the defaults.
func DefaultConsumerConfig() ConsumerConfig {
	return ConsumerConfig{
		Stream:  DefaultStream,
		Durable: "aggregator",
		FilterSubjects: []string{
			events.Filter(events.KindRun, "", "", ""),
			events.Filter(events.KindLog, "", "", ""),
			events.Filter(events.KindFDInfo, "", "", ""),
		},
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 1000,
		NakDelay:      time.Second,
	}
}

// Validate reports every problem at once, each prefixed with its key.
func (c ConsumerConfig) Validate() error {
	var errs []error
	if c.Stream == "" {
		errs = append(errs, errors.New("stream: must not be empty"))
	}
	if c.Durable == "" {
		errs = append(errs, errors.New("durable: must not be empty"))
	}
	if len(c.FilterSubjects) == 0 {
		errs = append(errs, errors.New("filter_subjects: must not be empty"))
	}
	if c.AckWait <= 0 {
		errs = append(errs, errors.New("ack_wait: must be positive"))
	}
	if c.MaxDeliver == 0 || c.MaxDeliver < -1 {
		errs = append(errs, errors.New("max_deliver: must be -1 (no bound) or positive"))
	}
	if c.MaxAckPending < 1 {
		errs = append(errs, errors.New("max_ack_pending: must be at least 1"))
	}
	if c.NakDelay < 0 {
		errs = append(errs, errors.New("nak_delay: must not be negative"))
	}
	return errors.Join(errs...)
}

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

// The JetStream acknowledgement bodies (see Msg.Ack and Msg.Nak).
var (
	ackBody = []byte("+ACK")
	nakBody = []byte("-NAK")
)

// Ack is Msg.Ack.
func (r AckRef) Ack() error {
	if r.m != nil {
		return r.m.Ack()
	}
	return r.nc.Publish(r.reply, ackBody)
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

// DecodeFiltered decodes the event keeping only the log lines keep takes
// (events.DecodeBytesFiltered).
func (m Msg) DecodeFiltered(keep func(seg []byte) bool) (events.Decoded, error) {
	return events.DecodeBytesFiltered(m.m.Data(), keep)
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

// Handler processes one message. It acknowledges the message itself (Ack,
// Nak, Term), now or later once its effect is durable. A returned error is
// logged and the message is Nak'ed with the configured delay (if the
// handler had not settled it, the server ignores the late Nak otherwise).
type Handler func(ctx context.Context, m Msg) error

// Consumer is a durable pull consumer with explicit acks.
type Consumer struct {
	cons jetstream.Consumer
	nc   *nats.Conn
	cfg  ConsumerConfig
	log  zerolog.Logger
	// failLog rate-limits the handler-failed warning (a flood of
	// messages failing alike must not flood the log).
	failLog LogLimit
}

// NewConsumer creates or updates the durable consumer cfg.Durable on
// cfg.Stream.
func NewConsumer(ctx context.Context, js jetstream.JetStream, cfg ConsumerConfig, log zerolog.Logger) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("consumer config: %w", err)
	}
	replicas := cfg.Replicas
	if replicas <= 1 {
		replicas = 0 // the stream's: an operator's R3 stream gets R3 consumers
	}
	if cur, err := js.Consumer(ctx, cfg.Stream, cfg.Durable); err == nil {
		Drift(log.With().Str("consumer", cfg.Durable).Logger(), "nats.replicas", "consumer", cur.CachedInfo().Config.Replicas, replicas)
		replicas = max(replicas, cur.CachedInfo().Config.Replicas)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, cfg.Stream, jetstream.ConsumerConfig{
		Replicas:       replicas,
		Durable:        cfg.Durable,
		Description:    "gttsplit aggregator",
		FilterSubjects: cfg.FilterSubjects,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        cfg.AckWait,
		MaxDeliver:     cfg.MaxDeliver,
		MaxAckPending:  cfg.MaxAckPending,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer %s on %s: %w", cfg.Durable, cfg.Stream, err)
	}
	return &Consumer{cons: cons, nc: js.Conn(), cfg: cfg, log: log.With().Str("component", "consumer").Str("durable", cfg.Durable).Logger()}, nil
}

// Consume hands every message to h, one at a time, until ctx is cancelled;
// then it drains (messages already buffered are still handed over, with a
// context that is not cancelled) and returns nil. Another error means the
// consumer could not run.
func (c *Consumer) Consume(ctx context.Context, h Handler) error {
	it, err := c.cons.Messages(jetstream.PullMaxMessages(min(c.cfg.MaxAckPending, 256)))
	if err != nil {
		return fmt.Errorf("consume %s: %w", c.cfg.Durable, err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			it.Drain()
		case <-stop:
			it.Stop()
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	hctx := context.WithoutCancel(ctx)
	for {
		jm, err := it.Next()
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return nil
		}
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("consume %s: %w", c.cfg.Durable, err)
		}
		if err != nil {
			// Heartbeat loss or a server restart: the iterator recovers;
			// pause so a persistent error does not spin.
			c.log.Debug().Err(err).Msg("next message")
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		m, err := WrapMsg(jm, c.nc)
		if err != nil {
			c.log.Warn().Err(err).Str("subject", jm.Subject()).Msg("message without metadata, terminated")
			_ = jm.Term()
			continue
		}
		if err := h(hctx, m); err != nil {
			c.failLog.Event(c.log.Warn).Str("error", Clip(err.Error(), 1024)).Str("subject", m.Subject()).Uint64("stream_seq", m.meta.StreamSeq).
				Uint64("delivered", m.meta.NumDelivered).Msg("handler failed, message will be redelivered")
			_ = jm.NakWithDelay(c.cfg.NakDelay)
		}
	}
}

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
	cons, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("export %s: %w", stream, err)
	}
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
		if err := mb.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return n, fmt.Errorf("export %s: fetch: %w", stream, err)
		}
		if got == 0 {
			if err := ctx.Err(); err != nil {
				return n, err
			}
		}
	}
}
