package aggregator

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// benchAckPending is the consumers' max_ack_pending in the benchmark (the
// aggregator's default).
const benchAckPending = 1024

// BenchmarkServeThroughput measures events folded per second end to end
// through the embedded JetStream: the recorded runs under new ids (b.N
// events, interleaved) are published first; then a bare JetStream consumer
// that only acknowledges reads them all (raw_ev/s), then a Service on its
// own durable consumer, wired as Serve wires it, folds them, writes the run
// states and acknowledges (svc_ev/s, ns/event). svc/raw is the ratio in the
// same run; the target is at least 0.5. decode_ev/s is how fast one
// goroutine decodes the same messages (events.DecodeBytes, which every
// folded event needs): the bound the Service cannot pass per core.
func BenchmarkServeThroughput(b *testing.B) {
	b.StopTimer()
	fxs := []fixture{loadFixture(b, fixture4B), loadFixture(b, fixture27B)}
	per := (len(fxs[0].wires) + len(fxs[1].wires)) / 2
	runs := genRuns(b, max(2, (b.N+per-1)/per), fxs...)
	ws := interleave(runs)
	n := len(ws)
	br := startBroker(b)
	br.publish(b, ws...)
	opts := func(cc *bus.ConsumerConfig) { cc.AckWait, cc.MaxAckPending = time.Minute, benchAckPending }

	raw := rawConsume(b, br, n)
	dec := decodeAll(b, ws)

	r := startService(b, br.url, "bench", ServiceConfig{IdleTimeout: time.Hour}, opts)
	t0 := time.Now()
	b.StartTimer()
	// The service consumes from the start; the clock runs from here.
	eventuallyFast(b, func() bool {
		ci, err := br.consumerInfo("bench")
		return err == nil && ci.AckFloor.Stream >= uint64(n) && ci.NumAckPending == 0
	})
	b.StopTimer()
	svc := time.Since(t0)
	r.stop()
	require.Equal(b, float64(n), counter(b, r.m, "gttsplit_events_folded_total"), "every event folded once")
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(svc.Nanoseconds())/float64(n), "ns/event")
	b.ReportMetric(float64(n)/raw.Seconds(), "raw_ev/s")
	b.ReportMetric(float64(n)/svc.Seconds(), "svc_ev/s")
	b.ReportMetric(float64(n)/dec.Seconds(), "decode_ev/s")
	b.ReportMetric(raw.Seconds()/svc.Seconds(), "svc/raw")
}

// rawConsume reads the n messages with a bare durable pull consumer that
// acknowledges each, and returns the time until the server had every ack.
func rawConsume(b *testing.B, br *testBroker, n int) time.Duration {
	b.Helper()
	ctx := testCtx(b)
	cc := bus.DefaultConsumerConfig()
	cons, err := br.js.CreateOrUpdateConsumer(ctx, bus.DefaultStream, jetstream.ConsumerConfig{
		Durable: "raw", FilterSubjects: cc.FilterSubjects, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Minute, MaxAckPending: benchAckPending,
	})
	require.NoError(b, err)
	t0 := time.Now()
	it, err := cons.Messages(jetstream.PullMaxMessages(min(benchAckPending, 256)))
	require.NoError(b, err)
	for i := 0; i < n; i++ {
		m, err := it.Next()
		require.NoError(b, err)
		require.NoError(b, m.Ack())
	}
	it.Stop()
	eventuallyFast(b, func() bool {
		ci, err := cons.Info(context.Background())
		return err == nil && ci.AckFloor.Stream >= uint64(n) && ci.NumAckPending == 0
	})
	return time.Since(t0)
}

// decodeAll decodes every message once on one goroutine and returns the
// time it took.
func decodeAll(b *testing.B, ws []events.Wire) time.Duration {
	b.Helper()
	t0 := time.Now()
	for _, w := range ws {
		if _, err := events.DecodeBytes(w.Data); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(t0)
}

// eventuallyFast polls cond every millisecond (timing the end of a run).
func eventuallyFast(b *testing.B, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(2 * waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}
