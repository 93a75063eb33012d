package bus_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// TestStreamDefaults: a stream a client creates with the default nats.*
// keys forgets its events after 30 days, as store.retention forgets a
// closed run, and refuses new events at its max_bytes rather than
// discarding old ones.
func TestStreamDefaults(t *testing.T) {
	skipShort(t)
	t.Parallel()
	s := natstest.Start(t)
	js := bareJS(t, s)
	cfg := bus.DefaultConfig()
	require.Equal(t, 30*24*time.Hour, cfg.StreamMaxAge)
	st, err := bus.EnsureStream(testCtx(t), js, cfg.StreamConfig(0), zerolog.Nop())
	require.NoError(t, err)
	require.Equal(t, 30*24*time.Hour, st.CachedInfo().Config.MaxAge)
	require.Equal(t, jetstream.DiscardNew, st.CachedInfo().Config.Discard)
}

// TestStreamFullRefusesNewIntegration is the stream size limit as found:
// with nats.stream_max_bytes set, a stream that discarded its oldest
// events lost events no aggregator had read, without a word. Now a full
// stream refuses new events: the publisher spools them (and says so),
// nothing stored is discarded (the first event is still there), and once
// the limit is raised every event is delivered, once, in order.
func TestStreamFullRefusesNewIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	s := natstest.Start(t)
	js := bareJS(t, s)
	evs := runEvents(t, "run-limit", 60)
	var size int64
	for _, ev := range evs[:len(evs)/2] {
		size += bus.SpoolRecordSize(t, ev) + 64 // about what the stream stores of it
	}
	nc := bus.DefaultConfig()
	nc.StreamMaxBytes = size
	_, err := bus.EnsureStream(testCtx(t), js, nc.StreamConfig(0), zerolog.Nop())
	require.NoError(t, err)

	var logs syncBuf
	p, err := bus.NewPublisher(connect(t, s.ClientURL()), pubConfig(t), zerolog.New(&logs))
	require.NoError(t, err)
	a := newAcks()
	publishAll(t, p, evs, a)
	require.NoError(t, p.Flush(testCtx(t)))
	require.Positive(t, p.Stats().Spooled, "what the full stream refused waits in the spool")
	require.Zero(t, p.Dropped())
	require.Contains(t, logs.String(), "maximum bytes exceeded")
	stream, err := js.Stream(testCtx(t), bus.DefaultStream)
	require.NoError(t, err)
	info, err := stream.Info(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.FirstSeq, "nothing stored was discarded")
	require.Less(t, info.State.Msgs, uint64(len(evs)))

	cfg := info.Config
	cfg.MaxBytes = -1
	_, err = js.UpdateStream(testCtx(t), cfg)
	require.NoError(t, err)
	requireDrainedOnce(t, p, js, evs, a)
}

// TestStreamDiscardOldSaid: a stream an operator made to discard its
// oldest events at a size limit is said at WARN by whoever makes sure of
// it, with the command that makes it refuse new ones instead.
func TestStreamDiscardOldSaid(t *testing.T) {
	skipShort(t)
	t.Parallel()
	s := natstest.Start(t)
	js := bareJS(t, s)
	_, err := js.CreateStream(testCtx(t), jetstream.StreamConfig{Name: bus.DefaultStream, Subjects: []string{events.StreamSubjects},
		MaxBytes: 1 << 20, Discard: jetstream.DiscardOld, MaxAge: bus.DefaultStreamMaxAge, Duplicates: bus.MinDuplicateWindow})
	require.NoError(t, err)
	var logs bytes.Buffer
	cfg := bus.DefaultConfig()
	cfg.StreamMaxBytes = 1 << 20
	_, err = bus.EnsureStream(testCtx(t), js, cfg.StreamConfig(0), zerolog.New(&logs))
	require.NoError(t, err)
	require.Contains(t, logs.String(), `"level":"warn"`)
	require.Contains(t, logs.String(), "--discard new")
}
