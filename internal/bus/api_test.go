package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
)

func TestTransient(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"unanswered", fmt.Errorf("consumer: %w", context.DeadlineExceeded), true},
		{"nats timeout", nats.ErrTimeout, true},
		{"no responders", nats.ErrNoResponders, true},
		{"leader not elected", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{"stream not found", fmt.Errorf("x: %w", jetstream.ErrStreamNotFound), false},
		{"bad request", &jetstream.APIError{Code: 400, ErrorCode: 10025, Description: "consumer name in subject does not match durable name in request"}, false},
		{"caller cancelled", context.Canceled, false},
	} {
		t.Run(c.name, func(t *testing.T) { require.Equal(t, c.want, bus.Transient(c.err)) })
	}
}

// A request the server never answers (its server killed, a stream leader
// gone while it was in flight) is sent again after bus.APITimeout, not
// waited for until the caller's deadline: here the first request is
// dropped and the second answered, well inside a caller's deadline that a
// single request would have used up.
func TestRetrySendsAnUnansweredRequestAgain(t *testing.T) {
	skipShort(t)
	s := natstest.Start(t)
	nc := natstest.Connect(t, s.ClientURL())
	var seen atomic.Int32
	sub, err := nc.Subscribe("api.test", func(m *nats.Msg) {
		if seen.Add(1) == 1 {
			return // dropped
		}
		_ = m.Respond([]byte("ok"))
	})
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, nc.Flush())

	ctx, cancel := context.WithTimeout(context.Background(), 10*bus.APITimeout)
	defer cancel()
	var got string
	calls := 0
	err = bus.Retry(ctx, func(ctx context.Context) error {
		calls++
		m, err := nc.RequestWithContext(ctx, "api.test", nil)
		if err != nil {
			return err
		}
		got = string(m.Data)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, "ok", got)
	require.Equal(t, 2, calls)
	require.NoError(t, ctx.Err(), "answered inside the caller's deadline")
}

// An answer that will not change (a stream that is not there) is returned
// at once; a caller's cancellation ends the retries.
func TestRetryStopsOnAFinalAnswerOrTheCallersEnd(t *testing.T) {
	skipShort(t)
	s := natstest.Start(t)
	js := natstest.JetStream(t, s.ClientURL())
	calls := 0
	err := bus.Retry(testCtx(t), func(ctx context.Context) error {
		calls++
		_, err := js.Stream(ctx, "NOT_THERE")
		return err
	})
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
	require.Equal(t, 1, calls)

	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	err = bus.Retry(ctx, func(ctx context.Context) error {
		calls++
		if calls == 3 {
			cancel()
		}
		return nats.ErrNoResponders
	})
	require.True(t, errors.Is(err, nats.ErrNoResponders))
	require.Equal(t, 3, calls)
}
