package runtable

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// Bounds of a dead letter: the reason header and, for a message that
// cannot be dead-lettered as is, the body of its truncated copy.
const (
	dlqReasonMax = 1024
	dlqBodyMax   = 4096
)

// deadLetters remembers which dead letters were counted (a redelivered
// poison message is dead-lettered once) and which unknown types were said,
// and rate-limits their warnings.
type deadLetters struct {
	// mu is taken last (under the consumer's handler lock): no other
	// lock is taken while it is held.
	mu   sync.Mutex
	seen map[string]bool
	// types are the unknown event types (or subject kinds) said at WARN:
	// each once.
	types map[string]bool
	log   bus.LogLimit
}

// maxTypesSaid bounds deadLetters.types: past it, the set starts again
// (a flood of made-up types is said again, not remembered for ever).
const maxTypesSaid = 1000

// firstOfType records the unknown type typ and says whether it is new.
func (d *deadLetters) firstOfType(typ string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.types == nil || len(d.types) >= maxTypesSaid {
		d.types = map[string]bool{}
	}
	if d.types[typ] {
		return false
	}
	d.types[typ] = true
	return true
}

// unknownKind is why an event on a subject of a kind the aggregator does
// not know is dead-lettered: its type is unknown (an UnknownTypeError), or
// it is a known event on a subject not of its kind (invalid).
func unknownKind(msg bus.Msg) error {
	kind := ""
	if toks := strings.SplitN(bus.PublishedSubject(msg.Subject()), ".", 3); len(toks) > 1 {
		kind = toks[1]
	}
	d, err := msg.Decode()
	if err != nil {
		var ute *events.UnknownTypeError
		if errors.As(err, &ute) {
			return err
		}
		return fmt.Errorf("%w (%w)", &events.UnknownTypeError{Type: "subject kind " + kind}, err)
	}
	return fmt.Errorf("%w: %s on a subject of kind %q", events.ErrInvalid, d.Type, kind)
}

// count records that the dead letter id was counted, and says whether it
// was not before (an earlier delivery's publish may have been stored with
// its answer lost: the repeat is then the one to count).
func (d *deadLetters) count(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen == nil || len(d.seen) > 100_000 {
		d.seen = map[string]bool{}
	}
	if d.seen[id] {
		return false
	}
	d.seen[id] = true
	return true
}

// deadLetter publishes a message that cannot be folded to the dead-letter
// subject, with the reason, and terminates it. A message the broker will
// not take as a dead letter (over max_payload with the headers, or
// rejected by the stream) is dead-lettered as a truncated copy, its first
// dlqBodyMax bytes with a Gttsplit-Truncated header giving its size; if
// the broker rejects even that, the message is terminated all the same, so
// that poison always leaves the consumer. Only a transient failure (the
// broker away) leaves it for redelivery.
func (t *Table) deadLetter(ctx context.Context, msg bus.Msg, cause error) error {
	reason := "invalid"
	switch {
	case errors.Is(cause, events.ErrUnknownType):
		reason = "unknown_type"
	case errors.Is(cause, errLate):
		reason = "late"
	case errors.Is(cause, errOrigin):
		reason = "origin"
	case errors.Is(cause, errFinal):
		reason = "final"
	case errors.Is(cause, errNotState):
		reason = reasonState
	}
	why := bus.Clip(cause.Error(), dlqReasonMax)
	subject := bus.PublishedSubject(msg.Subject())
	o := [3]string{"_", "_", "_"}
	if toks := strings.Split(subject, "."); len(toks) == 5 {
		copy(o[:], toks[2:])
	}
	dm := nats.NewMsg(events.Subject(events.KindDLQ, o[0], o[1], o[2]))
	dm.Data = msg.Data()
	dm.Header.Set("Gttsplit-Reason", why)
	dm.Header.Set("Gttsplit-Original-Subject", subject)
	dm.Header.Set("Gttsplit-Stream-Seq", fmt.Sprint(msg.Metadata().StreamSeq))
	// A redelivered poison message (its ack wait ran out before the term)
	// is dead-lettered once: the stream drops the repeat.
	dm.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("dlq/%s/%d", msg.Metadata().Stream, msg.Metadata().StreamSeq))
	dlqID := dm.Header.Get(jetstream.MsgIDHeader)
	ack, err := t.js.PublishMsg(ctx, dm)
	if err == nil && ack.Duplicate && !t.dlq.count(dlqID) {
		return msg.Term() // dead-lettered and counted at an earlier delivery
	}
	truncated := false
	if err != nil && permanentPublishError(err) {
		truncated = true
		dm.Data = msg.Data()[:min(len(msg.Data()), dlqBodyMax)]
		dm.Header.Set("Gttsplit-Truncated", fmt.Sprint(len(msg.Data())))
		dm.Header.Set("Gttsplit-Dead-Letter-Error", bus.Clip(err.Error(), dlqReasonMax))
		_, err = t.js.PublishMsg(ctx, dm)
	}
	if err != nil && !permanentPublishError(err) {
		return fmt.Errorf("dead letter: %w", err) // redelivered: tried again
	}
	t.dlq.count(dlqID)
	t.m.dead.WithLabelValues(reason).Inc()
	var oe *originError
	if errors.As(cause, &oe) {
		t.origins.say(t.log, oe, subject)
	}
	var ute *events.UnknownTypeError
	if errors.As(cause, &ute) {
		// Said once per type: a collector newer than this aggregator
		// sends many of them.
		lev := t.log.Debug()
		if t.dlq.firstOfType(ute.Type) {
			lev = t.log.Warn()
		}
		lev.Str("subject", subject).Str("type", bus.Clip(ute.Type, 256)).Str("error", why).Bool("dead_lettered", err == nil).
			Msg("event of an unknown type dead-lettered (said once per type; gttsplit_events_dead_lettered_total{reason=\"unknown_type\"} counts them)")
	} else if err != nil {
		t.dlq.log.Event(t.log.Error).Str("subject", subject).Str("reason", reason).Str("error", why).
			Str("dead_letter_error", bus.Clip(err.Error(), dlqReasonMax)).Msg("event terminated; the broker took no dead letter of it")
	} else {
		t.dlq.log.Event(t.log.Warn).Str("subject", subject).Str("reason", reason).Str("error", why).
			Bool("truncated", truncated).Msg("event dead-lettered")
	}
	return msg.Term()
}

// permanentPublishError reports whether the broker refused a message for
// what it is (too large, rejected by the stream), which sending it again
// would not change, or because its store is full: a poison event must not
// hold its partition up until there is room (it stays in the events
// stream; the log names it).
func permanentPublishError(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) || bus.StoreFull(err) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 500 && apiErr.Code != 408
}
