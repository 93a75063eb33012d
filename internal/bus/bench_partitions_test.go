package bus_test

import (
	"context"
	"fmt"
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
// (sourced from the events stream, 16 partitions, 1.5 KB each, ~400 runs)
// consumed and acknowledged by 16 consumers each filtered on its
// partition, against one unfiltered consumer (the baseline), in
// alternating rounds on one embedded server. Each filtered consumer walks
// past the other partitions' messages; x/baseline is the baseline's time
// over the 16 consumers' (1: the walk costs nothing), cpu-x/baseline the
// same of the process's CPU time (the embedded server's included).
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
	_, err = bus.EnsureStream(ctx, js, bus.DefaultStreamConfig(), zerolog.Nop())
	require.NoError(b, err)
	parts, err := bus.EnsurePartitions(ctx, js, bus.PartitionConfig{Stream: bus.DefaultStream}, zerolog.Nop())
	require.NoError(b, err)
	payload := make([]byte, 1500)
	for i := 0; i < n; i++ {
		_, err := js.PublishAsync(fmt.Sprintf("gttsplit.log.h.l.run%03d", i%400), payload)
		require.NoError(b, err)
		if i%1000 == 999 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	ps, err := js.Stream(ctx, bus.PartitionStream(bus.DefaultStream))
	require.NoError(b, err)
	deadline := time.Now().Add(time.Minute)
	for {
		si, err := ps.Info(ctx)
		require.NoError(b, err)
		if si.State.Msgs == n {
			break
		}
		require.True(b, time.Now().Before(deadline), "sourcing")
		time.Sleep(20 * time.Millisecond)
	}
	round := 0
	var cpuPart, cpuOne time.Duration
	consume := func(filters []string) time.Duration {
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
				FilterSubject: f, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1024})
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
	var one, part []string
	one = append(one, bus.PartitionPrefix+".>")
	for p := 0; p < parts; p++ {
		part = append(part, bus.PartitionFilter(p, ""))
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
