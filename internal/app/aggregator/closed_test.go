package aggregator

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// lateLine is a log-lines event of fx's run with one line the run never
// had.
func lateLine(t testing.TB, fx fixture) events.Wire {
	t.Helper()
	for _, d := range fx.Decoded {
		if d.Lines != nil {
			l := d.Lines[0]
			l.Seq += 1 << 40
			ev, err := events.NewLogLines(fx.Origin, []split.Line{l})
			require.NoError(t, err)
			w, err := events.ToWire(ev)
			require.NoError(t, err)
			return w
		}
	}
	t.Fatalf("%s has no log lines", fx.Path)
	return events.Wire{}
}

// TestServeCompactsClosedRunIntegration: `serve` with store.compact_after
// 1ms compacts a run as soon as it closed (its open key goes, and its
// pending marker once the JSON sink settled the split); /runs and /runs/{id} still answer
// from the compact record, and a new event for the run, which closed
// complete, is dead-lettered (reason final) with no second split.
func TestServeCompactsClosedRunIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	cfg := testConfig(t, b.url)
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Store.CompactAfter = time.Millisecond
	s := startServe(t, cfg, ServeOptions{})
	id := fx.Origin.RunID

	b.publish(t, fx.Wires...)
	eventually(t, "the split", func() bool { n, _ := s.closes.count(); return n == 1 })
	eventually(t, "the compaction", func() bool {
		return metricValue(httpGet(t, s.http, "/metrics", http.StatusOK), "gttsplit_runs_compacted_total") == "1"
	})
	require.True(t, b.state(t, id).Compact())
	kv, err := b.js.KeyValue(testCtx(t), runtable.Bucket)
	require.NoError(t, err)
	eventually(t, "the open key purged", func() bool {
		_, err := kv.Get(testCtx(t), "open."+fmt.Sprint(bus.PartitionOf(id, cfg.Consumer.Stream.Partitions))+".run."+id)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	// The compaction does not wait for the sinks (the compact record keeps
	// the split for a re-send); the pending marker goes once the JSON sink
	// settled the split.
	eventually(t, "settled by the JSON sink", func() bool { return !b.state(t, id).SinksPending })
	requireSameReport(t, fx.Want, httpGet(t, s.http, "/runs/"+id, http.StatusOK))
	var list []runtable.RunSummary
	require.NoError(t, json.Unmarshal([]byte(httpGet(t, s.http, "/runs", http.StatusOK)), &list))
	require.Len(t, list, 1)
	require.Equal(t, "closed", list[0].State)

	b.publish(t, lateLine(t, fx))
	eventually(t, "the late event dead-lettered", func() bool {
		return metricValue(httpGet(t, s.http, "/metrics", http.StatusOK), `gttsplit_events_dead_lettered_total{reason="final"}`) == "1"
	})
	require.Equal(t, "0", metricValue(httpGet(t, s.http, "/metrics", http.StatusOK), "gttsplit_runs_open"))
	require.NoError(t, s.stop(t))
	n, _ := s.closes.count()
	require.Equal(t, 1, n, "one split")
	require.Len(t, sinkLines(t, cfg.Sinks.JSON.Dir), 1, "the sink got one split")
}
