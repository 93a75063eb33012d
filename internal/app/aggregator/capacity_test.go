package aggregator

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/perftest"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// The capacity test (docs/capacity.md) measures what each part of the
// pipeline spends a run, then checks the model built on those costs at two
// loads, on the fleet tests' 3-node cluster of nats-server processes with
// real `aggregator serve` processes and many simulated hosts, each its own
// collector publisher (bus.Publisher, its own connection, inbox and spool,
// its own host name) publishing runs of the recorded 4B and 27B shape.
//
// Every part is its own process, so its CPU is its own: the hosts'
// publishers are the test process (getrusage), the broker the three
// nats-server processes, the aggregators theirs (/proc/<pid>/stat).
//
//  1. costs: 20 hosts publish 8 runs each with no aggregator running (the
//     publishers' and the broker's CPU a run published); then the
//     aggregators fold that backlog (the broker's and the aggregators' CPU
//     a run folded, between 20 % and 80 % of the events folded, start-up
//     left out; and how many cores the fleet got while it had work all the
//     time: what this machine gives it at this load); then 5 s idle (the
//     control traffic).
//  2. the model: a run costs publish + broker + fold CPU; the fleet holds
//     (cores it gets − idle traffic) / (CPU a run) runs a second.
//  3. point A: 50 hosts publish, paced, at 30 % of that: the model says it
//     holds (the fold keeps up, the backlog stays a few runs).
//  4. point B: 100 hosts publish, paced, at 400 % of it: the model says it
//     saturates; it predicts the fold's rate and the backlog's growth.
//
// It runs only with GTTSPLIT_FLEET_CAPACITY=1 (several minutes on 2 cores);
// GTTSPLIT_FLEET_CAPACITY_AGGREGATORS sets N (3), GTTSPLIT_FLEET_PARTITIONS
// the partitions (16).
//
//	GTTSPLIT_FLEET_CAPACITY=1 go test ./internal/app/aggregator -run '^TestCapacityModelIntegration$' -v -timeout 20m
func TestCapacityModelIntegration(t *testing.T) {
	skipShort(t)
	if os.Getenv("GTTSPLIT_FLEET_CAPACITY") == "" {
		t.Skip("minutes on 2 cores; GTTSPLIT_FLEET_CAPACITY=1 runs it")
	}
	if raceEnabled {
		t.Skip("measures CPU costs: not under -race")
	}
	nAggs := 3
	if v, _ := strconv.Atoi(os.Getenv("GTTSPLIT_FLEET_CAPACITY_AGGREGATORS")); v > 0 {
		nAggs = v
	}
	s := newCapSim(t)
	load0 := loadavg()

	// 1. What each part spends. The aggregators' start-up and their idle
	// traffic first: a set started on the empty stream, then stopped.
	w0 := s.sample()
	s.f.startAggs(nAggs)
	s.f.waitOwned(s.f.aggs...)
	w1 := s.sample()
	time.Sleep(5 * time.Second)
	w2 := s.sample()
	s.f.stopAggs(s.f.aggs...)
	s.f.aggs = nil
	// Publishing alone, then folding alone: a fresh set folds the backlog.
	cal := s.hosts("cal", 20)
	p0 := s.sample()
	s.drive(cal, 25, 0)
	p1 := s.sample()
	s.f.startAggs(nAggs)
	series := s.until(s.runs())
	m := s.model(w0, w1, w2, p0, p1, series)
	t.Logf("FIGURE capacity costs (load %s → %s): %s", load0, loadavg(), m)

	// 2–3. A load the model says holds, then one it says saturates.
	a := s.point("a", 50, 0.3*m.capacity, 30*time.Second, m)
	b := s.point("b", 100, 4*m.capacity, 8*time.Second, m)
	t.Logf("FIGURE capacity point A (holds): %s", a)
	t.Logf("FIGURE capacity point B (saturates): %s", b)
	s.checkOnce()
	require.Less(t, a.backlogEnd, 0.25*float64(a.events),
		"point A: the model says the fold keeps up, yet %.0f of the %d events published were not folded when publishing ended", a.backlogEnd, a.events)
	require.Greater(t, b.backlogEnd, 0.05*float64(b.events),
		"point B: the model says the fold falls behind, yet only %.0f of the %d events published were not folded when publishing ended", b.backlogEnd, b.events)
}

// capSim is the cluster, its aggregators, the simulated hosts and what
// they published.
type capSim struct {
	t     *testing.T
	f     *fleetRig
	fxs   []fixture
	acked atomic.Int64 // events the broker acknowledged to a host

	mu  sync.Mutex
	ids []string // every run published
}

func newCapSim(t *testing.T) *capSim {
	f := startFleet(t, 0)
	return &capSim{t: t, f: f, fxs: []fixture{loadFixture(t, fixture4B), loadFixture(t, fixture27B)}}
}

// simHost is one simulated host: its name and its collector's publisher.
type simHost struct {
	name string
	pub  *bus.Publisher
}

// hosts starts n simulated hosts named sim-<tag>-<i>, each connected as a
// collector is (its own connection and inbox, its own spool).
func (s *capSim) hosts(tag string, n int) []*simHost {
	t := s.t
	var out []*simHost
	for i := range n {
		name := fmt.Sprintf("sim-%s-%03d", tag, i)
		cfg := bus.DefaultPublisherConfig()
		cfg.NATS.URL = s.f.c.URLs()
		cfg.Spool.Dir = t.TempDir()
		cfg.Name = name
		nc, err := bus.Connect(testCtx(t), cfg.NATS, bus.DialOptions{Name: "gttsplit-collector", Host: name}, testLogger(t).Level(zerolog.ErrorLevel))
		require.NoError(t, err)
		pub, err := bus.NewPublisher(nc, cfg, testLogger(t).Level(zerolog.ErrorLevel))
		require.NoError(t, err)
		t.Cleanup(func() { _ = pub.Close(context.Background()) })
		out = append(out, &simHost{name: name, pub: pub})
	}
	return out
}

// drive has every host publish runsEach runs, the recorded shapes in turn,
// each run's events one after the other as its collector would; host i's
// k-th run starts (k + i/len(hosts)) periods after the start (period 0:
// back to back). It returns once every event is durable.
func (s *capSim) drive(hosts []*simHost, runsEach int, period time.Duration) {
	t := s.t
	ctx := testCtx(t)
	t0 := time.Now()
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range runsEach {
				if period > 0 {
					at := t0.Add(time.Duration((float64(k) + float64(i)/float64(len(hosts))) * float64(period)))
					time.Sleep(time.Until(at))
				}
				fx := s.fxs[(i+k)%len(s.fxs)]
				o := events.Origin{RunID: fmt.Sprintf("%s-%s-r%03d", fx.Origin.RunID, h.name, k), Host: h.name, Lane: "gpu0"}
				evs := make([]event.Event, 0, len(fx.Decoded))
				for _, d := range fx.Decoded {
					ev, err := rt.Event(d, o)
					if err != nil {
						t.Error(err)
						return
					}
					evs = append(evs, ev)
				}
				for _, ev := range evs {
					if err := h.pub.Publish(ctx, ev, func() { s.acked.Add(1) }); err != nil {
						t.Errorf("host %s: %v", h.name, err)
						return
					}
				}
				s.mu.Lock()
				s.ids = append(s.ids, o.RunID)
				s.mu.Unlock()
			}
			if err := h.pub.Flush(ctx); err != nil {
				t.Errorf("host %s: flush: %v", h.name, err)
			}
		}()
	}
	wg.Wait()
	require.False(t, t.Failed())
	for _, h := range hosts {
		require.Zero(t, h.pub.Dropped(), "host %s dropped events", h.name)
	}
}

func (s *capSim) runs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// capSample is one look at the fleet: what was published and folded,
// and every part's CPU so far.
type capSample struct {
	at          time.Time
	acked       float64 // events durable in the stream
	folded      float64 // events folded, all aggregators
	runs        float64 // runs completed (split written)
	redelivered float64
	nodes       []time.Duration // each nats-server's CPU
	aggs        time.Duration   // the aggregators' CPU, all of them
	self        time.Duration   // this process: the hosts' publishers
}

func (s *capSim) sample() capSample {
	c := capSample{at: time.Now(), aggs: aggCPU(s.f.aggs...), self: perftest.ProcessCPU(s.t)}
	for _, nd := range s.f.c.Nodes {
		c.nodes = append(c.nodes, nd.CPU())
	}
	for _, a := range s.f.aggs {
		_, page := tryGet(a.http, "/metrics")
		for name, v := range map[string]*float64{
			"gttsplit_events_folded_total":                     &c.folded,
			`gttsplit_runs_completed_total{status="complete"}`: &c.runs,
			"gttsplit_events_redelivered_total":                &c.redelivered,
		} {
			x, _ := strconv.ParseFloat(metricValue(page, name), 64)
			*v += x
		}
	}
	// After the folded counts (the scrapes take a while on a busy
	// machine): the backlog acked − folded is never under the true one.
	c.acked = float64(s.acked.Load())
	return c
}

func (c capSample) broker() time.Duration {
	var sum time.Duration
	for _, d := range c.nodes {
		sum += d
	}
	return sum
}

// until samples every 250 ms until n runs are completed, for up to 10
// minutes, and returns the samples.
func (s *capSim) until(n int) []capSample {
	deadline := time.Now().Add(10 * time.Minute)
	var out []capSample
	for {
		c := s.sample()
		out = append(out, c)
		if c.runs >= float64(n) {
			return out
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%.0f of %d runs completed", c.runs, n)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// window returns the first samples at which lo and hi of the series' last
// folded count were folded.
func (s *capSim) window(series []capSample, lo, hi float64) (capSample, capSample) {
	total := series[len(series)-1].folded
	var a, b *capSample
	for i := range series {
		if a == nil && series[i].folded >= lo*total {
			a = &series[i]
		}
		if b == nil && series[i].folded >= hi*total {
			b = &series[i]
		}
	}
	if a == b { // folded between two samples: the whole series
		return series[0], series[len(series)-1]
	}
	return *a, *b
}

// capModel is the measured cost of a run in each part and what follows.
type capModel struct {
	evRun                       float64 // events a run (the recorded shapes in turn)
	pub, brokerPub              float64 // CPU seconds a run published: hosts, broker
	brokerFold, agg             float64 // CPU seconds a run folded: broker, aggregators
	pubLead, foldLead           float64 // the busiest node's share of the broker's CPU
	idleBroker, idleAgg         float64 // cores spent with nothing to do
	cores                       float64 // cores the broker and aggregators got while folding flat out
	capacity                    float64 // runs a second this machine holds at this load
	startBroker, startAgg       float64 // CPU seconds the aggregators' start-up cost
	published, foldSecs, window float64
}

func (s *capSim) model(w0, w1, w2, p0, p1 capSample, series []capSample) capModel {
	var m capModel
	for _, fx := range s.fxs {
		m.evRun += float64(len(fx.Decoded)) / float64(len(s.fxs))
	}
	idle := w2.at.Sub(w1.at).Seconds()
	m.idleBroker = (w2.broker() - w1.broker()).Seconds() / idle
	m.idleAgg = (w2.aggs - w1.aggs).Seconds() / idle
	m.startBroker, m.startAgg = (w1.broker() - w0.broker()).Seconds(), (w1.aggs - w0.aggs).Seconds()
	start := w1.at.Sub(w0.at).Seconds()

	pubRuns := (p1.acked - p0.acked) / m.evRun
	m.published = pubRuns
	m.pub = (p1.self - p0.self).Seconds() / pubRuns
	m.brokerPub = (p1.broker() - p0.broker()).Seconds() / pubRuns
	m.pubLead = busiest(p0, p1)

	// The fold: the whole phase less the start-up (as measured above) and
	// the idle traffic of the rest of it.
	f1 := series[len(series)-1]
	m.foldSecs = f1.at.Sub(p1.at).Seconds()
	busy := max(0, m.foldSecs-start)
	m.brokerFold = ((f1.broker() - p1.broker()).Seconds() - m.startBroker - busy*m.idleBroker) / pubRuns
	m.agg = ((f1.aggs - p1.aggs).Seconds() - m.startAgg - busy*m.idleAgg) / pubRuns
	m.foldLead = busiest(p1, f1)
	// The cores the fleet got while it had work all the time: between 20 %
	// and 80 % of the events folded.
	a, b := s.window(series, 0.2, 0.8)
	m.cores = ((b.broker() - a.broker()) + (b.aggs - a.aggs)).Seconds() / b.at.Sub(a.at).Seconds()
	m.window = b.at.Sub(a.at).Seconds()
	m.capacity = (m.cores - m.idleBroker - m.idleAgg) / m.run()
	require.Positive(s.t, m.capacity, "the idle traffic took every core the fleet got: %+v", m)
	return m
}

// run is the CPU seconds a run costs, all parts together.
func (m capModel) run() float64 { return m.pub + m.brokerPub + m.brokerFold + m.agg }

func (m capModel) String() string {
	ms := func(x float64) string { return fmt.Sprintf("%.2f ms", 1000*x) }
	return fmt.Sprintf("%.1f events a run; a run published: hosts %s, broker %s (busiest node %.0f %%), %.0f runs; "+
		"a run folded: broker %s (busiest node %.0f %%), aggregators %s, all folded in %.1f s; "+
		"a run in all %s; start-up of the aggregators: broker %.2f s, aggregators %.2f s; idle: broker %.1f ms/s, aggregators %.1f ms/s; "+
		"the fleet got %.2f cores folding flat out (%.1f s sampled); "+
		"model: this machine holds %.1f runs/s = %.0f runs a minute; "+
		"a core holds %.0f runs/s on the busiest broker node, %.0f runs/s of aggregators, %.0f runs/s of a host's publishing",
		m.evRun, ms(m.pub), ms(m.brokerPub), 100*m.pubLead, m.published,
		ms(m.brokerFold), 100*m.foldLead, ms(m.agg), m.foldSecs,
		ms(m.run()), m.startBroker, m.startAgg, 1000*m.idleBroker, 1000*m.idleAgg, m.cores, m.window, m.capacity, 60*m.capacity,
		1/(m.pubLead*m.brokerPub+m.foldLead*m.brokerFold), 1/m.agg, 1/m.pub)
}

// busiest is the busiest node's share of the broker's CPU between a and b.
func busiest(a, b capSample) float64 {
	top := time.Duration(0)
	for i := range a.nodes {
		top = max(top, b.nodes[i]-a.nodes[i])
	}
	return top.Seconds() / (b.broker() - a.broker()).Seconds()
}

// capPoint is one checked point: what was offered, what the model
// predicts and what was measured.
type capPoint struct {
	hosts                int
	offered              float64 // runs a second asked of the hosts
	published            float64 // runs a second the hosts published
	folded               float64 // runs a second completed while publishing
	predicted            float64 // runs a second the model says are folded
	predictedGot         float64 // the same from the cores the fleet got in this phase
	events               int
	backlogEnd           float64 // events published, not folded, when publishing ended
	backlogPred          float64 // the model's backlog then
	backlogMax           float64
	redelivered, pubSecs float64
	drainSecs            float64
	samples              int
	foldCost, foldCal    float64 // CPU seconds a run folded: in this phase, calibrated
	cores                float64
	load                 string
}

// point has n new hosts publish at rate runs a second for about d, paced,
// samples the fleet meanwhile, waits for every run to be folded and
// returns what the model predicted beside what was measured.
func (s *capSim) point(tag string, n int, rate float64, d time.Duration, m capModel) capPoint {
	hosts := s.hosts(tag, n)
	runsEach := max(1, int(rate*d.Seconds()/float64(n)+0.5))
	period := time.Duration(float64(n) / rate * float64(time.Second))
	p := capPoint{hosts: n, offered: rate, load: loadavg()}
	before := s.runs()
	c0 := s.sample()
	stop := make(chan struct{})
	var series []capSample
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			series = append(series, s.sample())
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	s.drive(hosts, runsEach, period)
	close(stop)
	wg.Wait()
	c1 := s.sample()
	all := s.until(s.runs())
	c2 := all[len(all)-1]
	p.load += " → " + loadavg()
	runs := float64(s.runs() - before)
	p.events = int(c1.acked - c0.acked)
	p.pubSecs = c1.at.Sub(c0.at).Seconds()
	p.drainSecs = c2.at.Sub(c1.at).Seconds()
	p.published = runs / p.pubSecs
	p.folded = (c1.folded - c0.folded) / m.evRun / p.pubSecs
	p.backlogEnd = c1.acked - c1.folded
	for _, c := range series {
		p.backlogMax = max(p.backlogMax, c.acked-c.folded)
	}
	p.samples = len(series)
	p.redelivered = c2.redelivered - c0.redelivered
	got := ((c1.broker() - c0.broker()) + (c1.aggs - c0.aggs) + (c1.self - c0.self)).Seconds()
	p.cores = got / p.pubSecs
	// The fold gets what the fleet gets less the idle traffic and the
	// publishing; it folds no faster than runs are published.
	foldRun := m.brokerFold + m.agg
	fold := func(cores float64) float64 {
		left := cores - m.idleBroker - m.idleAgg - p.published*(m.pub+m.brokerPub)
		return min(p.published, max(0, left/foldRun))
	}
	p.predicted = fold(m.cores)
	// What a run folded cost in this phase: the fleet's CPU less the
	// publishing (at the calibrated cost) and the idle traffic.
	foldedRuns := (c1.folded - c0.folded) / m.evRun
	spent := ((c1.broker() - c0.broker()) + (c1.aggs - c0.aggs)).Seconds()
	p.foldCost = (spent - p.published*p.pubSecs*m.brokerPub - (m.idleBroker+m.idleAgg)*p.pubSecs) / foldedRuns
	p.foldCal = foldRun
	p.predictedGot = fold(p.cores)
	p.backlogPred = (p.published - p.predicted) * p.pubSecs * m.evRun
	return p
}

func (p capPoint) String() string {
	return fmt.Sprintf("%d hosts asked for %.1f runs/s (%.0f a minute), published %.1f runs/s (%d events in %.1f s); "+
		"folded %.1f runs/s while publishing, the model %.1f (%.2f×; from the %.2f cores the fleet and hosts got then, %.1f); "+
		"a run folded cost the broker and aggregators %.2f ms (calibrated %.2f ms); backlog when publishing ended %.0f events (model %.0f), at most %.0f (%d samples); all folded %.1f s later; %.0f redelivered; load %s",
		p.hosts, p.offered, 60*p.offered, p.published, p.events, p.pubSecs,
		p.folded, p.predicted, p.folded/p.predicted, p.cores, p.predictedGot,
		1000*p.foldCost, 1000*p.foldCal, p.backlogEnd, max(0, p.backlogPred), p.backlogMax, p.samples, p.drainSecs, p.redelivered, p.load)
}

// checkOnce checks that every run published has exactly one split line
// in the aggregators' sinks, marked complete.
func (s *capSim) checkOnce() {
	// A run counts as completed when its split is closed; the sink
	// writes it a moment later.
	eventually(s.t, "every run's split in a sink", func() bool {
		got := s.f.lines()
		for _, id := range s.ids {
			if len(got[id]) == 0 {
				return false
			}
		}
		return true
	})
	got := s.f.lines()
	var missing, twice []string
	for _, id := range s.ids {
		switch ls := got[id]; {
		case len(ls) == 0:
			missing = append(missing, id)
		case len(ls) > 1:
			twice = append(twice, id)
		default:
			require.Contains(s.t, string(ls[0].raw), `"complete":true`, id)
		}
	}
	require.Empty(s.t, missing, "runs without a split")
	require.Empty(s.t, twice, "runs written more than once")
	require.Len(s.t, got, len(s.ids), "no split of a run never published")
}
