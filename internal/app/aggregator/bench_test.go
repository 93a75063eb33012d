package aggregator

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/perftest"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// benchAckPending is the consumers' max_ack_pending in the benchmark (the
// aggregator's default).
const benchAckPending = 4096

// BenchmarkServeThroughput measures events folded per second end to end
// as `aggregator serve` runs them: the recorded runs under new ids (b.N
// events, interleaved) are published on the events stream (partitioned at
// ingest, bus.DefaultPartitions partitions); then a bare JetStream
// consumer that only acknowledges reads them all from it (raw_ev/s); then
// Serve, on the default config (a consumer per partition it leases, the
// checkpoints to the state bucket, the acknowledgements after them, a JSON
// sink), folds them, from its first folded event until every run's split
// was written and every message acknowledged (svc_ev/s, ns/event).
// start_s is serve's start-up before that first event: connecting, the
// stream and bucket checks, joining the members and taking the partitions;
// it is a fixed cost, not part of the rate. decode_ev/s is how fast one
// goroutine decodes the same messages, fold_ev/s how fast it decodes and
// folds them into their runs' states (no broker, no checkpoint, no sink:
// the least serve does). cpu-µs/event is the process's CPU time (broker
// and service) per event while serve folds; cpu-svc/(fold+raw) that CPU
// time over the decode-and-fold CPU time plus the bare consumer's CPU
// time on the same messages: what serve costs beyond the least it must do
// (the aim is at most 1.5). writes/run is the run states written to the
// state bucket (checkpoints and closes) per run, redelivered the messages
// JetStream delivered again.
//
// GTTSPLIT_BENCH_PARTITIONS sets the partition count;
// GTTSPLIT_BENCH_SERVE_CPUPROFILE=<file> writes a CPU profile of the timed
// phase alone.
func BenchmarkServeThroughput(b *testing.B) {
	b.StopTimer()
	fxs := []fixture{loadFixture(b, fixture4B), loadFixture(b, fixture27B)}
	per := (len(fxs[0].Wires) + len(fxs[1].Wires)) / 2
	runs := genRuns(b, max(2, (b.N+per-1)/per), fxs...)
	ws := interleave(runs)
	n := len(ws)
	br := startBroker(b)
	ctx := testCtx(b)
	parts := benchParts()
	if parts != bus.DefaultPartitions {
		require.NoError(b, br.js.DeleteStream(ctx, bus.DefaultStream))
		sc := bus.DefaultStreamConfig()
		sc.Partitions = parts
		_, err := bus.EnsureStream(ctx, br.js, sc, zerolog.Nop())
		require.NoError(b, err)
	}
	for i := 0; i < n; i += 1000 {
		br.publish(b, ws[i:min(n, i+1000)]...)
	}
	ps, err := br.js.Stream(ctx, bus.DefaultStream)
	require.NoError(b, err)

	c0 := perftest.ProcessCPU(b)
	raw := rawConsume(b, ps, n)
	rawCPU := perftest.ProcessCPU(b) - c0
	dec := decodeAll(b, ws)
	c0 = perftest.ProcessCPU(b)
	fold := decodeFoldAll(b, ws)
	foldCPU := perftest.ProcessCPU(b) - c0

	cfg := testConfig(b, br.url)
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.IdleTimeout = time.Hour
	cfg.Consumer.Table.AckWait, cfg.Consumer.Table.MaxAckPending = time.Minute, benchAckPending
	if v := os.Getenv("GTTSPLIT_BENCH_CHECKPOINT_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(b, err)
		cfg.Consumer.Table.CheckpointInterval = d
	}
	t0 := time.Now()
	s := startServe(b, cfg, ServeOptions{})
	// The fold starts once serve holds its partitions: time it from the
	// first folded event (polled on /metrics, every millisecond).
	eventuallyFast(b, func() bool {
		return metricValue(httpGet(b, s.http, "/metrics", http.StatusOK), "gttsplit_events_folded_total") != "0"
	})
	t1, c1 := time.Now(), perftest.ProcessCPU(b)
	b.StartTimer()
	if pf := os.Getenv("GTTSPLIT_BENCH_SERVE_CPUPROFILE"); pf != "" {
		// A CPU profile of the timed phase alone (-cpuprofile would take
		// in the publishing and the baselines too).
		f, err := os.Create(pf)
		require.NoError(b, err)
		require.NoError(b, pprof.StartCPUProfile(f))
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	eventuallyFast(b, func() bool {
		if c, _ := s.closes.count(); c < len(runs) {
			return false
		}
		ci, err := br.consumerInfo(cfg.Consumer.Fleet.Group)
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0
	})
	b.StopTimer()
	pprof.StopCPUProfile()
	svc, svcCPU := time.Since(t1), perftest.ProcessCPU(b)-c1
	metrics := httpGet(b, s.http, "/metrics", http.StatusOK)
	require.NoError(b, s.stop(b))
	require.Equal(b, fmt.Sprint(n), metricValue(metrics, "gttsplit_events_folded_total"), "every event folded once")
	splits, closed := s.closes.count()
	require.Equal(b, len(runs), closed, "every run closed")
	require.Equal(b, len(runs), splits, "every run closed once")
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(parts), "partitions")
	b.ReportMetric(t1.Sub(t0).Seconds(), "start_s")
	b.ReportMetric(float64(svc.Nanoseconds())/float64(n), "ns/event")
	b.ReportMetric(float64(n)/raw.Seconds(), "raw_ev/s")
	b.ReportMetric(float64(n)/svc.Seconds(), "svc_ev/s")
	b.ReportMetric(float64(n)/dec.Seconds(), "decode_ev/s")
	b.ReportMetric(float64(n)/fold.Seconds(), "fold_ev/s")
	b.ReportMetric(float64(svcCPU.Microseconds())/float64(n), "cpu-µs/event")
	b.ReportMetric(svcCPU.Seconds()/(foldCPU+rawCPU).Seconds(), "cpu-svc/(fold+raw)")
	writes, _ := strconv.ParseFloat(metricValue(metrics, "gttsplit_state_writes_total"), 64)
	redelivered, _ := strconv.ParseFloat(metricValue(metrics, "gttsplit_events_redelivered_total"), 64)
	b.ReportMetric(writes/float64(len(runs)), "writes/run")
	b.ReportMetric(redelivered, "redelivered")
}

// rawConsume reads the n messages of stream s with a bare durable pull
// consumer that acknowledges each, and returns the time until the server
// had every ack.
func rawConsume(b *testing.B, s jetstream.Stream, n int) time.Duration {
	b.Helper()
	ctx := testCtx(b)
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy,
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

// decodeFoldAll decodes every message and folds it into its run's state,
// on one goroutine, and returns the time it took: the least work serve
// does for the same messages, with no broker, checkpoint or sink.
func decodeFoldAll(b *testing.B, ws []events.Wire) time.Duration {
	b.Helper()
	opts := foldOptions(b)
	runs := map[string]*runtable.RunState{}
	t0 := time.Now()
	for _, w := range ws {
		d, err := events.DecodeBytes(w.Data)
		if err != nil {
			b.Fatal(err)
		}
		st := runs[d.Origin.RunID]
		if st == nil {
			st = runtable.NewRunState(d.Origin, opts)
			runs[d.Origin.RunID] = st
		}
		runtable.ApplyTo(st, d)
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

// benchParts is the partition count of the benchmark's events stream:
// bus.DefaultPartitions, or GTTSPLIT_BENCH_PARTITIONS.
func benchParts() int {
	if v, _ := strconv.Atoi(os.Getenv("GTTSPLIT_BENCH_PARTITIONS")); v > 0 {
		return v
	}
	return bus.DefaultPartitions
}

// BenchmarkCloseLatency measures, near idle, the time from a run's
// run-finished event being acknowledged by the broker to its split being in
// the JSON sink's splits.jsonl (polled every millisecond): b.N runs (at
// least 20), one after another, each run's other events published and
// folded first. It reports the median and the 99th percentile.
//
//	go test ./internal/app/aggregator -run '^$' -bench CloseLatency -benchtime 50x
func BenchmarkCloseLatency(b *testing.B) {
	b.StopTimer()
	fx := loadFixture(b, fixture4B)
	n := max(b.N, 20)
	runs := genRuns(b, n, fx)
	br := startBroker(b)
	cfg := testConfig(b, br.url)
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.IdleTimeout = time.Hour
	s := startServe(b, cfg, ServeOptions{})
	jsonl := filepath.Join(cfg.Sinks.JSON.Dir, "splits.jsonl")
	fin := fx.FinishedIndex(b)
	var lat []time.Duration
	for i, r := range runs {
		br.publish(b, r.Wires[:fin]...)
		br.publish(b, r.Wires[fin+1:]...)
		// Every event so far but this run's finish.
		want := float64((i+1)*len(r.Wires) - 1)
		eventuallyFast(b, func() bool {
			v, _ := strconv.ParseFloat(metricValue(httpGet(b, s.http, "/metrics", http.StatusOK), "gttsplit_events_folded_total"), 64)
			return v >= want
		})
		br.publish(b, r.Wires[fin])
		acked := time.Now()
		eventuallyFast(b, func() bool {
			data, _ := os.ReadFile(jsonl)
			return bytes.Contains(data, []byte(`"id":"`+r.Origin.RunID+`"`))
		})
		lat = append(lat, time.Since(acked))
	}
	require.NoError(b, s.stop(b))
	slices.Sort(lat)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(len(lat)), "runs")
}
