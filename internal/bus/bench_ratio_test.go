package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/internal/perftest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// BenchmarkPublishVsPublishAsync is the collector's publishing of log-lines
// events (10 lines each, distinct ids) through the Publisher, events handed
// over as event.Event (so it includes their JSON encoding), against
// nats.go's bare JetStream PublishMsgAsync of the same messages (subject,
// the Content-Type header of a structured CloudEvent, the encoded bytes)
// with the same durability: a message id each, asynchronous acks, waiting for every
// ack, the same in-flight bound (a publish waits for room rather than
// failing when the broker is slow to ack). The two alternate in rounds of 1,000
// events on one embedded server and stream, each going first every other
// round, so load on the machine hits both alike; x/baseline is the
// Publisher's events/s over the bare client's, of the summed times (≥ 1:
// as fast as the bare client), median-x/baseline the median over the
// rounds, cpu-x/baseline the bare rounds' CPU time (the process's, the
// embedded server's included) over the Publisher's.
//
//	go test ./internal/bus -run '^$' -bench PublishVsPublishAsync -benchtime 20000x
func BenchmarkPublishVsPublishAsync(b *testing.B) {
	s, p := benchPublisher(b)
	js, err := jetstream.New(natstest.Connect(b, s.ClientURL()), jetstream.WithPublishAsyncMaxPending(bus.DefaultConfig().MaxInFlight))
	require.NoError(b, err)

	const round = 1000
	o := events.Origin{RunID: "bench", Host: "host1", Lane: "gpu0"}
	mk := func(run string, i int) (event.Event, []byte, string) {
		lines := make([]split.Line, 10)
		for j := range lines {
			seq := uint64(i*10 + j + 1)
			lines[j] = split.Line{Stream: "stderr", Seq: seq, Text: fmt.Sprintf("load_tensors:        ROCm0 model buffer size = %8.2f MiB", float64(seq)/7)}
		}
		oo := o
		oo.RunID = run
		ev, err := events.NewLogLines(oo, lines)
		require.NoError(b, err)
		w, err := events.ToWire(ev)
		require.NoError(b, err)
		return ev, w.Data, w.ID
	}
	evs := make([]event.Event, b.N)
	wires := make([][]byte, b.N)
	ids := make([]string, b.N)
	size := 0
	for i := range evs {
		evs[i], _, _ = mk("bench", i)
		_, wires[i], ids[i] = mk("bare", i) // same size, other ids
		size += len(wires[i])
	}
	subj := events.Subject(events.KindLog, o.Host, o.Lane, "bare")
	b.SetBytes(int64(size / b.N))
	ctx := context.Background()
	var cpuOurs, cpuBare time.Duration
	ours := func(lo, hi int) time.Duration {
		c0 := perftest.ProcessCPU(b)
		defer func() { cpuOurs += perftest.ProcessCPU(b) - c0 }()
		t0 := time.Now()
		for _, ev := range evs[lo:hi] {
			if err := p.Publish(ctx, ev, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	bare := func(lo, hi int) time.Duration {
		b.StopTimer()
		defer b.StartTimer()
		c0 := perftest.ProcessCPU(b)
		defer func() { cpuBare += perftest.ProcessCPU(b) - c0 }()
		t0 := time.Now()
		for i := lo; i < hi; i++ {
			msg := &nats.Msg{Subject: subj, Data: wires[i], Header: nats.Header{"Content-Type": {events.StructuredContentType}}}
			if _, err := js.PublishMsgAsync(msg, jetstream.WithMsgID(ids[i]), jetstream.WithStallWait(time.Minute)); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
			b.Fatal("bare publish did not complete")
		}
		return time.Since(t0)
	}
	var pairs perftest.Pairs
	b.ResetTimer()
	for lo, r := 0, 0; lo < b.N; lo, r = lo+round, r+1 {
		hi := min(lo+round, b.N)
		if r%2 == 0 {
			d := ours(lo, hi)
			pairs.Add(d, bare(lo, hi))
		} else {
			d := bare(lo, hi)
			pairs.Add(ours(lo, hi), d)
		}
	}
	b.StopTimer()
	require.Equal(b, uint64(b.N), p.Stats().Published)
	pairs.Report(b)
	o1, b1 := pairs.Totals()
	b.ReportMetric(float64(b.N)/o1.Seconds(), "events/s")
	b.ReportMetric(float64(b.N)/b1.Seconds(), "bare-events/s")
	b.ReportMetric(float64(cpuBare)/float64(max(cpuOurs, 1)), "cpu-x/baseline")
}
