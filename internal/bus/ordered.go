package bus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// orderedInactive is how long the broker keeps a reader's ordered consumer
// after its last pull when the reader never deletes it (it died).
const orderedInactive = 30 * time.Second

// Ordered creates an ordered consumer on s for one pass over it and returns
// it with the func that deletes it, to call when the pass ends.
//
// The broker counts ordered consumers against the stream's consumer limit
// (nats-server's default: 1,000 a stream), and nats.go asks it to keep each
// for 5 minutes after its last pull. A reader called in a loop (a status
// poll, a script exporting every few seconds) left one behind each call and
// reached the limit within minutes; from then on every new consumer of the
// stream was refused, an aggregator's partition consumers included.
func Ordered(ctx context.Context, s jetstream.Stream, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, func(), error) {
	if cfg.InactiveThreshold == 0 {
		cfg.InactiveThreshold = orderedInactive
	}
	c, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, func() {}, err
	}
	return c, func() { dropOrdered(ctx, s, c) }, nil
}

// dropOrdered deletes the broker's consumer behind the ordered consumer c
// (the one its last fetch used: nats.go deletes the earlier ones itself). It
// is given APITimeout even when ctx has ended; an error is ignored, the
// consumer then goes after orderedInactive.
func dropOrdered(ctx context.Context, s jetstream.Stream, c jetstream.Consumer) {
	info := c.CachedInfo()
	if info == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), APITimeout)
	defer cancel()
	_ = s.DeleteConsumer(dctx, info.Name)
}
