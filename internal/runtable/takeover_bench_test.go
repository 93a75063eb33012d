package runtable_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
)

// BenchmarkTakeOver measures a partition's take-over: the bucket holds
// GTTSPLIT_BENCH_OPEN (default 10,000) open runs of partition 0 (each the
// 4B run's state but its finish) and as many closed runs of other
// partitions again (GTTSPLIT_BENCH_CLOSED, default 20,000: the bucket's
// size, which the take-over must not read); a table takes the partitions
// over and the time until it holds partition 0's runs is reported
// (takeover-s), with the runs it resumed.
//
//	go test ./internal/runtable -run '^$' -bench TakeOver -benchtime 1x
func BenchmarkTakeOver(b *testing.B) {
	open := benchEnv("GTTSPLIT_BENCH_OPEN", 10_000)
	closed := benchEnv("GTTSPLIT_BENCH_CLOSED", 20_000)
	opts := rt.FoldOptions(b)
	fx := rt.Load(b, fixture4B, opts)
	br := rt.StartBroker(b)
	ctx := context.Background()
	_, err := runtable.EnsureBucket(ctx, br.JS, 1, testLogger(b))
	require.NoError(b, err)
	parts, err := bus.StreamPartitions(ctx, br.JS, bus.DefaultStream)
	require.NoError(b, err)
	st := runtable.NewRunState(fx.Origin, opts)
	for _, d := range fx.Decoded {
		if d.Finished == nil {
			runtable.ApplyTo(st, d)
		}
	}
	openState, err := runtable.MarshalState(st)
	require.NoError(b, err)
	st.Closed = true
	closedState, err := runtable.MarshalState(st)
	require.NoError(b, err)
	// The keys are written as the table writes them (the lease keys
	// aside: no table holds the partitions yet).
	put := func(key string, data []byte) {
		_, err := br.JS.PublishMsgAsync(&nats.Msg{Subject: "$KV." + runtable.Bucket + "." + key, Data: data})
		require.NoError(b, err)
	}
	made := 0
	for i := 0; made < open; i++ {
		id := fmt.Sprintf("open-%07d", i)
		if bus.PartitionOf(id, parts) != 0 {
			continue
		}
		put(runtable.OpenKey(0, id), openState)
		made++
		if made%1000 == 0 {
			<-br.JS.PublishAsyncComplete()
		}
	}
	made = 0
	for i := 0; made < closed; i++ {
		id := fmt.Sprintf("closed-%07d", i)
		if bus.PartitionOf(id, parts) == 0 {
			continue
		}
		put(runtable.StateKey(id), closedState)
		made++
		if made%1000 == 0 {
			<-br.JS.PublishAsyncComplete()
		}
	}
	<-br.JS.PublishAsyncComplete()
	_, bytes := kvBytes(b, br)
	b.ResetTimer()
	var took time.Duration
	var resumed float64
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		r := startTable(b, br.URL, fmt.Sprintf("takeover%d", i), tableConfig{idle: time.Hour})
		r.waitOwns(r.parts)
		took = time.Since(t0)
		resumed = counter(b, r.m, "gttsplit_runs_open")
		b.StopTimer()
		r.stop()
		b.StartTimer()
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(took.Seconds(), "takeover-s")
	b.ReportMetric(resumed, "runs-resumed")
	b.ReportMetric(float64(bytes)/(1<<20), "bucket-MiB")
}

func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
