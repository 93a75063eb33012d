package runtable

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/fleet"
	"github.com/gttsplit/gttsplit/pkg/conf"
	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// Tuning of the run table.
const (
	// tickEvery is how often a partition looks at its finished and idle
	// runs and at the sinks' deliveries between checkpoints.
	tickEvery = 50 * time.Millisecond
	// checkpointChunk bounds the run states a checkpoint holds encoded at
	// once.
	checkpointChunk = 256
	// writeDueLook bounds the messages waiting for a write the loop
	// looks at every tick (the oldest).
	writeDueLook = 64
	// releaseSettle bounds how long a partition's release waits for the
	// sinks to settle the splits of its runs written just before.
	releaseSettle = time.Second
	// dropGrace is how long a finished run whose collector dropped events
	// waits for the events still in flight before it closes.
	dropGrace = 5 * time.Second
	// maxBackoff caps the wait between two checkpoints that failed (a
	// full store); transientBackoff doubling up to maxTransientBackoff is
	// the wait after a write that went unanswered or found no leader.
	maxBackoff          = 5 * time.Second
	transientBackoff    = 250 * time.Millisecond
	maxTransientBackoff = time.Second
)

// MaxRunIDBytes is the longest run id the table folds (the collector's
// own bound); an event of a longer one is dead-lettered.
const MaxRunIDBytes = conf.MaxRunIDLen

// Config is what a Table needs besides the broker.
type Config struct {
	Fold split.Options
	// Stream is the events stream.
	Stream string
	// Group is the fleet's group (consumer.durable, fleet.Config.Group):
	// the partition consumers are <Group>-pNN.
	Group string
	// Consumer is the run table's consumer.* keys: the lanes the
	// partition consumers take (none: every lane), their AckWait and
	// MaxAckPending, and the CheckpointInterval (zero values: their
	// defaults, DefaultConsumerConfig's).
	Consumer ConsumerConfig
	// Store is the store.* keys: Retention and CompactAfter.
	Store StoreConfig
	// Partitions is the stream's partition count (bus.Layout).
	Partitions int
	// Legacy: the earlier versions' partitioned stream is still there;
	// each partition's owner drains its part of it too.
	Legacy bool
	// Replicas of the partition consumers (0: the stream's).
	Replicas int

	// IdleTimeout: a run with no event for this long is folded and
	// reported as incomplete (0: never).
	IdleTimeout time.Duration
	// RunMemory bounds what the runs take in memory, in bytes (0: no
	// bound): past it, open runs wait in the state bucket (memory.go).
	RunMemory int64
	// BrokerRunCost is what a broker in this process (the embedded
	// server) takes in memory for each run in the state bucket, in bytes
	// (0: the broker is elsewhere); it counts against RunMemory.
	BrokerRunCost int64
	// BrokerClosedRunCost is what that broker takes for each closed run
	// kept in the state bucket (store.retention), in bytes (0: the broker
	// is elsewhere); it counts against RunMemory too.
	BrokerClosedRunCost int64

	Sinks *sinks.Fanout // nil: no sink
	// Deliveries, when set, is Sinks' observer: closed runs stay
	// SinksPending until every sink of Sinks settled their split.
	Deliveries *Deliveries
	// Print, if set, receives every split written to the sinks.
	Print func(split.Report)
	// OnClose, if set, is called after a run's split was written.
	OnClose func(id string, r split.Report)
	// LaneChanges, if set, keeps each lane's changes comment on its
	// tracker issue (lanechanges.go).
	LaneChanges *LaneChanges
	Now         func() time.Time
	Metrics     *Metrics
	// StoreRoom, when set, reports the room of the server's JetStream
	// store (the embedded server's); see room.go.
	StoreRoom func() StoreRoom
}

// Table folds the runs of the partitions this aggregator owns (see the
// package doc). It is a fleet.Handler: the fleet member tells it which
// partitions it holds.
type Table struct {
	cfg    Config
	log    zerolog.Logger
	js     jetstream.JetStream
	st     *store
	parser *llamalog.Parser
	m      *Metrics
	index  *Index

	// mu guards byPart and leases. It is taken last: no other lock is
	// taken while it is held (a partition's ckptMu may be held when it is
	// taken), and it is never held across a write to the broker.
	mu     sync.RWMutex
	byPart map[int]*part
	// leases are the partitions' leases from the start of Acquired (a
	// take-over re-sends splits before the partition is in byPart) to
	// its release: what Owns asks.
	leases map[int]*fleet.Lease

	closed atomic.Int64
	flow   *flow
	// rejoined is the connection's reconnection count rejoin last
	// handled: a partition pulls only while it is the connection's (a pull
	// sent before rejoin's acknowledgements would be served what waits on
	// the redelivery queue).
	rejoined atomic.Uint64
	mem      memory // the runs' memory (memory.go)
	// trimMu makes the passes of trimClosed one at a time.
	trimMu sync.Mutex
	// reviving bounds the partitions reading idle shed runs back at once
	// (memory.go: reviveIdle).
	reviving chan struct{}
	// evBytes and evCount: the bytes and count of the events that came
	// (pullfloor.go).
	evBytes, evCount atomic.Int64
	pubs             sync.WaitGroup // split events being published, re-sends
	// floor is the pulls' waits for the partition furthest behind
	// (pullfloor.go).
	floor floorWaits
	// drains counts the partitions' consumers whose pulls are still
	// listened to (consume: a stopped consumer's until the broker ended
	// them); a stop waits for them (Drain: awaitPulls), within its
	// deadline; unlisten ends their wait (the stop's deadline, Close).
	drains   sync.WaitGroup
	unlisten context.Context
	deafen   context.CancelFunc
	dlq      deadLetters
	// origins says each event refused for its origin once per sender.
	origins originWarnings
	// roomW is the store watch's memory (room.go; the watch goroutine's).
	roomW roomWatch
	// health is what Ready reports (see watch).
	health    health
	stopWatch func()
	// rescanning is set while resendOverflow's pass runs.
	rescanning atomic.Bool
	// legacy is set while the earlier versions' partitioned stream is
	// drained.
	legacy atomic.Bool
	// lanePost keeps the lanes' changes comments (nil: none).
	lanePost *lanePoster
	// stopping is set once the table stops pulling (stop.go), and
	// stopped is done then: a sink waiting for a lease in doubt (Owns)
	// stops waiting.
	stopping atomic.Bool
	stopped  context.Context
	stop     context.CancelFunc
	// drainMu guards settlers: the goroutines recording the sinks'
	// deliveries of the partitions a stop drained, until each is handed
	// over. It is taken before Table.mu.
	drainMu  sync.Mutex
	settlers map[*part]func()
}

// Interface guard.
var _ fleet.Handler = (*Table)(nil)

// New opens the run table on the state bucket kv (EnsureBucket) and
// starts following the run index.
func New(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, cfg Config, log zerolog.Logger) (*Table, error) {
	if cfg.Partitions <= 0 {
		return nil, errors.New("runtable: partitions required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	cfg.Consumer = cfg.Consumer.withDefaults()
	if cfg.Deliveries != nil {
		cfg.Deliveries.track(cfg.Sinks, cfg.Partitions)
	}
	t := &Table{cfg: cfg, log: log, js: js, st: newStore(js, kv), m: cfg.Metrics, byPart: map[int]*part{}, leases: map[int]*fleet.Lease{},
		flow: newFlow(cfg.Consumer.AckWait, cfg.Consumer.MaxAckPending), mem: memory{budget: cfg.RunMemory}, reviving: make(chan struct{}, reviveAtOnce)}
	t.mem.brokerClosed.Store(cfg.BrokerClosedRunCost)
	t.stopped, t.stop = context.WithCancel(context.Background())
	t.unlisten, t.deafen = context.WithCancel(context.Background())
	// Whether the bucket takes atomic batches, and its room, as the watch
	// reads them (store.refreshRoom); unread (a busy broker), one write
	// at a time until the watch reads them.
	rctx, cancel := context.WithTimeout(ctx, bus.APITimeout)
	t.st.refreshRoom(rctx)
	cancel()
	if t.parser = cfg.Fold.Parser; t.parser == nil {
		t.parser = llamalog.MustParser()
	}
	t.index = newIndex()
	t.index.openCap = cfg.RunMemory / indexShare
	t.index.closedCap = cfg.RunMemory / indexShare
	if err := t.index.start(ctx, kv, log); err != nil {
		return nil, err
	}
	t.m.lanes.ix.Store(t.index)
	if cfg.LaneChanges != nil {
		t.lanePost = newLanePoster(t, *cfg.LaneChanges)
	}
	t.legacy.Store(cfg.Legacy)
	if cfg.Legacy {
		t.m.legacy.Set(1)
	}
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	t.rejoined.Store(t.js.Conn().Stats().Reconnects)
	wg.Add(4)
	go func() { defer wg.Done(); t.watch(wctx) }()
	go func() { defer wg.Done(); t.progress(wctx) }()
	go func() { defer wg.Done(); t.rejoins(wctx) }()
	go func() { defer wg.Done(); t.janitor(wctx, cfg.Store.Retention) }()
	if t.lanePost != nil {
		wg.Add(1)
		go func() { defer wg.Done(); t.lanePost.run(wctx) }()
	}
	t.stopWatch = func() { stop(); wg.Wait() }
	return t, nil
}

// Close stops following the index and the stream (after the fleet member
// handed every partition over), and waits for the split events still being
// published. Idempotent.
func (t *Table) Close() {
	if t.stop != nil {
		t.stop()
		t.deafen()
	}
	t.pubs.Wait()
	t.drains.Wait()
	if t.stopWatch != nil {
		t.stopWatch()
		t.stopWatch = nil
	}
	t.index.stop()
}

// partitionOf is the partition of a run among n.
func partitionOf(runID string, n int) int { return bus.PartitionOf(runID, n) }

// part returns partition p's table while this aggregator owns it (nil
// otherwise).
func (t *Table) part(p int) *part {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byPart[p]
}

// Owns says whether this aggregator owns runID's partition and its lease is
// valid: the sinks' guard (a split of a partition that moved is the next
// owner's to send). A lease in doubt is waited for (see held), until the
// table stops pulling.
func (t *Table) Owns(runID string) bool {
	t.mu.RLock()
	l := t.leases[partitionOf(runID, t.cfg.Partitions)]
	t.mu.RUnlock()
	return held(t.stopped, l)
}

// held says whether l is valid. A lease in doubt (its validity ran out
// while its renewal's answer is late) is waited for, until it is valid
// again, lost, or ctx ends: its partition's work is kept, not handed back,
// and nothing is written to the sinks meanwhile.
func held(ctx context.Context, l *fleet.Lease) bool {
	return l != nil && (l.Valid() || l.Await(ctx))
}

// Acquired loads partition p's open runs (l is its lease) and starts
// consuming it: fleet.Handler.
func (t *Table) Acquired(ctx context.Context, l *fleet.Lease) error {
	// A lease of this member lost and not yet dropped (the partition was
	// taken again meanwhile): its table stops first.
	if old := t.part(l.Partition); old != nil && old.lease != l {
		t.Lost(old.lease)
	}
	t.mu.Lock()
	t.leases[l.Partition] = l
	t.mu.Unlock()
	pt := newPart(t, l)
	if err := pt.load(ctx); err != nil {
		t.dropLease(l)
		return err
	}
	if err := pt.startConsumers(ctx); err != nil {
		pt.forget()
		t.dropLease(l)
		return err
	}
	t.mu.Lock()
	t.byPart[pt.p] = pt
	n := len(t.byPart)
	t.mu.Unlock()
	t.m.owned.Set(float64(n))
	pt.startLoop()
	if t.lanePost != nil {
		t.lanePost.acquired(pt.p)
	}
	return nil
}

// Release hands partition p over: it stops consuming, writes and
// acknowledges what its runs hold, lets the sinks settle the splits just
// written (a bounded wait), and forgets the partition: fleet.Handler.
func (t *Table) Release(ctx context.Context, l *fleet.Lease) {
	defer t.dropLease(l) // last: the sinks may write until then
	pt := t.detach(l)
	if pt == nil {
		return
	}
	pt.finishConsumers()
	pt.stopLoop()
	t.stopSettling(pt)
	if pt.drained.Load() {
		// A stop wrote what it held and closed the sinks: what they
		// settled is recorded, the rest is the next owner's.
		pt.settle(ctx)
	} else {
		pt.checkpoint(ctx, true, causeLast)
		if t.lanePost != nil {
			t.lanePost.settle(pt.p, time.Now().Add(releaseSettle))
		}
		if t.cfg.Deliveries != nil {
			deadline := time.Now().Add(releaseSettle)
			for t.cfg.Deliveries.pending(pt.p) && time.Now().Before(deadline) && l.Valid() {
				time.Sleep(5 * time.Millisecond)
			}
			pt.settle(ctx)
		}
	}
	pt.unpin(ctx)
	pt.forget()
}

// Lost drops partition p at once, writing nothing: its messages not yet
// acknowledged go back to the stream for its next owner (fleet.Handler).
func (t *Table) Lost(l *fleet.Lease) {
	t.dropLease(l)
	pt := t.detach(l)
	if pt == nil {
		return
	}
	for _, c := range pt.cons {
		if c.finish != nil {
			c.lose() // (at once if the lease's loss did not stop it yet)
		}
	}
	pt.stopConsumers()
	pt.stopLoop()
	t.stopSettling(pt)
	pt.handBackPending("lost")
	pt.forget()
}

// detach removes l's partition from the table, unless the partition there
// is another lease's (this member lost l and took the partition again).
func (t *Table) detach(l *fleet.Lease) *part {
	t.mu.Lock()
	defer t.mu.Unlock()
	pt := t.byPart[l.Partition]
	if pt == nil || pt.lease != l {
		return nil
	}
	delete(t.byPart, l.Partition)
	t.m.owned.Set(float64(len(t.byPart)))
	return pt
}

// dropLease forgets l: a failed Acquired, the end of Release, Lost.
func (t *Table) dropLease(l *fleet.Lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leases[l.Partition] == l {
		delete(t.leases, l.Partition)
	}
}

// parts returns the partitions owned.
func (t *Table) parts() []*part {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]*part, 0, len(t.byPart))
	for _, pt := range t.byPart {
		out = append(out, pt)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].p < out[j].p })
	return out
}

// Snapshot returns the current split of a run: from memory while its
// partition is owned here, else from the bucket.
func (t *Table) Snapshot(ctx context.Context, id string) (split.Report, bool, error) {
	p := partitionOf(id, t.cfg.Partitions)
	if pt := t.part(p); pt != nil {
		pt.mu.Lock()
		if r := pt.runs[id]; r != nil {
			rep := Report(r.st)
			pt.mu.Unlock()
			return rep, true, nil
		}
		pt.mu.Unlock()
	}
	st, err := t.read(ctx, id)
	if errors.Is(err, errNotFound) {
		return split.Report{}, false, nil
	}
	if err != nil {
		return split.Report{}, false, err
	}
	return Report(st), true, nil
}

// read reads a run's latest stored state: its open key, else its closed
// one.
func (t *Table) read(ctx context.Context, id string) (*RunState, error) {
	b, err := t.st.get(ctx, openKey(partitionOf(id, t.cfg.Partitions), id))
	if errors.Is(err, errNotFound) {
		b, err = t.st.get(ctx, stateKey(id))
	}
	if err != nil {
		return nil, err
	}
	st, err := decodeStored(t, stateKey(id), b)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, errNotFound
	}
	return st, nil
}

// decodeStored decodes a value stored under the open key of the run whose
// closed key is skey: a state, or the marker an earlier version left there
// (the bare run id, nil here), whose state is read from the run's closed
// key. Anything else is an error (errNotState, or the state's decoding).
func decodeStored(t *Table, skey string, b []byte) (*RunState, error) {
	if len(b) > 0 && b[0] != '{' {
		if stateKey(string(b)) == skey {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: %d bytes, starting %q", errNotState, len(b), b[:min(len(b), 32)])
	}
	return UnmarshalState(b, t.cfg.Fold)
}

// ReadState reads a run's latest stored state from a state bucket
// (`aggregator compare` with a run id); a closed run's SinksPending says
// whether its split waits for a sink.
func ReadState(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, partitions int, id string, opts split.Options) (*RunState, error) {
	t := &Table{cfg: Config{Partitions: partitions, Fold: opts}, st: newStore(js, kv)}
	st, err := t.read(ctx, id)
	if errors.Is(err, errNotFound) {
		return nil, fmt.Errorf("run %q: %w", id, ErrNoRun)
	}
	if err != nil {
		return nil, err
	}
	// A closed run's split is pending while its marker is there.
	if st.Closed && !st.SinksPending {
		_, err := t.st.get(ctx, pendKey(partitionOf(id, partitions), id))
		switch {
		case err == nil:
			st.SinksPending = true
		case !errors.Is(err, errNotFound):
			return nil, err
		}
	}
	return st, nil
}

// ErrNoRun says a run has no state in the bucket.
var ErrNoRun = errors.New("no such run in the state bucket")

// Closed reports how many splits were written since the start.
func (t *Table) Closed() int64 { return t.closed.Load() }

// Index returns the run index.
func (t *Table) Index() *Index { return t.index }

// RunSummary is one line of /runs.
type RunSummary struct {
	ID        string    `json:"id"`
	Host      string    `json:"host"`
	Lane      string    `json:"lane"`
	State     string    `json:"state"` // open, finished (split pending) or closed
	LastEvent time.Time `json:"last_event"`
	// ClosedAt is when the run's split was written (closed runs).
	ClosedAt time.Time `json:"closed_at,omitzero"`
	// Compact says the closed run's state was compacted.
	Compact bool `json:"compact,omitempty"`
	// Split is a closed run's figures (nil in an open run's summary, and
	// in a summary an earlier version wrote): the lane gauges, `aggregator
	// history` and the trend page read them instead of the run's state.
	Split *split.Figures `json:"split,omitempty"`
}

// Unlisted says how many open runs List leaves out, and why ("" when
// none): past its share of the runs' memory bound the run index counts
// open runs without keeping their summaries (index.go).
func (t *Table) Unlisted() (int64, string) {
	n, capBytes := t.index.Unlisted()
	if n == 0 {
		return 0, ""
	}
	return n, fmt.Sprintf("%d open runs not listed: the run index keeps open runs' summaries in at most %d KiB (1/%d of the runs' memory bound, from memory_limit_mib), and more runs are open; their states are in the state bucket (/runs/{id} reads one), and each is listed once it closes",
		n, capBytes>>10, indexShare)
}

// List returns every run (the index, with the open runs of the
// partitions owned as they are in memory), sorted by id.
func (t *Table) List(ctx context.Context) ([]RunSummary, error) {
	var out []RunSummary
	for after := ""; ; {
		page, more := t.ListPage(after, 10_000)
		out = append(out, page...)
		if !more || len(page) == 0 {
			return out, ctx.Err()
		}
		after = page[len(page)-1].ID
	}
}

// ListPage is List for one page: the runs after after, up to limit; more
// says another page follows.
func (t *Table) ListPage(after string, limit int) (out []RunSummary, more bool) {
	out, more = t.index.page(after, limit)
	live := map[string]RunSummary{}
	for _, pt := range t.parts() {
		pt.mu.Lock()
		for id, r := range pt.runs {
			o := r.st.Origin
			live[id] = RunSummary{ID: id, Host: o.Host, Lane: o.Lane, State: r.state(), LastEvent: r.st.LastEvent}
		}
		pt.mu.Unlock()
	}
	seen := make(map[string]bool, len(out))
	for i, r := range out {
		seen[r.ID] = true
		if lr, ok := live[r.ID]; ok {
			out[i].State, out[i].LastEvent = lr.State, lr.LastEvent
		}
	}
	// Runs in memory whose summary is not written (or not seen) yet; not
	// those the index counts as not listed.
	for id, lr := range live {
		if id > after && !seen[id] && !t.index.isUnlisted(id) && (!more || len(out) == 0 || id < out[len(out)-1].ID) {
			out = append(out, lr)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if len(out) > limit {
		out, more = out[:limit], true
	}
	return out, more
}
