package aggregator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/internal/runtable"
)

// TestFleetIdleSourcesIntegration measures what each kind of request an
// idle fleet sends costs a 3-node R3 cluster (its servers' CPU), one kind
// at a time at a rate well above the idle one (so that it stands out of
// the servers' own background, measured between the kinds): a lease
// renewal (a put of the state bucket conditional on the key's revision,
// with a time to live) with no watch and with a watch on each node, the
// same renewals in atomic batches of five (the figure is a renewal's), a
// member key's put (the members bucket, in memory) watched on each node,
// an idle partition's pull (a pinned R3 consumer, no message) and a
// consumer's info. The per-request figures times the idle rates are
// docs/operations.md's table of what an idle fleet costs.
//
//	GTTSPLIT_FLEET=full go test ./internal/app/aggregator -run TestFleetIdleSourcesIntegration -v
func TestFleetIdleSourcesIntegration(t *testing.T) {
	if fleetRuns(t) != fullRuns {
		t.Skip("a measurement: GTTSPLIT_FLEET=full runs it")
	}
	c := natstest.StartProcCluster(t, 3, "")
	_, js := connectJS(t, c.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	sc := bus.DefaultStreamConfig()
	sc.Replicas = 3
	eventually(t, "the R3 events stream", func() bool {
		_, err := bus.EnsureStream(ctx, js, sc, testLogger(t))
		return err == nil
	})
	var kv jetstream.KeyValue
	eventually(t, "the R3 state bucket", func() bool {
		var err error
		kv, err = runtable.EnsureBucket(ctx, js, 3, testLogger(t))
		return err == nil
	})
	var mkv jetstream.KeyValue
	eventually(t, "an R3 members bucket", func() bool {
		var err error
		mkv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "IDLE_MEMBERS", TTL: 15 * time.Second, Storage: jetstream.MemoryStorage, Replicas: 3})
		return err == nil
	})
	// The keys live longer than the test (between the kinds nothing
	// renews them); a time to live costs the same whatever its length.
	const keys, ttl = 16, 15 * time.Minute
	revs := make([]uint64, keys)
	for i := range keys {
		eventually(t, "a lease key", func() bool {
			var err error
			revs[i], err = kv.Create(ctx, "lease.idle."+strconv.Itoa(i), []byte("m#0"), jetstream.KeyTTL(ttl))
			return err == nil
		})
	}
	subj := func(i int) string { return "$KV." + runtable.Bucket + ".lease.idle." + strconv.Itoa(i) }
	var failed atomic.Int64
	renew := func(i int) {
		pa, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj(i), Data: []byte("m#0")},
			jetstream.WithExpectLastSequencePerSubject(revs[i]), jetstream.WithMsgTTL(ttl))
		if err != nil {
			failed.Add(1)
			return
		}
		revs[i] = pa.Sequence
	}
	// renewBatch renews keys from..from+n-1 in one atomic batch; its
	// messages are stored one after the other, ending at the commit's.
	renewBatch := func(from, n int) {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id := hex.EncodeToString(b[:])
		for j := range n {
			i := (from + j) % keys
			m := nats.NewMsg(subj(i))
			m.Data = []byte("m#0")
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(revs[i], 10))
			m.Header.Set(jetstream.MsgTTLHeader, ttl.String())
			m.Header.Set("Nats-Batch-Id", id)
			m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(j+1))
			if j < n-1 {
				require.NoError(t, js.Conn().PublishMsg(m))
				continue
			}
			m.Header.Set("Nats-Batch-Commit", "1")
			pa, err := js.PublishMsg(ctx, m)
			if err != nil {
				failed.Add(1)
				t.Logf("batch: %v", err)
				return
			}
			for k := range n {
				revs[(from+k)%keys] = pa.Sequence - uint64(n-1-k)
			}
		}
	}
	watchOn := func(kv func(jetstream.JetStream) jetstream.KeyValue, filter string) func() {
		var stops []func()
		for _, nd := range c.Nodes {
			_, njs := connectJS(t, nd.URL())
			w, err := kv(njs).Watch(ctx, filter)
			require.NoError(t, err)
			done := make(chan struct{})
			go func() {
				for {
					select {
					case <-w.Updates():
					case <-done:
						return
					}
				}
			}()
			stops = append(stops, func() { close(done); _ = w.Stop() })
		}
		return func() {
			for _, s := range stops {
				s()
			}
		}
	}
	stateKV := func(j jetstream.JetStream) jetstream.KeyValue {
		k, err := j.KeyValue(ctx, runtable.Bucket)
		require.NoError(t, err)
		return k
	}
	membersKV := func(j jetstream.JetStream) jetstream.KeyValue {
		k, err := j.KeyValue(ctx, "IDLE_MEMBERS")
		require.NoError(t, err)
		return k
	}
	cons := make([]jetstream.Consumer, keys)
	for p := range keys {
		eventually(t, "a pinned partition consumer", func() bool {
			var err error
			cons[p], err = js.CreateOrUpdateConsumer(ctx, bus.DefaultStream, jetstream.ConsumerConfig{
				Durable: fmt.Sprintf("idle-p%02d", p), FilterSubjects: bus.PartitionFilters(p, ""),
				AckPolicy: jetstream.AckExplicitPolicy, Replicas: 3,
				PriorityPolicy: jetstream.PriorityPolicyPinned, PriorityGroups: []string{"owner"}, PinnedTTL: 5 * time.Second,
			})
			return err == nil
		})
	}

	const window = 20 * time.Second
	perSec := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / window.Seconds() }
	// background is the servers' CPU a second with nothing sent.
	background := func() float64 {
		time.Sleep(2 * time.Second)
		c0 := c.CPU()
		time.Sleep(window)
		return perSec(c.CPU() - c0)
	}
	// at runs op rate times a second for the window, one after the other
	// in one goroutine (pulls: keys goroutines), and returns the servers'
	// CPU a second and the ops done.
	at := func(rate float64, op func(n int)) (float64, int64) {
		time.Sleep(2 * time.Second)
		var n atomic.Int64
		c0 := c.CPU()
		end := time.Now().Add(window)
		tk := time.NewTicker(time.Duration(float64(time.Second) / rate))
		for time.Now().Before(end) {
			<-tk.C
			op(int(n.Add(1) - 1))
		}
		tk.Stop()
		return perSec(c.CPU() - c0), n.Load()
	}
	type row struct {
		what       string
		cpu, bg    float64
		ops        int64
		idleRate   float64
		idleSource string
	}
	var rows []row
	measure := func(what string, rate float64, op func(n int), idleRate float64, idleSource string) {
		bg := background()
		cpu, n := at(rate, op)
		rows = append(rows, row{what, cpu, bg, n, idleRate, idleSource})
		t.Logf("%s: %.1f ms/s at %.0f a second (background %.1f ms/s) [load %s]", what, cpu, float64(n)/window.Seconds(), bg, loadavg())
	}
	measure("lease renewal, not watched", 20, func(n int) { renew(n % keys) }, 0, "")
	stop := watchOn(stateKV, "lease.idle.>")
	measure("lease renewal, watched on each node", 20, func(n int) { renew(n % keys) }, 16.0/(15.0/4), "16 leases renewed every lease_ttl/4, watched by 3 members")
	measure("lease renewal in an atomic batch of 5, watched on each node", 4, func(n int) { renewBatch(5*n, 5) },
		16.0/(15.0/3), "16 leases renewed every lease_ttl/3 in their members' batches, watched by 3 members")
	rows[len(rows)-1].ops *= 5
	stop()
	stop = watchOn(membersKV, "m.>")
	measure("member key put, watched on each node", 20, func(n int) {
		if _, err := mkv.PutString(ctx, "m."+strconv.Itoa(n%3), time.Now().String()); err != nil {
			failed.Add(1)
		}
	}, 3.0/5, "3 member keys renewed every lease_ttl/3, watched by 3 members")
	stop()
	measure("consumer info", 10, func(n int) {
		if _, err := cons[n%keys].Info(ctx); err != nil {
			failed.Add(1)
		}
	}, 16.0/30, "a consumer's info every 30 s a partition")
	// Pulls: one goroutine a consumer, each pull expiring after a second
	// with nothing (16 a second).
	pulls := func() float64 {
		var n atomic.Int64
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		for p := range keys {
			go func() {
				defer func() { done <- struct{}{} }()
				for cctx.Err() == nil {
					b, err := cons[p].Fetch(1, jetstream.FetchPriorityGroup("owner"), jetstream.FetchMaxWait(time.Second))
					if err == nil {
						for range b.Messages() {
						}
					}
					n.Add(1)
				}
			}()
		}
		return func() float64 {
			time.Sleep(3 * time.Second)
			c0, n0 := c.CPU(), n.Load()
			time.Sleep(window)
			cpu := perSec(c.CPU() - c0)
			got := n.Load() - n0
			cancel()
			for range keys {
				<-done
			}
			t.Logf("idle pulls: %.1f ms/s at %.1f a second [load %s]", cpu, float64(got)/window.Seconds(), loadavg())
			rows = append(rows, row{"idle pull (expired, pinned R3 consumer)", cpu, 0, got, 16.0 / 15, "16 idle partitions pulling every 15 s"})
			return cpu
		}()
	}
	bg := background()
	pulls()
	rows[len(rows)-1].bg = bg
	require.Zero(t, failed.Load(), "requests failed")
	for _, r := range rows {
		per := (r.cpu - r.bg) * window.Seconds() / float64(r.ops)
		line := fmt.Sprintf("FIGURE idle source: %s: %.2f ms of broker CPU each (%.1f ms/s at %.1f a second, background %.1f ms/s)",
			r.what, per, r.cpu, float64(r.ops)/window.Seconds(), r.bg)
		if r.idleRate > 0 {
			line += fmt.Sprintf("; an idle fleet's %s: %.2f a second, %.1f ms/s", r.idleSource, r.idleRate, per*r.idleRate)
		}
		t.Log(line)
	}
}
