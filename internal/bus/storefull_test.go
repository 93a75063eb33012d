package bus_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
)

// fullStore is a real nats-server whose JetStream store is small, and a
// FILL stream the test fills until the server answers every publish with
// 503 "insufficient resources" (err_code 10023, what a full store
// answers), then purges to make room again.
type fullStore struct {
	srv *server.Server
	js  jetstream.JetStream
}

func startFullStore(t *testing.T, maxStore int64) *fullStore {
	t.Helper()
	opts := natstest.Options(t.TempDir(), 0)
	opts.JetStreamMaxStore = maxStore
	s, err := natstest.NewServerWithOptions(opts)
	require.NoError(t, err)
	t.Cleanup(func() { natstest.Shutdown(s) })
	js := jsFor(t, s)
	_, err = js.CreateStream(testCtx(t), jetstream.StreamConfig{Name: "FILL", Subjects: []string{"fill.>"}})
	require.NoError(t, err)
	return &fullStore{srv: s, js: js}
}

// fill publishes to FILL until the server says its store is full, and
// returns that answer.
func (f *fullStore) fill(t *testing.T) error {
	t.Helper()
	data := []byte(strings.Repeat("f", 8<<10))
	for i := 0; ; i++ {
		_, err := f.js.Publish(testCtx(t), fmt.Sprintf("fill.%d", i), data)
		if err != nil {
			return err
		}
		require.Less(t, i, 100000, "the store never filled")
	}
}

// free purges FILL.
func (f *fullStore) free(t *testing.T) {
	t.Helper()
	s, err := f.js.Stream(testCtx(t), "FILL")
	require.NoError(t, err)
	require.NoError(t, s.Purge(testCtx(t)))
}

// TestBrokerStoreFullIntegration publishes a run while the broker's store
// is full: the server answers 503 "insufficient resources" (10023), which
// is the broker being unavailable, not a refusal of the event. The events
// are spooled and tried again for as long as the store stays full (well
// past the five attempts after which an event the server answers with an
// error is set aside), nothing goes to rejected/, and once there is room
// every event is delivered, once, in order.
func TestBrokerStoreFullIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	st := startFullStore(t, 512<<10)
	err := st.fill(t)
	var apiErr *jetstream.APIError
	require.ErrorAs(t, err, &apiErr, "a full store answers with an API error")
	require.Equal(t, 503, apiErr.Code)
	require.Equal(t, jetstream.ErrorCode(10023), apiErr.ErrorCode)
	require.Equal(t, "insufficient resources", apiErr.Description)

	evs := runEvents(t, "run-full", 12)
	// Count the publish attempts of the run's first event (a plain
	// subscriber sees every attempt, stored or not).
	var mu sync.Mutex
	attempts := 0
	nc := natstest.Connect(t, st.srv.ClientURL())
	_, err = nc.Subscribe("gttsplit.>", func(m *nats.Msg) {
		if m.Header.Get(jetstream.MsgIDHeader) == evs[0].ID() {
			mu.Lock()
			attempts++
			mu.Unlock()
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	cfg := pubConfig(t)
	cfg.RetryInterval = 5 * time.Millisecond // many attempts while the store is full
	p, err := bus.NewPublisher(connect(t, st.srv.ClientURL()), cfg, testLogger(t))
	require.NoError(t, err)
	a := newAcks()
	publishAll(t, p, evs, a)
	rejected := filepath.Join(cfg.Dir(), bus.RejectedDir)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		files, _ := filepath.Glob(filepath.Join(rejected, "*.json"))
		return attempts >= 8 || len(files) > 0
	}, 30*time.Second, 5*time.Millisecond)
	files, _ := filepath.Glob(filepath.Join(rejected, "*.json"))
	require.Empty(t, files, "an event is set aside while the broker's store is full")
	require.Zero(t, p.Dropped())
	require.Positive(t, p.Stats().Spooled)

	st.free(t)
	requireDrainedOnce(t, p, st.js, evs, a)
	require.Zero(t, p.Stats().Dropped)
}
