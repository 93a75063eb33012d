package runtable_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
)

// An idle table asks the broker for the events stream's and the state
// bucket's state once every infoEvery, however its partitions went idle.
// After a fold its partitions go idle at different times, so their
// consumers' infos (each every infoEvery) come at different watches; each
// of those asked for both streams' state again: three times as often on a
// fleet idle after a 1,000-run fold. The test folds runs one after the
// other, a few watches apart (each partition goes idle at its own watch),
// then counts the stream-info requests of an idle window (watches every
// 250 ms, infos every 2.5 s: 38 with the old rule, 6-8 now, at most 12).
// Serial: it sets the package's watch intervals.
func TestIdleTableAsksTheStreamsEveryInfoIntegration(t *testing.T) {
	skipShort(t)
	const watch, info = 250 * time.Millisecond, 2500 * time.Millisecond
	// Put back after the table stopped (cleanups run last first).
	t.Cleanup(runtable.SetWatchEvery(watch, info))
	opts := rt.FoldOptions(t)
	runs := rt.Gen(t, 6, rt.Load(t, fixture4B, opts))
	b := rt.StartBroker(t)
	const group = "idlewatch"
	r := startTable(t, b.URL, group, tableConfig{idle: time.Hour})
	r.waitOwns(r.parts)
	for i, run := range runs {
		b.Publish(t, run.Wires...)
		rt.Eventually(t, "the run's split", func() bool { n, _ := r.closes.count(); return n == i+1 })
		time.Sleep(3 * watch) // the next partition goes idle a few watches later
	}
	b.WaitAcked(t, group)
	time.Sleep(2 * info) // every consumer quiet: an info of each found nothing

	nc, _ := rt.Connect(t, b.URL)
	var infos atomic.Int64
	sub, err := nc.Subscribe("$JS.API.STREAM.INFO.>", func(*nats.Msg) { infos.Add(1) })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, nc.Flush())
	const window = 4 * info
	time.Sleep(window)
	n := infos.Load()
	// The two streams once an info, once more each where the window cuts
	// an interval, and once more for a pull that failed on a loaded
	// machine (its consumer woke: the streams are asked with it).
	bound := int64(2 * (window/info + 2))
	t.Logf("an idle table asked for the streams' state %d times in %s (infos every %s, watches every %s; at most %d)", n, window, info, watch, bound)
	require.LessOrEqual(t, n, bound, "an idle table asks for the streams' state more often than every info")
}
