package runtable_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/fleet"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// retyped is a log-lines event of the fixture under another type and id.
func retyped(t *testing.T, data []byte, typ, id string) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	m["type"], m["id"] = typ, id
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

// Events of a type the aggregator does not know are dead-lettered with
// reason unknown_type, counted, and said at WARN once per type, whatever
// their subject: another version of a known type, a type of its own on a
// known kind, and a kind the aggregator does not know at all (which was
// acknowledged without a word). A known event on a subject of an unknown
// kind is invalid. A run published after them is folded.
func TestUnknownTypesDeadLetteredIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	var logs lockedBuf
	r := startTableLog(t, b.URL, "unknown", tableConfig{idle: time.Hour}, zerolog.New(&logs).Level(zerolog.DebugLevel))
	r.waitOwns(r.parts)
	o := fx.Origin
	logData := fx.Wires[1].Data
	kinds := map[string]string{ // type → subject kind
		"io.gttsplit.log.lines.v9":    "log",
		"io.gttsplit.tokens.count.v1": "log",
		"io.gttsplit.gpu.clock.v1":    "gpuclock",
	}
	n := 0
	for typ, kind := range kinds {
		for i := range 3 {
			n++
			subject := strings.Replace(events.Subject(events.KindLog, o.Host, o.Lane, o.RunID), ".log.", "."+kind+".", 1)
			b.PublishRaw(t, subject, retyped(t, logData, typ, fmt.Sprintf("%s/%s/%d", o.RunID, typ, i)))
		}
	}
	// A known event (log lines) on a subject of an unknown kind.
	b.PublishRaw(t, strings.Replace(events.Subject(events.KindLog, o.Host, o.Lane, o.RunID), ".log.", ".gpuclock.", 1), logData)
	rt.Eventually(t, "every unknown event dead-lettered", func() bool {
		return counter(t, r.m, "gttsplit_events_dead_lettered_total", "unknown_type") == float64(n) &&
			counter(t, r.m, "gttsplit_events_dead_lettered_total", "invalid") == 1
	})
	require.Len(t, b.StreamMsgs(t, "gttsplit.dlq.>"), n+1)
	out := logs.String()
	for typ := range kinds {
		said := 0
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, `"type":"`+typ+`"`) {
				said++
			}
		}
		require.Equal(t, 1, said, "one WARN for %s:\n%s", typ, out)
	}
	require.Zero(t, counter(t, r.m, "gttsplit_events_folded_total"), "none of them folded")

	b.Publish(t, fx.Wires...)
	rt.Eventually(t, "the run folded and closed", func() bool { _, runs := r.closes.count(); return runs == 1 })
}

// The store's room: an events stream that keeps every event for ever is
// said at WARN when the table starts watching it; one that nears its
// max_bytes shows in gttsplit_store_used_ratio{store="stream"} and is
// said at WARN once (not at every watch), and again as having room once
// the limit is raised.
func TestStoreRoomSaidIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t) // a stream without max age or max bytes
	var logs lockedBuf
	r := startTableLog(t, b.URL, "room", tableConfig{idle: time.Hour}, zerolog.New(&logs).Level(zerolog.DebugLevel))
	r.waitOwns(r.parts)
	rt.Eventually(t, "the endless stream said", func() bool { return strings.Contains(logs.String(), "keeps every event for ever") })

	b.Publish(t, fx.Wires...)
	st, err := b.JS.Stream(rt.Ctx(t), "GTTSPLIT")
	require.NoError(t, err)
	info, err := st.Info(rt.Ctx(t))
	require.NoError(t, err)
	setMax := func(n int64) {
		t.Helper()
		cfg := info.Config
		cfg.MaxBytes = n
		_, err := b.JS.UpdateStream(rt.Ctx(t), cfg)
		require.NoError(t, err)
	}
	setMax(int64(info.State.Bytes) * 10 / 9) // 90 % full
	rt.Eventually(t, "the ratio and the warning", func() bool {
		return counter(t, r.m, "gttsplit_store_used_ratio", "stream") >= 0.8 && strings.Contains(logs.String(), "nears its limit")
	})
	setMax(int64(info.State.Bytes) * 2)
	rt.Eventually(t, "room again", func() bool {
		return counter(t, r.m, "gttsplit_store_used_ratio", "stream") < 0.7 && strings.Contains(logs.String(), "has room again")
	})
	require.Equal(t, 1, strings.Count(logs.String(), "nears its limit"), "said once, not at every watch")
}

// A garbage value under an open run's key (the fault as found: the run
// was dropped without a word, and its split read 540 of the 4B run's
// 1,564 lines): the next owner says it at WARN with the key, dead-letters
// the value (reason state, the key in a header) and folds the run again
// from the events the stream holds, so the split is the whole run's,
// byte for byte the replay's. Both a value that is no JSON (once taken
// for an earlier version's marker, and purged) and one that is broken
// JSON (once skipped).
func TestGarbageStateRefoldedIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	for i, garbage := range [][]byte{[]byte("\x00\x13not a run state"), []byte(`{"origin":{"run_id":"` + fx.Origin.RunID + `","host`)} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			b := rt.StartBroker(t)
			group := fmt.Sprintf("garbage%d", i)
			half := len(fx.Wires) / 2
			a := startTable(t, b.URL, group, tableConfig{idle: time.Hour})
			a.waitOwns(a.parts)
			b.Publish(t, fx.Wires[:half]...)
			b.WaitAcked(t, group) // checkpointed: the first half's messages are gone for good
			a.stop()
			key := runtable.OpenKey(bus.PartitionOf(fx.Origin.RunID, a.parts), fx.Origin.RunID)
			require.NoError(t, getKey(t, b, key), "the open run's state is stored")
			kv, err := b.JS.KeyValue(rt.Ctx(t), runtable.Bucket)
			require.NoError(t, err)
			_, err = kv.Put(rt.Ctx(t), key, garbage)
			require.NoError(t, err)

			var logs lockedBuf
			c := startTableLog(t, b.URL, group, tableConfig{idle: time.Hour}, zerolog.New(&logs))
			b.Publish(t, fx.Wires[half:]...)
			rt.Eventually(t, "the run's split", func() bool { n, _ := c.closes.count(); return n >= 1 })
			got := c.closes.of(fx.Origin.RunID)
			require.Len(t, got, 1)
			js, err := split.JSON(got[0])
			require.NoError(t, err)
			require.Equal(t, string(fx.Want), string(js), "the whole run, refolded from the stream")
			require.Contains(t, logs.String(), `"key":"`+key+`"`)
			require.Contains(t, logs.String(), "unreadable run state dead-lettered")
			dl := b.StreamMsgs(t, "gttsplit.dlq.>")
			require.Len(t, dl, 1)
			require.Equal(t, key, dl[0].Headers().Get("Gttsplit-State-Key"))
			require.Equal(t, string(garbage), string(dl[0].Data()))
			require.Equal(t, 1.0, counter(t, c.m, "gttsplit_events_dead_lettered_total", "state"))
		})
	}
}

// gttsplit_partitions_unowned counts the partitions nobody folds. A killed
// owner's leases live on until their time to live runs out (10 s here),
// but their holder is no live member once the survivor's own member key
// came back stored more than the killed member's time to live (three
// quarters of its lease_ttl) after its last renewal: from then on each of
// its partitions is counted (-1 in gttsplit_partition_owned), whether its
// lease still lives (a dead holder) or ran out (free), until the survivor
// took it; before that, none whose lease lives is.
//
// The rules do not say that the killed member is taken for dead before
// its first lease runs out: a lease renewed a renewal interval (a fifth of
// lease_ttl) before the member's last sign runs out a twentieth of
// lease_ttl after the member's time to live, and the survivor learns of
// the death only once a renewal of its own (a tick, a round trip) came
// back after it. So the test looks at the survivor's view at the moment
// the killed member left its members, and checks every partition there;
// it says how many still had a dead holder (on an idle machine all of
// them).
func TestUnownedCountsDeadOwnersIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	b := rt.StartBroker(t)
	const lease = 10 * time.Second
	a := startTable(t, b.URL, "unowned", tableConfig{idle: time.Hour}, lease)
	c := startTable(t, b.URL, "unowned", tableConfig{idle: time.Hour}) // steadyLease: it lives
	rt.Eventually(t, "the partitions shared", func() bool { return a.owned() > 0 && c.owned() > 0 && a.owned()+c.owned() == a.parts })
	// observe is the survivor's view, set into metrics as the node does
	// every second (metrics of the test's own, so that what it reads is
	// of this view), and the count it gives.
	m := runtable.NewMetrics()
	observe := func() ([]fleet.PartitionView, []string, int) {
		view, members := c.member.View()
		m.ObserveFleet(view, members)
		return view, members, int(counter(t, m, "gttsplit_partitions_unowned"))
	}
	owned := func(p int) float64 { return counter(t, m, "gttsplit_partition_owned", strconv.Itoa(p)) }
	// The survivor's view follows the bucket through its watch: the last
	// lease taken may reach it a moment after the tables own it all.
	rt.Eventually(t, "the survivor's view: every partition has a live owner", func() bool { _, _, u := observe(); return u == 0 })
	dead := a.member.ID()
	var of []int // the partitions the killed member held
	view, _ := a.member.View()
	for _, v := range view {
		if v.Mine {
			of = append(of, v.Partition)
		}
	}
	killed := time.Now()
	a.crash()
	var holdsDead, free, taken int
	rt.Eventually(t, "the killed member taken for dead", func() bool {
		view, members, unowned := observe()
		if slices.Contains(members, dead) {
			for _, p := range of {
				if view[p].Owner == dead {
					require.Zero(t, owned(p), "partition %d counted while its holder lives", p)
				}
			}
			return false
		}
		holdsDead, free, taken = 0, 0, 0
		for _, p := range of {
			switch v := view[p]; {
			case v.Mine:
				taken++
				continue
			case v.Owner == dead:
				holdsDead++
			default:
				require.Empty(t, v.Owner, "partition %d", p)
				free++
			}
			require.Equal(t, -1.0, owned(p), "partition %d (holder %q) not counted", p, view[p].Owner)
		}
		require.Equal(t, holdsDead+free, unowned)
		return true
	})
	t.Logf("taken for dead %s after the kill: of its %d partitions %d with their leases still living, %d free, %d taken over",
		time.Since(killed).Round(time.Millisecond), len(of), holdsDead, free, taken)
	rt.EventuallyWithin(t, "taken over", lease+rt.WaitFor, func() bool { return c.owned() == c.parts })
	rt.Eventually(t, "the survivor's view: none unowned once it took them all", func() bool { _, _, u := observe(); return u == 0 })
}

// A full state bucket (the fault as found: the closed-state write was
// tried ~19 times a second per run with an ERROR each, /readyz flapped
// back to ready while nothing could be written, and every partition's
// lease, in the same bucket, was lost within the lease's time to live).
// The bucket's max_bytes is reached by the table's own writes (runs that
// close): their writes back off with the checkpoints' (a few attempts,
// one line), the table stays not ready for as long as nothing can be
// written, and it keeps every lease past several times to live (the run
// states stop short of max_bytes by the leases' reserve). Once there is
// room, every run is written, once.
func TestStoreFullKeepsLeasesIntegration(t *testing.T) {
	skipShort(t)
	fx := rt.Load(t, fixture4B, rt.FoldOptions(t))
	b := rt.StartBroker(t)
	ctx := rt.Ctx(t)
	var logs lockedBuf
	const lease = 8 * time.Second // renewed in time on a loaded machine under -race
	r := startTableLog(t, b.URL, "fullkeep", tableConfig{idle: time.Hour,
		consumer: runtable.ConsumerConfig{CheckpointInterval: 200 * time.Millisecond, AckWait: 3 * time.Second}},
		zerolog.New(&logs).Level(zerolog.InfoLevel), lease)
	r.waitOwns(r.parts)
	st, err := b.JS.Stream(ctx, "KV_"+runtable.Bucket)
	require.NoError(t, err)
	// One run first: its states show how large a run is in the bucket.
	b.Publish(t, fx.Wires...)
	rt.Eventually(t, "the first run", func() bool { n, _ := r.closes.count(); return n == 1 })
	info, err := st.Info(ctx)
	require.NoError(t, err)
	before := int64(info.State.Bytes)
	cfg := info.Config
	cfg.MaxBytes = before + 200<<10 // room for the reserve and a little: a few runs fill it
	_, err = b.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	rt.Eventually(t, "the table to see the bucket's max_bytes", func() bool {
		return counter(t, r.m, "gttsplit_store_used_ratio", "bucket") > 0
	})

	runs := rt.Gen(t, 12, fx)
	for _, g := range runs {
		b.Publish(t, g.Wires...)
	}
	rt.Eventually(t, "not ready: the store is full", func() bool {
		ok, why := r.tbl.Ready()
		return !ok && strings.Contains(why, "store is full")
	})
	full, err := st.Info(ctx)
	require.NoError(t, err)
	t.Logf("the bucket: %d of %d bytes", full.State.Bytes, cfg.MaxBytes)
	require.GreaterOrEqual(t, cfg.MaxBytes-int64(full.State.Bytes), int64(64<<10), "the leases' reserve (64 KiB) is left")
	// Watch for twice the leases' time to live: never ready, every lease
	// kept, the writes backing off.
	errs0 := counter(t, r.m, "gttsplit_state_persist_errors_total")
	for end := time.Now().Add(2 * lease); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		ok, _ := r.tbl.Ready()
		require.False(t, ok, "ready while nothing can be written")
		require.Equal(t, r.parts, r.owned(), "a lease lost while the store is full: %s", logs.String())
	}
	attempts := counter(t, r.m, "gttsplit_state_persist_errors_total") - errs0
	// Backing off to 5 s: a handful of attempts per partition that writes
	// in 16 s, where every tick (20 a second) tried every closing run.
	require.Less(t, attempts, float64(6*r.parts), "writes backed off")
	require.LessOrEqual(t, strings.Count(logs.String(), `"level":"error"`), 0, logs.String())
	require.Less(t, strings.Count(logs.String(), "checkpoint failed"), r.parts+1, "said once per partition and episode")

	cfg.MaxBytes = -1
	_, err = b.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	rt.Eventually(t, "every run written", func() bool { n, _ := r.closes.count(); return n == 1+len(runs) })
	rt.Eventually(t, "ready again", func() bool { ok, _ := r.tbl.Ready(); return ok })
	for _, g := range runs {
		require.Len(t, r.closes.of(g.Origin.RunID), 1, "written once")
	}
}
