package runtable

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// A stored state that is not one (a value damaged in the bucket, or
// written by something else) loses no run without a trace: the value is
// said at WARN with its key and dead-lettered (reason "state", on the
// run's dead-letter subject, the key in a Gttsplit-State-Key header), and
// an open run is folded again from the events the stream still holds (an
// ordered consumer on the run's subjects), as `aggregator replay` would:
// what the stream no longer holds (older than its max age) is missing from
// its split, which then says so as any incomplete fold does.

// errNotState marks a stored value that is no run state (nor an earlier
// version's open marker).
var errNotState = errors.New("not a run state")

// reasonState is the dead-letter reason of an unreadable stored state.
const reasonState = "state"

// runOfKey returns the run id of a state key (stateKey's), when the key
// holds it in the clear.
func runOfKey(skey string) (string, bool) {
	id, ok := strings.CutPrefix(skey, "run.")
	return id, ok && stateKey(id) == skey
}

// recoverOpen takes over an open key of the partition whose value is no
// run state: dead-lettered, and the run refolded from the events stream;
// it returns the refolded state, for the caller to resume (written at the
// next checkpoint over the bad value). A key whose run cannot be told (a
// hashed id), or of a run the stream holds no event of any more, is
// purged (nil state): the run's later events start it afresh.
func (pt *part) recoverOpen(ctx context.Context, key string, value []byte, cause error) (*RunState, error) {
	t := pt.t
	id, known := runOfKey(key[len(openPrefix(pt.p)):])
	st, n := (*RunState)(nil), 0
	if known {
		var err error
		if st, n, err = t.refold(ctx, id); err != nil {
			return nil, err // the stream did not answer: the take-over is tried again
		}
	}
	o := events.Origin{RunID: id}
	if st != nil {
		o = st.Origin
	}
	t.deadLetterState(ctx, key, o, value, cause)
	ev := t.log.Warn().Str("key", key).Err(cause).Int("bytes", len(value)).Int("partition", pt.p)
	switch {
	case !known:
		ev.Msg("unreadable run state dead-lettered; its run cannot be told from the key (a hashed run id): the key is purged, and the run's later events start it afresh")
		return nil, t.st.purge(ctx, pt.lease, key)
	case st == nil:
		ev.Str("run_id", id).Msg("unreadable run state dead-lettered; the events stream holds no event of the run any more: the key is purged")
		return nil, t.st.purge(ctx, pt.lease, key)
	}
	ev.Str("run_id", id).Int("events_refolded", n).
		Msg("unreadable run state dead-lettered; the run was folded again from the events the stream holds")
	return st, nil
}

// refold folds the run id again from the events the stream holds; nil
// when it holds none. It reports how many events brought something.
func (t *Table) refold(ctx context.Context, id string) (*RunState, int, error) {
	var st *RunState
	n := 0
	// One export, bounded by the take-over's own deadline (a run's events
	// may take longer to read than one API request's bound).
	_, err := bus.Export(ctx, t.js, t.cfg.Stream, bus.Range{Subjects: bus.StoredFilters("", "", "", id)}, func(m bus.Msg) error {
		d, err := m.Decode()
		if err != nil || d.Origin.RunID != id || d.Type == events.TypeSplit {
			return nil // poison was dead-lettered when it came; another run of the same token
		}
		if st == nil {
			st = NewRunState(d.Origin, t.cfg.Fold)
		}
		if ApplyTo(st, d) {
			n++
			if seq := m.Metadata().StreamSeq; d.Finished != nil && seq > st.FinishedSeq {
				st.FinishedSeq = seq
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("refold run %q from the events stream: %w", id, err)
	}
	if st != nil {
		st.LastEvent = t.cfg.Now()
	}
	return st, n, nil
}

// deadLetterState publishes a stored value that is no run state to the
// run's dead-letter subject, with the key and the reason, and counts it.
// A failure is said, not returned: the value stays under its key until it
// is overwritten.
func (t *Table) deadLetterState(ctx context.Context, key string, o events.Origin, value []byte, cause error) {
	tok := func(s string) string {
		if s == "" {
			return "_"
		}
		return s
	}
	dm := nats.NewMsg(events.Subject(events.KindDLQ, tok(o.Host), tok(o.Lane), tok(o.RunID)))
	dm.Data = value[:min(len(value), dlqBodyMax)]
	if len(value) > dlqBodyMax {
		dm.Header.Set("Gttsplit-Truncated", fmt.Sprint(len(value)))
	}
	dm.Header.Set("Gttsplit-Reason", bus.Clip("unreadable run state: "+cause.Error(), dlqReasonMax))
	dm.Header.Set("Gttsplit-State-Key", key)
	sum := sha256.Sum256(value)
	dm.Header.Set(jetstream.MsgIDHeader, "dlq/state/"+key+"/"+hex.EncodeToString(sum[:8]))
	var ack *jetstream.PubAck
	err := bus.Retry(ctx, func(ctx context.Context) error {
		var err error
		ack, err = t.js.PublishMsg(ctx, dm)
		return err
	})
	if err != nil {
		t.log.Error().Err(err).Str("key", key).Msg("unreadable run state: the broker took no dead letter of it")
		return
	}
	if !ack.Duplicate { // the same value, dead-lettered already
		t.m.dead.WithLabelValues(reasonState).Inc()
	}
}
