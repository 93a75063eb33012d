package bus_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/internal/perftest"
)

// BenchmarkPartitionConsumers asks what the aggregator's one consumer per
// partition costs the broker: the same messages of the partitioned stream
// (sourced from the events stream, 16 partitions, ~400 runs; the payloads
// are the recorded 4B and 27B runs' events in turn, 12 KB on average)
// consumed and acknowledged by 16 consumers each filtered on its
// partition, against one unfiltered consumer (the baseline), in
// alternating rounds on one embedded server. Each filtered consumer walks
// past the other partitions' messages; x/baseline is the baseline's time
// over the 16 consumers' (1: the walk costs nothing), cpu-x/baseline the
// same of the process's CPU time (the embedded server's included). The
// walk copies every message it passes (the server's file store does), so
// its cost grows with the partition count and the events' size: sizes
// like the real events' matter. GTTSPLIT_BENCH_PARTITIONS sets the
// partition count.
//
//	go test ./internal/bus -run '^$' -bench PartitionConsumers -benchtime 4x
func BenchmarkPartitionConsumers(b *testing.B) {
	const n = 16000
	s := natstest.Start(b)
	nc, err := nats.Connect(s.ClientURL(), nats.Timeout(natstest.ConnectTimeout))
	require.NoError(b, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	ctx := context.Background()
	sc := bus.DefaultStreamConfig()
	sc.Partitions = benchPartitions()
	_, err = bus.EnsureStream(ctx, js, sc, zerolog.Nop())
	require.NoError(b, err)
	parts := sc.Partitions
	payloads := recordedEvents(b)
	for i := 0; i < n; i++ {
		_, err := js.PublishAsync(fmt.Sprintf("gttsplit.log.h.l.run%03d", i%400), payloads[i%len(payloads)])
		require.NoError(b, err)
		if i%1000 == 999 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	ps, err := js.Stream(ctx, bus.DefaultStream)
	require.NoError(b, err)
	round := 0
	var cpuPart, cpuOne time.Duration
	consume := func(filters [][]string) time.Duration {
		round++
		t0, c0 := time.Now(), perftest.ProcessCPU(b)
		defer func() {
			if len(filters) == 1 {
				cpuOne += perftest.ProcessCPU(b) - c0
			} else {
				cpuPart += perftest.ProcessCPU(b) - c0
			}
		}()
		var wg sync.WaitGroup
		for i, f := range filters {
			c, err := ps.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: fmt.Sprintf("r%d-%d", round, i),
				FilterSubjects: f, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1024})
			require.NoError(b, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				drainConsumer(b, c)
			}()
		}
		wg.Wait()
		return time.Since(t0)
	}
	one := [][]string{nil}
	var part [][]string
	for p := 0; p < parts; p++ {
		part = append(part, bus.PartitionFilters(p, ""))
	}
	var pairs perftest.Pairs
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			o := consume(part)
			pairs.Add(o, consume(one))
		} else {
			base := consume(one)
			pairs.Add(consume(part), base)
		}
	}
	b.StopTimer()
	pairs.Report(b)
	b.ReportMetric(float64(cpuOne)/float64(max(cpuPart, 1)), "cpu-x/baseline")
}

// BenchmarkPartitionSubjects asks whether the partition consumers' walk
// depends on how many subjects the stream holds: the events stream's
// subjects (kind, partition, host, lane and run: 400 subjects here) against
// a second stream of the same messages whose transform keeps only kind and
// partition (16 subjects, each consumer's filter a literal subject), 16
// consumers each, in alternating rounds on one embedded server.
// x/baseline is the process's CPU time on the 16 subjects over that on the
// full subjects (below 1: fewer subjects cost less; measured 0.91–0.97,
// a few per cent).
//
//	go test ./internal/bus -run '^$' -bench PartitionSubjects -benchtime 4x
func BenchmarkPartitionSubjects(b *testing.B) {
	const n = 16000
	s := natstest.Start(b)
	nc, err := nats.Connect(s.ClientURL(), nats.Timeout(natstest.ConnectTimeout))
	require.NoError(b, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	ctx := context.Background()
	_, err = bus.EnsureStream(ctx, js, bus.DefaultStreamConfig(), zerolog.Nop())
	require.NoError(b, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "FEW", Subjects: []string{"few.>"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "few.*.*.*.*",
			Destination: fmt.Sprintf("few.{{wildcard(1)}}.{{partition(%d,4)}}", bus.DefaultPartitions)}})
	require.NoError(b, err)
	payloads := recordedEvents(b)
	for i := 0; i < n; i++ {
		for _, root := range []string{"gttsplit", "few"} {
			_, err := js.PublishAsync(fmt.Sprintf("%s.log.h.l.run%03d", root, i%400), payloads[i%len(payloads)])
			require.NoError(b, err)
		}
		if i%500 == 499 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	round := 0
	consume := func(stream string, filter func(p int) string) time.Duration {
		round++
		c0 := perftest.ProcessCPU(b)
		st, err := js.Stream(ctx, stream)
		require.NoError(b, err)
		consumeAll(b, st, fmt.Sprintf("r%d", round), func(p int) []string { return []string{filter(p)} })
		return perftest.ProcessCPU(b) - c0
	}
	full := func() time.Duration {
		return consume(bus.DefaultStream, func(p int) string { return fmt.Sprintf("gttsplit.log.%d.>", p) })
	}
	few := func() time.Duration {
		return consume("FEW", func(p int) string { return fmt.Sprintf("few.log.%d", p) })
	}
	var pairs perftest.Pairs
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			o := full()
			pairs.Add(o, few())
		} else {
			base := few()
			pairs.Add(full(), base)
		}
	}
	b.StopTimer()
	pairs.Report(b)
}

// BenchmarkPartitionFilters measures what the partition consumers' one
// wildcard filter (bus.PartitionFilters: every kind of the partition)
// saves against one filter per folded kind (run, log, fdinfo: the server
// then takes its multi-filter path), 16 consumers each, on the events
// stream's messages of mixed kinds, in alternating rounds on one embedded
// server. x/baseline is the process's CPU time with a filter per kind over
// that with the one filter (1.6 measured: the one filter costs less).
//
//	go test ./internal/bus -run '^$' -bench PartitionFilters -benchtime 4x
func BenchmarkPartitionFilters(b *testing.B) {
	const n = 16000
	s := natstest.Start(b)
	nc, err := nats.Connect(s.ClientURL(), nats.Timeout(natstest.ConnectTimeout))
	require.NoError(b, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	ctx := context.Background()
	_, err = bus.EnsureStream(ctx, js, bus.DefaultStreamConfig(), zerolog.Nop())
	require.NoError(b, err)
	payloads := recordedEvents(b)
	kinds := []string{"log", "fdinfo", "fdinfo", "log", "run"}
	for i := 0; i < n; i++ {
		_, err := js.PublishAsync(fmt.Sprintf("gttsplit.%s.h.l.run%03d", kinds[i%len(kinds)], i%400), payloads[i%len(payloads)])
		require.NoError(b, err)
		if i%500 == 499 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	st, err := js.Stream(ctx, bus.DefaultStream)
	require.NoError(b, err)
	round := 0
	consume := func(filters func(p int) []string) time.Duration {
		round++
		c0 := perftest.ProcessCPU(b)
		consumeAll(b, st, fmt.Sprintf("r%d", round), filters)
		return perftest.ProcessCPU(b) - c0
	}
	one := func() time.Duration { return consume(func(p int) []string { return bus.PartitionFilters(p, "") }) }
	perKind := func() time.Duration {
		return consume(func(p int) []string {
			return []string{fmt.Sprintf("gttsplit.run.%d.*.*.*", p), fmt.Sprintf("gttsplit.log.%d.*.*.*", p), fmt.Sprintf("gttsplit.fdinfo.%d.*.*.*", p)}
		})
	}
	var pairs perftest.Pairs
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			o := one()
			pairs.Add(o, perKind())
		} else {
			base := perKind()
			pairs.Add(one(), base)
		}
	}
	b.StopTimer()
	pairs.Report(b)
}

// consumeAll consumes and acknowledges every message of st with one
// durable consumer a partition (named prefix-p, filtered on filters(p)),
// the partitions in parallel.
func consumeAll(b *testing.B, st jetstream.Stream, prefix string, filters func(p int) []string) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for p := 0; p < bus.DefaultPartitions; p++ {
		c, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: fmt.Sprintf("%s-%d", prefix, p),
			FilterSubjects: filters(p), AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1024})
		require.NoError(b, err)
		wg.Go(func() { drainConsumer(b, c) })
	}
	wg.Wait()
}

// drainConsumer consumes and acknowledges the messages c had pending when
// it was created.
func drainConsumer(b *testing.B, c jetstream.Consumer) {
	it, err := c.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		b.Error(err)
		return
	}
	defer it.Stop()
	for left := c.CachedInfo().NumPending; left > 0; left-- {
		m, err := it.Next()
		if err != nil {
			b.Error(err)
			return
		}
		_ = m.Ack()
	}
}

// recordedEvents returns the events of the recorded 4B and 27B runs, one
// JSON event each, as the collector published them.
func recordedEvents(b *testing.B) [][]byte {
	b.Helper()
	var out [][]byte
	for _, run := range []string{"4b", "27b"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "runs", run, "events.jsonl"))
		require.NoError(b, err)
		out = append(out, bytes.Split(bytes.TrimSpace(data), []byte("\n"))...)
	}
	return out
}

// benchPartitions is bus.DefaultPartitions, or GTTSPLIT_BENCH_PARTITIONS.
func benchPartitions() int {
	if v, _ := strconv.Atoi(os.Getenv("GTTSPLIT_BENCH_PARTITIONS")); v > 0 {
		return v
	}
	return bus.DefaultPartitions
}
