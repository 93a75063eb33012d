package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of a JetStream atomic batch publish (nats-server 2.12+).
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// nats-server's error codes of atomic batches.
const (
	jsErrAtomicPublishDisabled        jetstream.ErrorCode = 10174 // JSAtomicPublishDisabledErr
	jsErrAtomicPublishIncomplete      jetstream.ErrorCode = 10176 // JSAtomicPublishIncompleteBatchErr
	jsErrAtomicPublishTooLarge        jetstream.ErrorCode = 10199 // JSAtomicPublishTooLargeBatchErrF
	jsErrAtomicPublishTooManyInflight jetstream.ErrorCode = 10210 // JSAtomicPublishTooManyInflight
)

// PublishAtomic publishes msgs (at least one) to one stream as one atomic
// batch: the server stores all of them or none, in one replication round,
// each under its own headers' conditions. Every message but the last is
// sent without waiting; the last commits the batch and carries the
// server's answer for them all. The batch's messages are stored one after
// the other: the last at the answer's sequence.
func PublishAtomic(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) (*jetstream.PubAck, error) {
	var rb [16]byte
	_, _ = rand.Read(rb[:])
	id := hex.EncodeToString(rb[:])
	nc := js.Conn()
	for i, m := range msgs {
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		if i < len(msgs)-1 {
			if err := nc.PublishMsg(m); err != nil {
				return nil, err
			}
			continue
		}
		m.Header.Set(hdrBatchCommit, "1")
		return js.PublishMsg(ctx, m)
	}
	return nil, errors.New("bus: an atomic batch of no message")
}

// AtomicAllowed reports whether stream takes atomic batches and is
// replicated. On a single server a write costs no replication round, and
// the server stages a batch of a file-backed stream in a store of its own
// on disk (measured: as much CPU a write as one at a time, and slower).
//
// err says the stream's configuration went unread (on a busy broker, an
// answer later than APITimeout): the answer is then false, and the caller
// asks again later rather than writing one at a time for good.
func AtomicAllowed(ctx context.Context, js jetstream.JetStream, stream string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, APITimeout)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return false, err
	}
	return AtomicConfig(st.CachedInfo().Config), nil
}

// AtomicConfig is AtomicAllowed of a stream configuration in hand.
func AtomicConfig(c jetstream.StreamConfig) bool {
	return c.AllowAtomicPublish && c.Replicas > 1
}

// AtomicDisabled says the server refused an atomic batch because the
// stream does not allow them (any more: its configuration was changed).
func AtomicDisabled(err error) bool {
	return apiErrorCode(err) == jsErrAtomicPublishDisabled
}

// AtomicRefused says the server did not take an atomic batch as a whole
// (nothing of it is written) for a reason of the batch itself: too many
// open at once on the stream or the server (a refusal of the first
// message, which carries no reply, shows as an incomplete batch at the
// commit), more messages than it takes in one, or a batch cut by a change
// of the stream's leader.
func AtomicRefused(err error) bool {
	switch apiErrorCode(err) {
	case jsErrAtomicPublishIncomplete, jsErrAtomicPublishTooLarge, jsErrAtomicPublishTooManyInflight:
		return true
	}
	return false
}

// apiErrorCode is the JetStream error code err carries, 0 for none.
func apiErrorCode(err error) jetstream.ErrorCode {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode
	}
	return 0
}
