package aggregator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// The broker's cost: the servers of the fleet tests are nats-server
// processes and the aggregators child processes, so the broker's CPU is
// the servers' own (their /proc/<pid>/stat), apart from the aggregators'
// and the test's.

// plainConsume reads the first n messages of the events stream with a
// plain R3 durable pull consumer (no filter, explicit acks, one ack a
// message): the least any consumer of these events costs the broker. It
// returns how long it took. With ackAll the consumer acknowledges every
// ackAllEvery-th message and the last only, each for all before it (ack
// policy all): what acknowledging in batches would save at most.
func (f *fleetRig) plainConsume(name string, n int, ackAll ...bool) time.Duration {
	all := len(ackAll) > 0 && ackAll[0]
	policy := jetstream.AckExplicitPolicy
	if all {
		policy = jetstream.AckAllPolicy
	}
	return f.plainPass(name, "the plain consumer", policy, n, func(m jetstream.Msg, got int) {
		if !all || got%ackAllEvery == 0 || got == n {
			_ = m.Ack()
		}
	})
}

// plainPass reads the first n messages of the events stream with a new
// plain R3 durable pull consumer (no filter, ack policy policy), handing
// each, and how many came so far, to each (one at a time). It returns how
// long the n messages took, once their acks reached the servers (before
// their CPU is read).
func (f *fleetRig) plainPass(name, what string, policy jetstream.AckPolicy, n int, each func(m jetstream.Msg, got int)) time.Duration {
	t := f.t
	ctx := testCtx(t)
	var cons jetstream.Consumer
	eventually(t, "the plain consumer", func() bool {
		var err error
		cons, err = f.js.CreateOrUpdateConsumer(ctx, bus.DefaultStream, jetstream.ConsumerConfig{
			Durable: name, AckPolicy: policy, Replicas: 3, DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		return err == nil
	})
	t0 := time.Now()
	var mu sync.Mutex
	got := 0
	var last uint64
	done := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if got >= n {
			return
		}
		got++
		each(m, got)
		if got == n {
			md, _ := m.Metadata()
			last = md.Sequence.Stream
			close(done)
		}
	})
	require.NoError(t, err)
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%s read %d of %d messages", what, got, n)
	}
	d := time.Since(t0)
	cc.Stop()
	eventually(t, what+": its acks", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.AckFloor.Stream >= last
	})
	return d
}

// filteredConsume reads the first n messages of the events stream with
// one R3 durable pull consumer a partition, each filtered on its
// partition's subjects as the aggregators' are (explicit acks, one ack a
// message): the least the partitioned consumption costs the broker, the
// partition walk included. It returns how long it took.
func (f *fleetRig) filteredConsume(prefix string, parts, n int) time.Duration {
	specs := make([]consSpec, parts)
	for p := range parts {
		specs[p] = consSpec{bus.DefaultStream, bus.PartitionFilters(p, "")}
	}
	return f.consumeAll(prefix, specs, n)
}

// ownConsume is filteredConsume in the layout of a stream a partition
// (partStreams): each consumer reads its partition's own stream,
// unfiltered, with nothing to walk past.
func (f *fleetRig) ownConsume(prefix string, parts, n int) time.Duration {
	specs := make([]consSpec, parts)
	for p := range parts {
		specs[p] = consSpec{partStream(p), nil}
	}
	return f.consumeAll(prefix, specs, n)
}

// memberConsume is filteredConsume with one consumer a member instead of
// one a partition: members consumers, each filtered on the partitions
// a member of that many would hold (every members-th), so the stream is
// walked once a member.
func (f *fleetRig) memberConsume(prefix string, members, parts, n int) time.Duration {
	specs := make([]consSpec, members)
	for p := range parts {
		sp := &specs[p%members]
		sp.stream = bus.DefaultStream
		sp.filters = append(sp.filters, bus.PartitionFilters(p, "")...)
	}
	return f.consumeAll(prefix, specs, n)
}

// consSpec is a consumer's stream and filters.
type consSpec struct {
	stream  string
	filters []string
}

// consumeAll reads n messages with one R3 durable pull consumer a spec
// (explicit acks, one ack a message), all at once, each on a connection of
// its own (as each aggregator's partitions are apart from the others':
// 16 consumers delivering at once on one connection of a loaded test
// process lost deliveries, sent again after their ack wait), and returns
// how long it took.
func (f *fleetRig) consumeAll(prefix string, specs []consSpec, n int) time.Duration {
	t := f.t
	ctx := testCtx(t)
	cons := make([]jetstream.Consumer, len(specs))
	for i, sp := range specs {
		_, js := connectJS(t, f.c.URLs())
		eventually(t, "the "+prefix+" consumers", func() bool {
			var err error
			cons[i], err = js.CreateOrUpdateConsumer(ctx, sp.stream, jetstream.ConsumerConfig{
				Durable: fmt.Sprintf("%s-%d", prefix, i), FilterSubjects: sp.filters,
				AckPolicy: jetstream.AckExplicitPolicy, Replicas: 3, DeliverPolicy: jetstream.DeliverAllPolicy,
			})
			return err == nil
		})
	}
	t0 := time.Now()
	var mu sync.Mutex
	// got counts each message once: one delivered again (its ack wait
	// passed: under load a delivery can be lost on its way, and the
	// server sends it again 30 s later) is acknowledged, not counted.
	got, again := 0, 0
	seen := map[[2]uint64]bool{}
	done := make(chan struct{})
	var ccs []jetstream.ConsumeContext
	for i, c := range cons {
		cc, err := c.Consume(func(m jetstream.Msg) {
			_ = m.Ack()
			md, err := m.Metadata()
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			k := [2]uint64{uint64(i), md.Sequence.Stream}
			if seen[k] {
				again++
				return
			}
			seen[k] = true
			if got++; got == n {
				close(done)
			}
		})
		require.NoError(t, err)
		ccs = append(ccs, cc)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the %s consumers read %d of %d messages", prefix, got, n)
	}
	d := time.Since(t0)
	for _, cc := range ccs {
		cc.Stop()
	}
	mu.Lock()
	if again > 0 {
		t.Logf("the %s consumers: %d messages delivered again after their ack wait (in this phase's time and CPU)", prefix, again)
	}
	mu.Unlock()
	// Their last acks reached the servers before their CPU is read.
	eventually(t, "the "+prefix+" consumers' acks", func() bool {
		for _, c := range cons {
			ci, err := c.Info(ctx)
			if err != nil || ci.NumAckPending > 0 || ci.NumPending > 0 {
				return false
			}
		}
		return true
	})
	return d
}

// partStreams makes, beside the events stream, the layout of a stream a
// partition the broker-cost test compares with it: one R3 stream a
// partition (bus.PartStream) with the events stream's settings and no
// transform, capturing its partition's stored subjects
// (bus.PartStreamSubject); the events stream then captures the published,
// five-token subjects only, so that the two do not overlap. The same
// events are published into both (partSubject), so that a plain consumer
// of the one stream, the floor, reads what the partitions' streams hold.
func (f *fleetRig) partStreams(parts int) {
	t := f.t
	ctx := testCtx(t)
	s, err := f.js.Stream(ctx, bus.DefaultStream)
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.Subjects = []string{events.SubjectRoot + ".*.*.*.*"}
	eventually(t, "the events stream's subjects", func() bool {
		_, err := f.js.UpdateStream(ctx, cfg)
		return err == nil
	})
	for p := range parts {
		pc := cfg
		pc.Name, pc.Subjects, pc.SubjectTransform = partStream(p), []string{partStreamSubject(p)}, nil
		pc.Description = fmt.Sprintf("gttsplit CloudEvents, partition %d", p)
		eventually(t, "a partition's stream", func() bool {
			_, err := f.js.CreateOrUpdateStream(ctx, pc)
			return err == nil
		})
	}
}

// partStream is partition p's stream in the layout of a stream a
// partition (partStreams).
func partStream(p int) string { return fmt.Sprintf("%s_P%02d", bus.DefaultStream, p) }

// partStreamSubject is what partition p's stream captures: the stored
// (partitioned) subjects of its events, as the events stream's transform
// names them.
func partStreamSubject(p int) string { return fmt.Sprintf("%s.*.%d.*.*.*", events.SubjectRoot, p) }

// partSubject maps the subject an event is published on to the one it is
// published on in the layout of a stream a partition: its stored subject,
// the run's partition inserted as the events stream's transform does.
func partSubject(parts int) func(string) string {
	return func(subj string) string {
		toks := strings.Split(subj, ".")
		if len(toks) != 5 {
			return subj
		}
		p := bus.PartitionOf(toks[4], parts)
		return strings.Join([]string{toks[0], toks[1], strconv.Itoa(p), toks[2], toks[3], toks[4]}, ".")
	}
}

// plainKV is plainConsume (explicit acks) with what a durable fold of
// these events adds: puts state writes of size bytes, one at a time, into
// an R3 bucket with the state bucket's settings (History 1: each replaces
// its key's revision, as a run's write does; one key a run, of runs) and
// sends progress acknowledgements, both spread evenly over the events.
// (The fold sends a checkpoint's writes as one batch; each put here is
// its own round trip.) It returns how long it took.
func (f *fleetRig) plainKV(name string, n, runs, puts, size, progress int) time.Duration {
	t := f.t
	ctx := testCtx(t)
	var kv jetstream.KeyValue
	eventually(t, "the scratch bucket", func() bool {
		var err error
		kv, err = f.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: name, History: 1, Storage: jetstream.FileStorage, Replicas: 3,
		})
		return err == nil
	})
	val := make([]byte, max(size, 1))
	for i := range val {
		val[i] = 'a' + byte(i%26)
	}
	// share is how many of m spread evenly over n events fall on the i-th
	// (from 1).
	share := func(m, i int) int { return m*i/n - m*(i-1)/n }
	put := 0
	return f.plainPass(name, "the plain consumer with writes", jetstream.AckExplicitPolicy, n, func(m jetstream.Msg, got int) {
		for range share(progress, got) {
			_ = m.InProgress()
		}
		for range share(puts, got) {
			put++
			if _, err := kv.Put(ctx, fmt.Sprintf("run.%d", put%max(runs, 1)), val); err != nil {
				t.Errorf("scratch put: %v", err)
			}
		}
		_ = m.Ack()
	})
}

// bucketInfo is the state bucket's stream's state.
func (f *fleetRig) bucketInfo() jetstream.StreamState {
	var st jetstream.StreamState
	eventually(f.t, "the state bucket's stream", func() bool {
		s, err := f.js.Stream(testCtx(f.t), "KV_"+runtable.Bucket)
		if err != nil {
			return false
		}
		info, err := s.Info(testCtx(f.t))
		if err == nil {
			st = info.State
		}
		return err == nil
	})
	return st
}

// bucketSeq is the state bucket's stream's last sequence: the writes
// (puts, purges, lease renewals) it stored so far.
func (f *fleetRig) bucketSeq() uint64 {
	var seq uint64
	eventually(f.t, "the state bucket's stream", func() bool {
		st, err := f.js.Stream(testCtx(f.t), "KV_"+runtable.Bucket)
		if err == nil {
			seq = st.CachedInfo().State.LastSeq
		}
		return err == nil
	})
	return seq
}

// ackAllEvery is how many messages one acknowledgement of plainConsume's
// ack-all pass covers.
const ackAllEvery = 64

// monitorURL is node nd's monitoring endpoint (the fleet's cluster runs
// with http_port -1), read from its log.
func monitorURL(t *testing.T, nd *natstest.Node) string {
	var url string
	eventually(t, "the monitoring port of "+nd.Name, func() bool {
		b, _ := os.ReadFile(filepath.Join(nd.Dir, "server.log"))
		m := regexp.MustCompile(`Starting http monitor on ([0-9.]+:[0-9]+)`).FindStringSubmatch(string(b))
		if m != nil {
			url = "http://" + m[1]
		}
		return m != nil
	})
	return url
}

// clientMsgs sums, over every node, the messages the clients named name
// sent to the broker (connz in_msgs).
func clientMsgs(t *testing.T, mons []string, name string) int64 {
	var sum int64
	for _, u := range mons {
		resp, err := http.Get(u + "/connz?limit=4096")
		require.NoError(t, err)
		var cz struct {
			Conns []struct {
				Name   string `json:"name"`
				InMsgs int64  `json:"in_msgs"`
			} `json:"connections"`
		}
		err = json.NewDecoder(resp.Body).Decode(&cz)
		resp.Body.Close()
		require.NoError(t, err)
		for _, c := range cz.Conns {
			if c.Name == name {
				sum += c.InMsgs
			}
		}
	}
	return sum
}

// subjectKinds counts, for d, the messages a subscriber on every subject
// of the account receives, by kind of subject (a publish, a delivery to a
// watch's inbox): what an idle fleet exchanges, for the log.
func subjectKinds(t *testing.T, url string, d time.Duration) string {
	nc, err := nats.Connect(url, nats.Timeout(natstest.ConnectTimeout))
	require.NoError(t, err)
	defer nc.Close()
	var mu sync.Mutex
	kinds := map[string]int{}
	kind := func(s string) string {
		switch {
		case strings.HasPrefix(s, "$KV.") || strings.HasPrefix(s, "$JS.API.STREAM.MSG."):
			f := strings.SplitN(s, ".", 4)
			if len(f) > 2 {
				return "kv " + f[1] + "." + f[2]
			}
		case strings.HasPrefix(s, "$JS.API.CONSUMER.MSG.NEXT."):
			return "pull"
		case strings.HasPrefix(s, "$JS.API.CONSUMER.INFO."):
			return "consumer info"
		case strings.HasPrefix(s, "$JS.API.STREAM.INFO."):
			return "stream info"
		case strings.HasPrefix(s, "$JS.ACK."):
			return "ack"
		case strings.HasPrefix(s, "$JS.API."):
			f := strings.SplitN(s, ".", 5)
			return "api " + strings.Join(f[2:min(len(f), 4)], ".")
		}
		return "other " + strings.SplitN(s, ".", 2)[0]
	}
	_, err = nc.Subscribe(">", func(m *nats.Msg) {
		mu.Lock()
		kinds[kind(m.Subject)]++
		mu.Unlock()
	})
	require.NoError(t, err)
	time.Sleep(d)
	mu.Lock()
	defer mu.Unlock()
	var out []string
	for k, n := range kinds {
		out = append(out, fmt.Sprintf("%s %.2f/s", k, float64(n)/d.Seconds()))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// idleNeed is the messages a second an idle fleet of members needs to
// send for its leases' time to live (consumer.lease_ttl, default 15 s):
// every lease renewed every lease_ttl/3 (leaseWrites), every member key
// every lease_ttl/3, a pull a partition every 15 s (an idle partition's
// pull expiry: 4 s while it receives), a consumer's info every 30 s
// (sooner only for a partition that received or whose pull failed), the
// events stream's info every 30 s.
func idleNeed(members, parts int) float64 {
	const ttl, pull, every = 15.0, 15.0, 30.0
	return leaseWrites(parts) + float64(members)/(ttl/3) + float64(parts)/pull + float64(parts)/every + float64(members)/every
}

// leaseWrites is the lease renewals a second parts leases need: each
// twice within its validity (lease_ttl less a fifth), every lease_ttl/3.
func leaseWrites(parts int) float64 { return float64(parts) / (15.0 / 3) }

// leaseBatches is the writes a second the lease renewals of members take
// on a replicated bucket: one atomic batch a member every lease_ttl/3.
func leaseBatches(members int) float64 { return float64(members) / (15.0 / 3) }

// Three aggregators with nothing to fold send the broker only what their
// leases' time to live needs (idleNeed): nothing every second. The test
// counts the messages their connections send (the servers' connz
// in_msgs), the lease renewals and the writes they come in (a
// subscriber on the lease keys' subjects: a member's renewals go in one
// atomic batch) over an idle window and holds them to that rate (counts: a
// loaded machine sends fewer, not more; a renewal sent again after a
// failure is within the margin), and logs the broker's CPU (FIGURE idle)
// with the aggregators idle and once they stopped (the same streams,
// buckets and consumers: the servers' own background).
//
//	go test ./internal/app/aggregator -run TestFleetIdleTrafficIntegration -v
func TestFleetIdleTrafficIntegration(t *testing.T) {
	fleetRuns(t)
	f := startFleet(t, 0)
	var mons []string
	for _, nd := range f.c.Nodes {
		mons = append(mons, monitorURL(t, nd))
	}
	f.startAggs(3)
	f.waitOwned(f.aggs...)
	// Past the start (partitions taken, consumers created, first infos).
	time.Sleep(10 * time.Second)
	kinds := subjectKinds(t, f.c.URLs(), 10*time.Second)
	nc, err := nats.Connect(f.c.URLs(), nats.Timeout(natstest.ConnectTimeout))
	require.NoError(t, err)
	defer nc.Close()
	var leases, batches atomic.Int64
	var seenMu sync.Mutex
	seen := map[string]bool{}
	_, err = nc.Subscribe("$KV."+runtable.Bucket+".lease.>", func(m *nats.Msg) {
		leases.Add(1)
		seenMu.Lock()
		defer seenMu.Unlock()
		if id := m.Header.Get("Nats-Batch-Id"); id == "" || !seen[id] {
			seen[id] = id != ""
			batches.Add(1)
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	window := 30 * time.Second
	m0, l0, b0, c0, t0 := clientMsgs(t, mons, "gttsplit-aggregator"), leases.Load(), batches.Load(), f.c.CPU(), time.Now()
	prof := f.profile("idle")
	time.Sleep(window)
	prof()
	msgs, renewals, writes, cpuIdle, d := clientMsgs(t, mons, "gttsplit-aggregator")-m0, leases.Load()-l0, batches.Load()-b0, f.c.CPU()-c0, time.Since(t0)
	loadIdle := loadavg()
	f.stopAggs(f.aggs...)
	time.Sleep(5 * time.Second)
	c0, t0 = f.c.CPU(), time.Now()
	time.Sleep(window)
	cpuBg, dBg := f.c.CPU()-c0, time.Since(t0)
	perSec := func(c, d time.Duration) float64 { return float64(c.Microseconds()) / 1000 / d.Seconds() }
	rate, renewRate, writeRate := float64(msgs)/d.Seconds(), float64(renewals)/d.Seconds(), float64(writes)/d.Seconds()
	need, renewNeed, writeNeed := idleNeed(3, bus.DefaultPartitions), leaseWrites(bus.DefaultPartitions), leaseBatches(3)
	t.Logf("FIGURE idle: 3 aggregators, nothing to fold, %.0f s: they sent %.1f messages a second (their leases need %.1f), %.2f lease renewals a second (%.2f needed) in %.2f writes (%.2f needed); "+
		"broker CPU %.1f ms/s with them, %.1f ms/s once they stopped (the same streams, buckets and consumers): their traffic %.1f ms/s [load %s / %s]; by subject: %s",
		d.Seconds(), rate, need, renewRate, renewNeed, writeRate, writeNeed, perSec(cpuIdle, d), perSec(cpuBg, dBg), perSec(cpuIdle, d)-perSec(cpuBg, dBg), loadIdle, loadavg(), kinds)
	require.LessOrEqual(t, renewRate, 1.2*renewNeed, "leases renewed more often than their time to live needs")
	// Under load a lease whose turn came while its member's batch was
	// in flight is renewed alone now and then.
	require.LessOrEqual(t, writeRate, 2*writeNeed, "a member's lease renewals not written together")
	require.LessOrEqual(t, rate, 1.25*need, "idle control traffic beyond what the leases need")
}

// ackTap counts, by body, the acknowledgements sent to the consumers of
// stream until the returned function is called (which returns the counts):
// what the broker receives. Its subscription costs the servers a copy of
// each (the fold's figure includes it).
func ackTap(t *testing.T, url, stream string) func() map[string]int {
	return tap(t, url, "$JS.ACK."+stream+".>", func(m *nats.Msg) []string {
		k := string(m.Data)
		if i := strings.IndexByte(k, ' '); i > 0 {
			k = k[:i]
		}
		if k == "" {
			k = "+ACK"
		}
		return []string{k}
	})
}

// bucketTap counts what the aggregators publish into the state bucket
// while they fold, by kind: the key's first part (open, run, sum, pend,
// lease) and whether it is a put or a purge; and the atomic batches
// (a batch counted at its commit) and the single writes they came in.
// The servers' own messages (a key's marker when its time to live runs
// out) are not published by anyone: not counted.
func bucketTap(t *testing.T, url string) func() map[string]int {
	prefix := "$KV." + runtable.Bucket + "."
	return tap(t, url, prefix+">", func(m *nats.Msg) []string {
		k := strings.TrimPrefix(m.Subject, prefix)
		if i := strings.IndexByte(k, '.'); i > 0 {
			k = k[:i]
		}
		if m.Header.Get("KV-Operation") == "PURGE" {
			k += " purge"
		}
		switch {
		case m.Header.Get("Nats-Batch-Id") == "":
			return []string{k, "(single writes)"}
		case m.Header.Get("Nats-Batch-Commit") != "":
			return []string{k, "(atomic batches)"}
		}
		return []string{k}
	})
}

// tap counts the messages published on subject, under the keys kinds
// gives each, until the returned function is called (which returns the
// counts).
func tap(t *testing.T, url, subject string, kinds func(m *nats.Msg) []string) func() map[string]int {
	nc, err := nats.Connect(url, nats.Timeout(natstest.ConnectTimeout))
	require.NoError(t, err)
	var mu sync.Mutex
	n := map[string]int{}
	_, err = nc.Subscribe(subject, func(m *nats.Msg) {
		ks := kinds(m)
		mu.Lock()
		for _, k := range ks {
			n[k]++
		}
		mu.Unlock()
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return func() map[string]int {
		_ = nc.Flush()
		nc.Close()
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// TestFleetBrokerCostIntegration measures, back to back on one 3-node
// cluster of nats-server processes, what the broker's three servers spend
// (their CPU time): 3 aggregators starting on the empty stream and
// stopping (their consumers, buckets and leases made once), publishing the
// runs' events (6 publishers), a plain R3 durable pull consumer reading
// them (the floor), the same acknowledging one message in 64 for all
// before it (what acknowledging in batches would save), one filtered R3
// consumer a partition reading them (the floor of a partitioned stream:
// each consumer walks past the other partitions' messages), 3 aggregators
// folding them (started together on the backlog, until every split is
// written; the state bucket's stored messages, what the aggregators
// published into it by kind, and the acknowledgements the broker received
// counted), the 3 aggregators idle, the same plain
// consumer again, and the plain consumer with what any durable fold adds
// (plainKV): as many state bucket writes and progress acknowledgements as
// the fold's, then one write a run alone. The figures of
// docs/performance.md come from its log (FIGURE broker);
// GTTSPLIT_FLEET_RUNS=<n> runs n runs instead of 1,000 for a quicker look.
// GTTSPLIT_FLEET_LAYOUTS=1 also measures the other layouts' floors (FIGURE
// layouts): the events stream then captures the published subjects only,
// beside one stream a partition holding the same events (partStreams),
// published there after the one stream; 16 consumers, each unfiltered on
// its partition's stream, after the filtered ones; and 3 consumers, one a
// member, each filtered on a third of the partitions of the one stream.
//
//	GTTSPLIT_FLEET=full go test ./internal/app/aggregator -run TestFleetBrokerCostIntegration -v
//	GTTSPLIT_FLEET=full GTTSPLIT_FLEET_LAYOUTS=1 go test ./internal/app/aggregator -run TestFleetBrokerCostIntegration -v
func TestFleetBrokerCostIntegration(t *testing.T) {
	if os.Getenv("GTTSPLIT_FLEET") != "full" {
		t.Skip("a measurement: its figures are logged, not held to a bound (GTTSPLIT_FLEET=full runs it, as the command above does)")
	}
	n := fleetRuns(t)
	if v, err := strconv.Atoi(os.Getenv("GTTSPLIT_FLEET_RUNS")); err == nil && v > 0 {
		n = v // a quicker look
	}
	f := startFleet(t, n)
	parts := bus.DefaultPartitions
	layouts := os.Getenv("GTTSPLIT_FLEET_LAYOUTS") != ""
	if layouts {
		f.partStreams(parts)
	}
	nEvents := 0
	for _, r := range f.runs {
		nEvents += len(r.Wires)
	}
	const idleFor = 10 * time.Second
	cpu := f.c.CPU
	load := map[string]string{}

	c0 := cpu()
	time.Sleep(idleFor)
	bg := cpu() - c0
	load["background"] = loadavg()

	// The fleet's first start: its consumers and buckets are made.
	c0 = cpu()
	f.startAggs(3)
	f.waitOwned(f.aggs...)
	f.stopAggs(f.aggs...)
	first := cpu() - c0
	load["first"] = loadavg()

	c0, t0 := cpu(), time.Now()
	f.publish(6, nil)
	pub, pubT := cpu()-c0, time.Since(t0)
	load["publish"] = loadavg()

	// With GTTSPLIT_FLEET_LAYOUTS, the same events into the partitions'
	// streams.
	var pubP, pubPT, partsCPU, partsT, membersCPU, membersT time.Duration
	if layouts {
		bytes := f.pubBytes
		f.subject = partSubject(parts)
		c0, t0 = cpu(), time.Now()
		f.publish(6, nil)
		pubP, pubPT = cpu()-c0, time.Since(t0)
		f.subject, f.pubBytes = nil, bytes
		load["publishparts"] = loadavg()
	}

	c0 = cpu()
	plainT := f.plainConsume("plain1", nEvents)
	plain1 := cpu() - c0
	load["plain1"] = loadavg()

	c0 = cpu()
	allT := f.plainConsume("plainall", nEvents, true)
	plainAll := cpu() - c0
	load["plainall"] = loadavg()

	c0 = cpu()
	stopProf := f.profile("filtered")
	filtT := f.filteredConsume("filtered1", bus.DefaultPartitions, nEvents)
	filt := cpu() - c0
	stopProf()
	load["filtered"] = loadavg()

	// With GTTSPLIT_FLEET_LAYOUTS, the floors of the other layouts: a
	// stream a partition, a consumer a member.
	if layouts {
		c0 = cpu()
		stopProf = f.profile("parts")
		partsT = f.ownConsume("parts1", parts, nEvents)
		partsCPU = cpu() - c0
		stopProf()
		load["parts"] = loadavg()

		c0 = cpu()
		stopProf = f.profile("members")
		membersT = f.memberConsume("members1", 3, parts, nEvents)
		membersCPU = cpu() - c0
		stopProf()
		load["members"] = loadavg()
	}

	s0 := f.bucketSeq()
	c0, t0 = cpu(), time.Now()
	stopProf = f.profile("fold")
	stopTap := ackTap(t, f.c.URLs(), bus.DefaultStream)
	stopBucketTap := bucketTap(t, f.c.URLs())
	f.startAggs(3)
	f.aggs = f.aggs[3:] // the folding ones (agg3-agg5)
	done := f.waitAll(10 * time.Minute)
	fold, foldT := cpu()-c0, done.Sub(t0)
	stopProf()
	acks := stopTap()
	kinds := stopBucketTap()
	load["fold"] = loadavg()
	bucketWrites := f.bucketSeq() - s0
	redelivered := f.metric("gttsplit_events_redelivered_total", f.aggs...)
	progress := f.metric("gttsplit_events_progress_acks_total", f.aggs...)
	writes := f.metric("gttsplit_state_writes_total", f.aggs...)
	causes := f.writeCauses(n, f.aggs...)

	// Every split written: the aggregators' control traffic alone, once
	// their last checkpoints are behind them.
	time.Sleep(5 * time.Second)
	c0 = cpu()
	stopProf = f.profile("idle")
	time.Sleep(idleFor)
	idle := cpu() - c0
	stopProf()
	load["idle"] = loadavg()

	c0 = cpu()
	stopProf = f.profile("plain2")
	plain2T := f.plainConsume("plain2", nEvents)
	plain2 := cpu() - c0
	stopProf()
	load["plain2"] = loadavg()

	// A plain consumer doing what any durable fold must beside reading:
	// the fold's state bucket writes (as many as it stored, of the size
	// its bucket's messages have on average) and its progress
	// acknowledgements.
	avg := 0
	if info := f.bucketInfo(); info.Msgs > 0 {
		avg = int(info.Bytes / info.Msgs)
	}
	c0 = cpu()
	stopProf = f.profile("plainkv")
	plainKVT := f.plainKV("plainkv", nEvents, n, int(bucketWrites), avg, int(progress))
	plainKVCPU := cpu() - c0
	stopProf()
	load["plainkv"] = loadavg()
	// The least of it: one write a run (its result), no progress
	// acknowledgement.
	c0 = cpu()
	plainOneT := f.plainKV("plainone", nEvents, n, n, avg, 0)
	plainOne := cpu() - c0
	load["plainone"] = loadavg()

	f.stopAggs(f.aggs...)
	f.checkOnce()

	perRun := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	perSec := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / idleFor.Seconds() }
	lo, hi := min(plain1, plain2), max(plain1, plain2)
	t.Logf("FIGURE broker: %d runs, %d events (%.1f MB); broker CPU (3 servers): background %.1f ms/s [load %s]; "+
		"the fleet's first start and stop (16 consumers, buckets, leases made) %.0f ms [load %s]; "+
		"publish %.2f ms a run (%.1f s) [load %s]; plain R3 pull consumer %.2f / %.2f ms a run (%.1f / %.1f s) [load %s / %s]; "+
		"the same acknowledging every %dth message for all before it (ack policy all) %.2f ms a run (%.1f s) [load %s]; "+
		"%d filtered R3 pull consumers (a partition each) %.2f ms a run (%.1f s) [load %s]; "+
		"fold by 3 aggregators %.2f ms a run (%.1f s) [load %s] = %.2f–%.2f× the plain consumer, %.2f× the filtered ones; "+
		"3 aggregators idle %.1f ms/s (all the servers' CPU: the raft groups of the fleet's and of this test's consumers included; TestFleetIdleAfterFoldIntegration measures the aggregators' part) [load %s]; redelivered %.0f (%.2f %%), progress acks %.0f (%.2f an event), %.1f run states written a run (%s), "+
		"%.1f messages stored in the state bucket a run (leases' renewals included; published a run by kind: %s); acknowledgements the broker received while they folded %.2f a run (%s)",
		n, nEvents, float64(f.pubBytes)/1e6, perSec(bg), load["background"], float64(first.Microseconds())/1000, load["first"],
		perRun(pub), pubT.Seconds(), load["publish"], perRun(plain1), perRun(plain2), plainT.Seconds(), plain2T.Seconds(), load["plain1"], load["plain2"],
		ackAllEvery, perRun(plainAll), allT.Seconds(), load["plainall"],
		bus.DefaultPartitions, perRun(filt), filtT.Seconds(), load["filtered"],
		perRun(fold), foldT.Seconds(), load["fold"], float64(fold)/float64(hi), float64(fold)/float64(lo), float64(fold)/float64(filt),
		perSec(idle), load["idle"], redelivered, 100*redelivered/float64(nEvents), progress, progress/float64(nEvents), writes/float64(n), causes,
		float64(bucketWrites)/float64(n), ackKinds(kinds, n), float64(total(acks))/float64(n), ackKinds(acks, n))
	// A line of its own: scripts/bench reads the line above.
	t.Logf("FIGURE floor: the plain consumer with as many state bucket writes (%.1f a run, %d bytes each) and progress acknowledgements (%.1f a run) as the fold's %.2f ms a run (%.1f s) [load %s] = %.2f–%.2f× the plain consumer; the fold %.2f ms a run = %.2f× that; "+
		"the plain consumer with one write a run and no progress acknowledgement %.2f ms a run (%.1f s) [load %s] = %.2f–%.2f× the plain consumer",
		float64(bucketWrites)/float64(n), avg, progress/float64(n), perRun(plainKVCPU), plainKVT.Seconds(), load["plainkv"], float64(plainKVCPU)/float64(hi), float64(plainKVCPU)/float64(lo),
		perRun(fold), float64(fold)/float64(plainKVCPU),
		perRun(plainOne), plainOneT.Seconds(), load["plainone"], float64(plainOne)/float64(hi), float64(plainOne)/float64(lo))
	if !layouts {
		return
	}
	t.Logf("FIGURE layouts: publish into the one events stream %.2f ms a run (%.1f s) [load %s], "+
		"the same events into %d streams, a partition each %.2f ms a run (%.1f s) [load %s] = %.2f× the one stream; "+
		"%d consumers, each unfiltered on its partition's own stream %.2f ms a run (%.1f s) [load %s] = %.2f–%.2f× the plain consumer, %.2f× the %d filtered ones; "+
		"3 consumers, one a member, each filtered on a third of the partitions of the one stream %.2f ms a run (%.1f s) [load %s] = %.2f–%.2f× the plain consumer, %.2f× the %d filtered ones; "+
		"the fold = %.2f× the unfiltered consumers of the partitions' streams, %.2f× the members' consumers",
		perRun(pub), pubT.Seconds(), load["publish"],
		parts, perRun(pubP), pubPT.Seconds(), load["publishparts"], float64(pubP)/float64(pub),
		parts, perRun(partsCPU), partsT.Seconds(), load["parts"], float64(partsCPU)/float64(hi), float64(partsCPU)/float64(lo), float64(partsCPU)/float64(filt), parts,
		perRun(membersCPU), membersT.Seconds(), load["members"], float64(membersCPU)/float64(hi), float64(membersCPU)/float64(lo), float64(membersCPU)/float64(filt), parts,
		float64(fold)/float64(partsCPU), float64(fold)/float64(membersCPU))
}

func total(m map[string]int) int {
	s := 0
	for _, v := range m {
		s += v
	}
	return s
}

// ackKinds says the acknowledgements a run by kind.
func ackKinds(m map[string]int, runs int) string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s %.2f", k, float64(v)/float64(runs)))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
