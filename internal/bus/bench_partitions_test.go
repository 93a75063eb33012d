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
	nc, err := nats.Connect(s.ClientURL())
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
