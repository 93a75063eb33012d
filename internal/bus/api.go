package bus

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// APITimeout bounds one JetStream API request made under a longer
// deadline. A request can go unanswered for good: the server it was sent
// to was killed, or the stream's leader died while it was in flight. Such
// a request is sent again (Retry) rather than waited for until the
// caller's deadline, which may be minutes away.
const APITimeout = 5 * time.Second

// Retry calls fn, each call under a context bounded by APITimeout, until
// it succeeds, fails for good, or ctx ends. A call is tried again after a
// short pause (250 ms, doubling to 2 s) when no server answered it in
// time, none listens (a node restarting), or the server answered that
// JetStream is temporarily unavailable (a leader being elected). fn must
// be safe to call again: an unanswered request may have been carried out.
func Retry(ctx context.Context, fn func(ctx context.Context) error) error {
	pause := 250 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, APITimeout)
		err := fn(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !Transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// Transient says whether err is a JetStream API request that may succeed
// if sent again: unanswered (its deadline passed, or a nats timeout), no
// responders, or an answer with status 503 (JetStream not ready, the
// stream's leader not elected yet). A full store (StoreFull) is 503 too,
// and room comes back.
func Transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code == http.StatusServiceUnavailable
}
