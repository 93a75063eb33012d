package aggregator

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/conservation"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// fault drives the runs' events into the pipeline in its own way. It gets
// the broker, the running aggregator (which it may restart) and returns
// the aggregator running at the end.
type fault struct {
	name string
	// edit changes a run's events before publication (nil: none); it
	// returns the events that reach the broker.
	edit func(t *testing.T, rng *rand.Rand, ws []events.Wire) []events.Wire
	// drive publishes the events of every run.
	drive func(t *testing.T, h *harness, runs [][]events.Wire)
}

type harness struct {
	b   *testBroker
	cfg configAggregator
	s   *served
}

type configAggregator = struct {
	url, store, json string
}

// TestConservationIntegration drives runs through each fault and checks
// that every announced event is folded exactly once, or the split says
// what is missing: each run's split, as the JSON sink wrote it, is byte
// for byte what `aggregator replay` computes from the events that reached
// the broker, and the pipeline folds a fresh run afterwards.
func TestConservationIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	n := conservation.Runs(raceEnabled)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	seqPublish := func(t *testing.T, h *harness, runs [][]events.Wire) {
		var all []events.Wire
		for i := 0; ; i++ {
			more := false
			for _, r := range runs {
				if i < len(r) {
					all = append(all, r[i])
					more = true
				}
			}
			if !more {
				break
			}
		}
		h.b.publish(t, all...)
	}
	faults := []fault{
		{name: "none", drive: seqPublish},
		{name: "duplicate redelivery", drive: func(t *testing.T, h *harness, runs [][]events.Wire) {
			var ws []events.Wire
			var ids []string
			for _, r := range runs {
				for _, w := range r {
					ws, ids = append(ws, w, w), append(ids, "", w.ID+"#again")
				}
			}
			h.b.publishIDs(t, ws, ids)
		}},
		{name: "shuffled, run.finished first", edit: func(t *testing.T, rng *rand.Rand, ws []events.Wire) []events.Wire {
			out := append([]events.Wire(nil), ws...)
			rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
			for i, w := range out {
				if strings.Contains(w.Subject, ".run.") && strings.HasSuffix(w.ID, "/finished/0") {
					out[0], out[i] = out[i], out[0]
				}
			}
			return out
		}, drive: seqPublish},
		{name: "aggregator stop and restart", drive: func(t *testing.T, h *harness, runs [][]events.Wire) {
			half := len(runs) / 2
			seqPublish(t, h, runs[:half])
			require.NoError(t, h.s.stop(t))
			seqPublish(t, h, runs[half:])
			h.s = startServe(t, h.aggCfg(t), ServeOptions{})
		}},
		{name: "aggregator SIGKILL and restart", drive: func(t *testing.T, h *harness, runs [][]events.Wire) {
			// A real `aggregator serve` process owns the runs while the
			// first half is published; it is SIGKILLed once it has
			// written some of their splits (others are in hand, folded or
			// not, acknowledged or not); a new aggregator takes over.
			bin := buildAggregator(t)
			require.NoError(t, h.s.stop(t))
			killed := startChild(t, bin, h.b.url, h.cfg.json, t.TempDir(), "killed")
			half := len(runs) / 2
			seqPublish(t, h, runs[:half])
			eventually(t, "the first splits of the aggregator to kill", func() bool { return len(sinkDocs(t, h.cfg.json)) > 0 })
			require.NoError(t, killed.cmd.Process.Signal(syscall.SIGKILL))
			_ = killed.wait(t)
			seqPublish(t, h, runs[half:])
			h.s = startServe(t, h.aggCfg(t), ServeOptions{})
		}},
		{name: "broker restart", drive: func(t *testing.T, h *harness, runs [][]events.Wire) {
			half := len(runs) / 2
			seqPublish(t, h, runs[:half])
			port := natstest.Port(h.b.Srv)
			natstest.Shutdown(h.b.Srv)
			h.b = startBrokerAt(t, natstest.StartAt(t, h.cfg.store, port))
			seqPublish(t, h, runs[half:])
		}},
		{name: "poison flood", drive: func(t *testing.T, h *harness, runs [][]events.Wire) {
			for i, r := range runs {
				seqPublish(t, h, [][]events.Wire{r})
				for k := range 10 {
					h.b.publishRaw(t, r[1].Subject, []byte(fmt.Sprintf(`{"specversion":"1.0","id":"poison-%d-%d-%s"}`, i, k, strings.Repeat("x", 2048))))
				}
			}
		}},
		{name: "events dropped by the collector (full spool)", edit: func(t *testing.T, rng *rand.Rand, ws []events.Wire) []events.Wire {
			// Two log-lines events never reach the broker; the run's
			// finish counts them as dropped, as a collector with a full
			// spool does.
			var out []events.Wire
			dropped := 0
			for _, w := range ws {
				if strings.Contains(w.Subject, ".log.") && dropped < 2 && rng.IntN(3) == 0 {
					dropped++
					continue
				}
				out = append(out, w)
			}
			for i, w := range out {
				if strings.HasSuffix(w.ID, "/finished/0") {
					d, err := events.DecodeBytes(w.Data)
					require.NoError(t, err)
					d.Finished.Detail.DroppedEvents = uint64(dropped)
					nw, err := rt.Rewrite(d, d.Origin)
					require.NoError(t, err)
					out[i] = nw
				}
			}
			return out
		}, drive: seqPublish},
	}

	var rows []conservation.Row
	for _, f := range faults {
		t.Run(strings.ReplaceAll(f.name, " ", "_"), func(t *testing.T) {
			store := t.TempDir()
			b := startBrokerAt(t, natstest.StartAt(t, store, -1))
			h := &harness{b: b, cfg: configAggregator{url: b.url, store: store, json: t.TempDir()}}
			h.s = startServe(t, h.aggCfg(t), ServeOptions{})
			gen := genRuns(t, n, fx)
			var runs [][]events.Wire
			for _, g := range gen {
				ws := g.Wires
				if f.edit != nil {
					ws = f.edit(t, rng, ws)
				}
				runs = append(runs, ws)
			}
			f.drive(t, h, runs)
			// Live afterwards: a fresh run folds too.
			canary := genRuns(t, n+1, fx)[n]
			canary.Origin.RunID += "-canary"
			var cws []events.Wire
			for _, d := range canary.Fx.Decoded {
				w, err := rt.Rewrite(d, events.Origin{RunID: canary.Origin.RunID, Host: "canary", Lane: "c"})
				require.NoError(t, err)
				cws = append(cws, w)
			}
			h.b.publish(t, cws...)
			eventually(t, "a split of every run and of the canary", func() bool {
				return len(sinkDocs(t, h.cfg.json)) >= n+1
			})
			h.b.waitAcked(t, "gttsplit-aggregator")
			require.NoError(t, h.s.stop(t))

			docs := sinkDocs(t, h.cfg.json)
			row := conservation.Row{Fault: f.name, Runs: n}
			for i, g := range gen {
				uniq := map[string]bool{}
				for _, w := range runs[i] {
					uniq[w.ID] = true
				}
				row.Sent += len(uniq)
				got, ok := docs[g.Origin.RunID]
				want := replayJSON(t, runs[i])
				switch {
				case !ok:
					row.Lost += len(uniq)
				case string(got) == string(want):
					row.Folded += len(uniq)
				default:
					row.Lost++ // differs: counted, and the test fails below
					t.Errorf("run %s: the split differs from the replay of its events", g.Origin.RunID)
				}
				var r split.Report
				if ok && json.Unmarshal(got, &r) == nil && !r.Run.Complete {
					row.Flagged++
					require.Contains(t, r.Flags, split.FlagEventsDropped, "an incomplete run says why")
				}
			}
			require.Contains(t, docs, canary.Origin.RunID, "the pipeline is live afterwards")
			require.Zero(t, row.Lost)
			rows = append(rows, row)
		})
	}
	t.Logf("conservation (%d runs per fault):\n%s", n, conservation.Table(rows))
}

func (h *harness) aggCfg(t *testing.T) config.Aggregator {
	cfg := testConfig(t, h.b.url)
	cfg.Sinks.JSON.Dir = h.cfg.json
	return cfg
}
