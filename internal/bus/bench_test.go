package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// BenchmarkPublishLogLines measures the Publisher's async JetStream
// throughput of log-lines events (10 lines each, distinct ids, so every
// event is stored), until the last ack, against a core-NATS baseline in the
// same run: nc.Publish of the same bytes to a subject no stream captures,
// until the server confirmed with a flush. It reports both rates and their
// ratio (events/s of the Publisher over events/s of core NATS), and for
// reference nats.go's bare async JetStream publish of the same bytes.
//
//	go test -run '^$' -bench PublishLogLines -benchtime 20000x ./internal/bus/
func BenchmarkPublishLogLines(b *testing.B) {
	s, p := benchPublisher(b)

	o := events.Origin{RunID: "bench", Host: "host1", Lane: "gpu0"}
	evs := make([]event.Event, b.N)
	wires := make([][]byte, b.N)
	size := 0
	for i := range evs {
		lines := make([]split.Line, 10)
		for j := range lines {
			seq := uint64(i*10 + j)
			lines[j] = split.Line{Stream: "stderr", Seq: seq, Text: fmt.Sprintf("load_tensors:        ROCm0 model buffer size = %8.2f MiB", float64(seq)/7)}
		}
		ev, err := events.NewLogLines(o, lines)
		require.NoError(b, err)
		w, err := events.ToWire(ev)
		require.NoError(b, err)
		evs[i], wires[i] = ev, w.Data
		size += len(w.Data)
	}
	b.SetBytes(int64(size / b.N))
	ctx := context.Background()

	b.ResetTimer()
	start := time.Now()
	for _, ev := range evs {
		if err := p.Publish(ctx, ev, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	jsDur := time.Since(start)
	b.StopTimer()
	require.Equal(b, uint64(b.N), p.Stats().Published)

	nc := natstest.Connect(b, s.ClientURL())
	start = time.Now()
	for _, w := range wires {
		if err := nc.Publish("bench.core", w); err != nil {
			b.Fatal(err)
		}
	}
	require.NoError(b, nc.Flush())
	coreDur := time.Since(start)

	// For reference: nats.go's own async JetStream publish of the same
	// bytes with the same in-flight bound, without the Publisher's
	// bookkeeping (ordering, acks, spool).
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(bus.DefaultConfig().MaxInFlight))
	require.NoError(b, err)
	subj := events.Subject(events.KindLog, o.Host, o.Lane, o.RunID)
	start = time.Now()
	for i, w := range wires {
		if _, err := js.PublishAsync(subj, w, jetstream.WithMsgID(fmt.Sprintf("raw/%d", i))); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("raw jetstream publish did not complete")
	}
	rawDur := time.Since(start)

	jsRate := float64(b.N) / jsDur.Seconds()
	coreRate := float64(b.N) / coreDur.Seconds()
	b.ReportMetric(jsRate, "events/s")
	b.ReportMetric(coreRate, "core_events/s")
	b.ReportMetric(float64(b.N)/rawDur.Seconds(), "raw_js_events/s")
	b.ReportMetric(jsRate/coreRate, "ratio")
}

// benchPublisher starts an embedded server with the events stream and a
// Publisher on it (spool in a temp dir), closed when the benchmark ends.
func benchPublisher(b *testing.B) (*server.Server, *bus.Publisher) {
	b.Helper()
	s := natstest.Start(b)
	jsFor(b, s)
	cfg := bus.DefaultPublisherConfig()
	cfg.Spool.Dir = b.TempDir()
	p, err := bus.NewPublisher(connect(b, s.ClientURL()), cfg, zeroLogger())
	require.NoError(b, err)
	b.Cleanup(func() { _ = p.Close(context.Background()) })
	return s, p
}
