package aggregator

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
)

// clusterRuns is how many runs the cluster test publishes.
const clusterRuns = 200

// On a real 3-node cluster with nats.replicas=3, three aggregator
// processes and four publishers: a node is shut down and an aggregator
// SIGKILLed mid-way. Every run is folded exactly once: one split event on
// the stream, one split line in the sinks (or an identical copy re-sent
// by the next owner of a run whose delivery the killed aggregator had not
// recorded), complete, equal to the replay of its events; the time from the last publish to the last
// split is measured and printed.
func TestClusterFleetIntegration(t *testing.T) {
	skipShort(t)
	if raceEnabled && os.Getenv("GTTSPLIT_CLUSTER_RACE") == "" {
		t.Skip("3 nodes and 3 aggregators over 200 runs take minutes under -race on 2 cores; GTTSPLIT_CLUSTER_RACE=1 runs it")
	}
	bin := buildAggregator(t)
	c := natstest.StartCluster(t, 3)
	url := c.URLs()
	fx := loadFixture(t, fixture4B)
	runs := genRuns(t, clusterRuns, fx)
	ctx := testCtx(t)

	_, js := connectJS(t, url)
	sc := bus.DefaultStreamConfig()
	sc.Replicas = 3
	// (A cluster under load may call a peer offline for a moment: "no
	// suitable peers for placement". Serve retries the same way.)
	eventually(t, "the R3 events stream", func() bool {
		_, err := bus.EnsureStream(ctx, js, sc, testLogger(t))
		return err == nil
	})

	logDir := t.TempDir()
	type agg struct {
		c    *child
		json string
	}
	var aggs []agg
	start := func(name string) agg {
		dir := t.TempDir()
		ch := startChildEnv(t, bin, url, dir, logDir, name, "GTTSPLIT_NATS_REPLICAS=3", "GTTSPLIT_CONSUMER_ACK_WAIT=3s")
		return agg{c: ch, json: dir}
	}
	for i := 0; i < 3; i++ {
		aggs = append(aggs, start(fmt.Sprintf("agg%d", i)))
	}
	// Up when every aggregator says it is ready and together they own
	// every partition (the aggregators' own word: a listing of a
	// replicated stream's consumers may stay short for minutes after they
	// were created, though each answers by itself).
	var addrs []string
	for i := range aggs {
		addrs = append(addrs, childHTTP(t, filepath.Join(logDir, fmt.Sprintf("agg%d.stderr", i))))
	}
	eventually(t, "every aggregator ready, every partition owned", func() bool {
		owned := 0
		for _, addr := range addrs {
			ready, _ := tryGet(addr, "/readyz")
			st, page := tryGet(addr, "/metrics")
			if ready != http.StatusOK || st != http.StatusOK {
				return false
			}
			n, _ := strconv.Atoi(metricValue(page, "gttsplit_partitions_owned"))
			owned += n
		}
		return owned == bus.DefaultPartitions
	})

	// Four publishers, each with its own connection, publish a quarter of
	// the runs' events, interleaved; a failed publish (a node going away)
	// is retried with the same message id.
	const pubs = 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lastPub time.Time
	var published int
	half := make(chan struct{})
	var halfOnce sync.Once
	total := 0
	for _, r := range runs {
		total += len(r.Wires)
	}
	for p := 0; p < pubs; p++ {
		var mine []genRun
		for i := p; i < len(runs); i += pubs {
			mine = append(mine, runs[i])
		}
		ws := interleave(mine)
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
			if err != nil {
				t.Error(err)
				return
			}
			defer nc.Close()
			pjs, _ := jetstream.New(nc)
			for _, w := range ws {
				for try := 0; ; try++ {
					m := nats.NewMsg(w.Subject)
					m.Data = w.Data
					m.Header.Set(jetstream.MsgIDHeader, w.ID)
					pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					_, err := pjs.PublishMsg(pctx, m)
					cancel()
					if err == nil {
						break
					}
					if try > 100 {
						t.Errorf("publish %s: %v", w.ID, err)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				mu.Lock()
				published++
				lastPub = time.Now()
				if published >= total/2 {
					halfOnce.Do(func() { close(half) })
				}
				mu.Unlock()
			}
		}()
	}
	<-half
	// Mid-way: a node goes, and an aggregator is killed. The node is the
	// one leading the events stream, the worst case: the partitioned
	// stream's source goes with it (see bus.ReattachStalledSource).
	gone := c.Servers[2]
	if si, err := js.Stream(ctx, bus.DefaultStream); err == nil && si.CachedInfo().Cluster != nil {
		for _, s := range c.Servers {
			if s.Name() == si.CachedInfo().Cluster.Leader {
				gone = s
			}
		}
	}
	natstest.Shutdown(gone)
	require.NoError(t, aggs[1].c.cmd.Process.Signal(syscall.SIGKILL))
	_ = aggs[1].c.wait(t)
	t.Logf("node %s (leading the events stream) shut down, aggregator agg1 killed", gone.Name())
	wg.Wait()
	require.False(t, t.Failed())

	// Every run's split, from whichever aggregator wrote it.
	lines := func() map[string][]sinkLine {
		out := map[string][]sinkLine{}
		for _, a := range aggs {
			if _, err := os.Stat(filepath.Join(a.json, "splits.jsonl")); err != nil {
				continue
			}
			for _, l := range sinkLines(t, a.json) {
				l.dir = a.json
				out[l.id] = append(out[l.id], l)
			}
		}
		return out
	}
	var lastSplit time.Time
	deadline := time.Now().Add(90 * time.Second)
	for {
		got := lines()
		if len(got) == len(runs) {
			lastSplit = time.Now()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d runs have a split", len(got), len(runs))
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	lag := lastSplit.Sub(lastPub)
	mu.Unlock()
	t.Logf("FIGURE last split %.1f s after the last publish (%d runs, %d events, 3 nodes R3, 3 aggregators, one node and one aggregator lost)",
		lag.Seconds(), len(runs), total)
	fmt.Printf("cluster: last split %.1f s after the last publish\n", lag.Seconds())
	dropped := 0
	for _, n := range []string{"agg0", "agg1", "agg2"} {
		b, _ := os.ReadFile(filepath.Join(logDir, n+".stderr"))
		dropped += strings.Count(string(b), "slow consumer")
	}
	t.Logf("%d slow-consumer drops", dropped)

	// Settle, then check: one split per run, complete, equal to replay.
	time.Sleep(2 * time.Second)
	got := lines()
	docs := map[string][]byte{}
	for _, a := range aggs {
		for id, d := range sinkDocs(t, a.json) {
			docs[id] = d
		}
	}
	// The killed aggregator may have appended a split to its own
	// splits.jsonl and died before it recorded the delivery: the run's
	// next owner then writes the same split again into its sink (local
	// sinks are at least once across a SIGKILL). Such a copy must be
	// byte-identical, and one of the copies must be the killed one's; any
	// other second line is a run folded twice.
	var twice []string
	resent := 0
	for _, r := range runs {
		ls := got[r.Origin.RunID]
		require.NotEmpty(t, ls, r.Origin.RunID)
		if len(ls) != 1 {
			same, fromKilled := true, false
			for _, l := range ls {
				same = same && string(l.raw) == string(ls[0].raw)
				fromKilled = fromKilled || l.dir == aggs[1].json
			}
			if !same || !fromKilled || len(ls) > 2 {
				twice = append(twice, r.Origin.RunID)
			} else {
				resent++
			}
		}
		for _, l := range ls {
			require.Contains(t, string(l.raw), `"complete":true`, "run %s: no split marked complete early, none incomplete", r.Origin.RunID)
		}
		require.Equal(t, string(compact(t, replayJSON(t, r.Wires))), string(compact(t, docs[r.Origin.RunID])), r.Origin.RunID)
	}
	sort.Strings(twice)
	require.Empty(t, twice, "runs written more than once")
	t.Logf("%d runs re-sent into a local sink by their next owner after the SIGKILL (identical copies)", resent)
	// The split events on the stream carry the run's split id as their
	// message id: a re-send is deduplicated, so the stream has one a run.
	si, err := js.Stream(ctx, bus.DefaultStream)
	require.NoError(t, err)
	info, err := si.Info(ctx, jetstream.WithSubjectFilter("gttsplit.split.>"))
	require.NoError(t, err)
	require.Len(t, info.State.Subjects, len(runs), "one split subject a run")
	for subj, n := range info.State.Subjects {
		require.EqualValues(t, 1, n, "split events on %s", subj)
	}
	for i, a := range aggs {
		if i == 1 {
			continue
		}
		require.NoError(t, a.c.cmd.Process.Signal(syscall.SIGTERM))
		require.NoError(t, a.c.wait(t))
	}
}
