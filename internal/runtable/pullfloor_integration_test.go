package runtable_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// A partition's pull that runs ahead of the partition furthest behind in
// the events stream waits for it (with the broker in this process, stood
// in for here with a span of one event), and says so: while it waits
// gttsplit_pull_floor_waiting counts it, gttsplit_pull_floor_waits_total
// counted it, and /readyz answers 200 with a line saying the table
// catches up in stream order (a floor wait is not unready). Once the
// partition behind moves on, the wait ends, the backlog folds, every run
// closes, /readyz says "ready" alone and the seconds waited are counted.
// The partition behind is held by a gate in front of its pulls once its
// consumer's place is known with events still behind it, and the one
// ahead pulls only then: what is checked does not depend on timing.
func TestPullFloorWaitSaidInMetricsAndReadyzIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	const group = "floorsaid"
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)

	// Until the backlog is published no pull of the group goes; then the
	// partition behind pulls once (a batch, events behind it) and is held
	// until released; the one ahead pulls once the one behind was placed.
	var published, placed, release atomic.Bool
	var behindP, aheadP atomic.Int64
	undo := runtable.GatePulls(func(g string, p int, seq, behind uint64) bool {
		switch {
		case g != group:
			return false
		case !published.Load():
			return true
		case int64(p) == behindP.Load():
			if seq > 0 && behind > 0 {
				placed.Store(true)
			}
			return placed.Load() && !release.Load()
		case int64(p) == aheadP.Load():
			return !placed.Load()
		}
		return false
	})
	t.Cleanup(undo)

	addr := make(chan string, 1)
	r := startTable(t, b.URL, group, tableConfig{http: func(a string) { addr <- a }})
	r.waitOwns(r.parts)
	base := "http://" + <-addr
	r.tbl.SetPullFloor(1, time.Hour)

	// Two partitions' runs, more events each than a pull brings: the
	// first partition's all before the second's in the stream.
	byPart := map[int][]rt.Run{}
	for _, g := range rt.Gen(t, 64, fx) {
		p := bus.PartitionOf(g.Origin.RunID, r.parts)
		byPart[p] = append(byPart[p], g)
	}
	var order []int
	for p := range r.parts {
		if n := len(byPart[p]); n > 0 && n*len(fx.Decoded) > runtable.PullBatch && len(order) < 2 {
			order = append(order, p)
		}
	}
	require.Len(t, order, 2, "two partitions with more events than a pull brings")
	behindP.Store(int64(order[0]))
	aheadP.Store(int64(order[1]))
	var wires []events.Wire
	runs := 0
	for _, p := range order {
		for _, g := range byPart[p] {
			wires = append(wires, g.Wires...)
			runs++
		}
	}
	b.Publish(t, wires...)
	published.Store(true)

	// The partition ahead waits for the one behind, and that is said.
	waiting := func() float64 { return counter(t, r.m, "gttsplit_pull_floor_waiting") }
	rt.Eventually(t, "gttsplit_pull_floor_waiting says a pull waits", func() bool { return waiting() == 1 })
	require.GreaterOrEqual(t, counter(t, r.m, "gttsplit_pull_floor_waits_total"), 1.0)
	rt.Eventually(t, "/readyz says ready, catching up in stream order", func() bool {
		code, body := readyz(t, base)
		return code == http.StatusOK && strings.HasPrefix(body, "ready\n") &&
			strings.Contains(body, "catching up in stream order: pulls of 1 partitions wait for the partition furthest behind")
	})
	require.Equal(t, 1, r.tbl.PullsAtFloor())
	ci, err := b.ConsumerInfo(group)
	require.NoError(t, err)
	require.NotZero(t, ci.NumPending, "the backlog waits in the stream")

	// The partition behind moves on: the backlog folds, the wait ends.
	release.Store(true)
	b.WaitAcked(t, group)
	rt.Eventually(t, "every run closed", func() bool { _, n := r.closes.count(); return n == runs })
	rt.Eventually(t, "no pull waits", func() bool { return waiting() == 0 && r.tbl.Paced() == "" })
	rt.Eventually(t, "/readyz says ready alone", func() bool {
		code, body := readyz(t, base)
		return code == http.StatusOK && body == "ready\n"
	})
	require.Positive(t, counter(t, r.m, "gttsplit_pull_floor_wait_seconds_total"), "the seconds waited counted")
}

// readyz is /readyz's status and body at base.
func readyz(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}
