package aggregator

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/fleet"
	"github.com/gttsplit/gttsplit/internal/runtable"
)

// leaders follows the leader-elected advisories of a cluster: the last
// leader named for each stream ("GTTSPLIT") and consumer ("GTTSPLIT.name").
type leaders struct {
	mu sync.Mutex
	by map[string]string
}

func watchLeaders(t *testing.T, nc *nats.Conn) *leaders {
	t.Helper()
	l := &leaders{by: map[string]string{}}
	for _, prefix := range []string{"$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.", "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED."} {
		sub, err := nc.Subscribe(prefix+">", func(m *nats.Msg) {
			var a struct {
				Leader string `json:"leader"`
			}
			if json.Unmarshal(m.Data, &a) == nil {
				l.mu.Lock()
				l.by[strings.TrimPrefix(m.Subject, prefix)] = a.Leader
				l.mu.Unlock()
			}
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	require.NoError(t, nc.Flush())
	return l
}

func (l *leaders) of(group string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.by[group]
}

func (l *leaders) forget(group string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.by, group)
}

// leadAll makes node the leader of the stream and of every durable
// consumer of it: a step-down request with node as the preferred
// placement, until the group's leader-elected advisory (or its info)
// names node. It returns the number of groups node leads.
func leadAll(t *testing.T, nc *nats.Conn, js jetstream.JetStream, adv *leaders, stream, node string) int {
	t.Helper()
	ctx := testCtx(t)
	body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": node}})
	moved := 0
	move := func(group, subject string, info func() string) {
		for try := 0; info() != node; try++ {
			require.Less(t, try, 10, "%s not led by %s", group, node)
			// One step-down at a time, then its election waited for:
			// another sent meanwhile would move the leader on again.
			adv.forget(group)
			m, err := nc.Request(subject, body, 5*time.Second)
			if err == nil && strings.Contains(string(m.Data), "is already leader") {
				break
			}
			if err == nil && !strings.Contains(string(m.Data), `"success":true`) {
				t.Logf("%s step-down: %s", group, m.Data)
			}
			end := time.Now().Add(15 * time.Second)
			for time.Now().Before(end) && adv.of(group) == "" {
				time.Sleep(50 * time.Millisecond)
			}
			if adv.of(group) == node {
				break
			}
		}
		moved++
	}
	move(stream, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, func() string {
		s, err := js.Stream(ctx, stream)
		if err != nil || s.CachedInfo().Cluster == nil {
			return ""
		}
		return s.CachedInfo().Cluster.Leader
	})
	s, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	var names []string // the durable ones: a watcher's ordered consumer has one server, no leader to move
	for ci := range s.ListConsumers(ctx).Info() {
		if ci.Config.Durable != "" && ci.Cluster != nil && len(ci.Cluster.Replicas) > 0 {
			names = append(names, ci.Name)
		}
	}
	for _, name := range names {
		move(stream+"."+name, "$JS.API.CONSUMER.LEADER.STEPDOWN."+stream+"."+name, func() string {
			c, err := s.Consumer(ctx, name)
			if err != nil || c.CachedInfo().Cluster == nil {
				return ""
			}
			return c.CachedInfo().Cluster.Leader
		})
	}
	return moved
}

// reactBound is how soon the splits must come again once NATS has its
// leaders back (the 5 s, for the part the aggregators control:
// pulling again, the state writes' back-off, a run's last events, its
// close).
const reactBound = 5 * time.Second

// Losing the node that leads everything: the events stream, both buckets
// (the runs' states with the leases, the members) and every partition
// consumer are moved to one node (a step-down with it as the preferred
// placement), which is SIGKILLed half-way through a publication by 6
// publishers. Every run is written once. The gap between the last split
// before the kill and the first after it is the survivors' raft elections
// (nats-server's election timeout: 4 to 9 s from the last word of the
// leader, fixed in the server) plus the aggregators' reaction, which must
// stay under reactBound: the splits come again within it of the last
// election, and a pull that found a partition consumer without a leader
// is sent again at once (the client alone would wait two heartbeats).
func TestFleetLeaderLossIntegration(t *testing.T) {
	n := 2 * fleetRuns(t)
	f := startFleet(t, n)
	f.sequential = true // splits all along: the gap is the outage's
	f.startAggs(3)
	f.waitOwned(f.aggs...)
	nc, js := connectJS(t, f.c.URLs())
	adv := watchLeaders(t, nc)
	victim := f.c.Nodes[0]
	moved := 0
	for _, stream := range []string{bus.DefaultStream, "KV_" + runtable.Bucket, "KV_" + fleet.MembersBucket} {
		moved += leadAll(t, nc, js, adv, stream, victim.Name)
	}
	stop := make(chan struct{})
	go f.watchSplits(stop)
	load := loadavg()
	f.publish(6, func() {
		victim.Kill()
		f.mu.Lock()
		f.killed = time.Now()
		f.mu.Unlock()
	})
	last := f.waitAll(5 * time.Minute)
	close(stop)
	o := f.outage(last)
	load += " → " + loadavg()
	el := electedAfter(t, f, victim.Name, o.killed)
	repulls := f.metric("gttsplit_partition_leaderless_pulls_total", f.aggs...)
	f.stopAggs(f.aggs...)
	if d := os.Getenv("GTTSPLIT_FLEET_KEEP"); d != "" {
		_ = os.MkdirAll(d, 0o755)
		_ = exec.Command("cp", "-r", f.logDir, d).Run()
		for _, nd := range f.c.Nodes {
			_ = exec.Command("cp", filepath.Join(nd.Dir, "server.log"), filepath.Join(d, nd.Name+".log")).Run()
		}
		_ = os.WriteFile(filepath.Join(d, "killed"), []byte(o.killed.Format(time.RFC3339Nano)), 0o644)
	}
	f.checkOnce()
	t.Logf("FIGURE leader loss: %d runs, node %s leading the events stream, both buckets and %d partition consumers SIGKILLed: %s; "+
		"%.0f pulls found a consumer without a leader; load %s", n, victim.Name, moved-3, o.say(el), repulls, load)
	require.Equal(t, moved, el.groups, "every group the victim led elected a new leader (read from the survivors' logs)")
	o.check(t, el)
	// The partitions pulled again while their consumers had no leader
	// (the client alone would have waited for two missed heartbeats).
	require.Positive(t, repulls, "no pull was sent again to a consumer without a leader")
}

// outage is what the splits did around a node's kill.
type outage struct {
	killed, resumed time.Time
	// gap is the largest gap between two splits that ends after the
	// kill: from before to after (the splits of the runs the aggregators
	// were closing when the node died may come right after the kill).
	before, after time.Time
	gap           time.Duration
	// tail is the time from the last publish to the last split.
	tail time.Duration
}

// outage reads the splits seen around the kill; last is when every run
// had its split.
func (f *fleetRig) outage(last time.Time) outage {
	t := f.t
	f.mu.Lock()
	var at []time.Time
	for _, ts := range f.seen {
		at = append(at, ts)
	}
	o := outage{killed: f.killed, resumed: f.resumed, tail: last.Sub(f.lastPub)}
	f.mu.Unlock()
	require.False(t, o.killed.IsZero())
	require.False(t, o.resumed.IsZero(), "the events stream took events again")
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	require.True(t, at[0].Before(o.killed), "splits came before the kill (the gap spans it)")
	for i := 1; i < len(at); i++ {
		if d := at[i].Sub(at[i-1]); at[i].After(o.killed) && d > o.gap {
			o.gap, o.before, o.after = d, at[i-1], at[i]
		}
	}
	require.False(t, o.after.IsZero(), "splits came after the kill")
	return o
}

func (o outage) say(el elections) string {
	secs := func(d time.Duration) float64 { return d.Seconds() }
	return fmt.Sprintf("no split for %.1f s, until %.1f s after the kill; elected after the kill: %s; "+
		"publishes acknowledged again %.1f s after it; the first split %.1f s after the events stream and the state bucket had leaders again; "+
		"last split %.1f s after the last publish",
		secs(o.gap), secs(o.after.Sub(o.killed)), el, secs(o.resumed.Sub(o.killed)),
		secs(o.after.Sub(o.killed)-max(el.stream, el.bucket)), secs(o.tail))
}

// check holds the splits to the elections: they come again within
// reactBound of NATS having every leader a split needs back (the events
// stream's, the state bucket's, the partition consumers'): the raft
// elections are the server's, what follows them is ours.
func (o outage) check(t *testing.T, el elections) {
	t.Helper()
	require.Less(t, o.after.Sub(o.killed), el.needed()+reactBound, "the splits came late after the elections")
	// A stall detector (a shared 2-core machine): the publication goes
	// on long after the elections.
	require.Less(t, o.tail, 25*time.Second, "the splits stalled")
}

// elections are the survivors' elections after a kill, read from their
// logs: how many groups elected a leader, and the time after the kill of
// the events stream's, the state bucket's, the members bucket's and the
// last partition consumer's election.
type elections struct {
	groups                            int
	stream, bucket, members, consumer time.Duration
}

// needed is when the last of the groups a split needs had a leader
// again: the events stream, the state bucket, the partition consumers.
func (e elections) needed() time.Duration { return max(e.stream, e.bucket, e.consumer) }

func (e elections) String() string {
	return fmt.Sprintf("%d groups: the events stream %.1f s, the state bucket %.1f s, the members bucket %.1f s, the last partition consumer %.1f s",
		e.groups, e.stream.Seconds(), e.bucket.Seconds(), e.members.Seconds(), e.consumer.Seconds())
}

// electedAfter reads the surviving nodes' logs for the leaders they
// elected after the kill.
func electedAfter(t *testing.T, f *fleetRig, victim string, killed time.Time) elections {
	t.Helper()
	re := regexp.MustCompile(`^\[\d+\] (\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+) \[INF\] JetStream cluster new (stream|consumer) leader for '[^>]*> ([^']*)'`)
	var e elections
	seen := map[string]bool{}
	for _, nd := range f.c.Nodes {
		if nd.Name == victim {
			continue
		}
		b, err := os.ReadFile(filepath.Join(nd.Dir, "server.log"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			m := re.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			at, err := time.ParseInLocation("2006/01/02 15:04:05.000000", m[1], time.Local)
			if err != nil || at.Before(killed) {
				continue
			}
			d := at.Sub(killed)
			if !seen[m[3]] {
				seen[m[3]] = true
				e.groups++
			}
			switch {
			case m[2] == "consumer":
				e.consumer = max(e.consumer, d)
			case m[3] == bus.DefaultStream:
				e.stream = max(e.stream, d)
			case m[3] == "KV_"+runtable.Bucket:
				e.bucket = max(e.bucket, d)
			case m[3] == "KV_"+fleet.MembersBucket:
				e.members = max(e.members, d)
			}
		}
	}
	return e
}

// loadavg is /proc/loadavg's first three figures.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return fmt.Sprintf("%s %s %s", f[0], f[1], f[2])
}
