package aggregator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// StateBucket is the JetStream key-value bucket that holds every run's
// durable state.
const StateBucket = "GTTSPLIT_RUNS"

// Tuning of the fold loop.
const (
	// flushEvery is the checkpoint interval when the config gives none
	// (ServiceConfig.CheckpointInterval).
	flushEvery = 50 * time.Millisecond
	// pendingMax bounds the messages folded and not yet acknowledged (it
	// bounds the memory they hold): a checkpoint starts once half of it
	// waits, and a handler that finds all of it waiting waits for one.
	// Without partitions the messages are kept whole (a lost
	// compare-and-set folds them again into the stored state); with
	// partitions only their acknowledgement handles are (a few hundred
	// bytes each), so more may wait, and each checkpoint's writes serve
	// more events.
	pendingMax     = 2048
	pendingMaxRefs = 16384
	// persistParallel bounds the run states a flush writes at once (the
	// writes are independent round trips to the server).
	persistParallel = 32
	// checkpointChunk bounds the run states a checkpoint holds encoded at
	// once (it encodes and writes them a chunk at a time).
	checkpointChunk = 256
	// closingRetry is when an event of a run whose close is being
	// written is delivered again.
	closingRetry = 100 * time.Millisecond
	// releaseSettle bounds how long a partition's release waits for the
	// sinks to settle the splits of its runs written just before.
	releaseSettle = 500 * time.Millisecond
	// drainSettle bounds how long Drain waits for finished runs to settle
	// (see ServiceConfig.AckFloor) before it closes them anyway.
	drainSettle = 3 * time.Second
	// dropGrace is how long a finished run whose collector dropped events
	// waits for the events still in flight before it closes.
	dropGrace = 5 * time.Second
)

// Service folds the events of every run from a durable JetStream consumer.
// A message is acknowledged only after the state of its run, with the
// message folded in, was written to the state bucket; so a killed and
// restarted service (or another aggregator on the same consumer) folds
// exactly what an uninterrupted one would have. Writes are compare-and-set
// on the key's revision: a write that loses a race with another aggregator
// re-reads the state and re-applies its events (the fold ignores what it
// already holds).
type Service struct {
	log  zerolog.Logger
	opts split.Options
	// parser is the folds' parser: its line filter spares Handle the
	// lines no rule reads.
	parser   *split.Parser
	idle     time.Duration
	js       jetstream.JetStream
	kv       jetstream.KeyValue
	sinks    *sinks.Fanout // nil: no sink
	print    func(split.Report)
	now      func() time.Time
	m        *metrics
	onClose  func(id string, r split.Report)
	ackFloor func(context.Context) (uint64, error)
	deliv    *deliveries
	dlqLog   bus.LogLimit

	// parts is the partition count when the service owns partitions of
	// runs (Serve); 0 when it folds whatever its consumer delivers.
	parts int
	// owned are the partitions taken (Acquire) and not released; ownMu
	// guards it (reloadSplit reads it from the sinks' goroutines).
	ownMu sync.Mutex
	owned map[int]bool
	// rescanning is set while resendOverflow's pass runs.
	rescanning atomic.Bool
	pubs       sync.WaitGroup // split events being published, resendOverflow's pass
	dlqMu      sync.Mutex
	dlqSeen    map[string]bool // dead letters counted (see dlqCount)
	// index is the run index (see index.go); nil without partitions.
	index     *runIndex
	stopIndex func()
	// compactAfter is ServiceConfig.CompactAfter; compactQ the closed runs
	// (of the partitions owned) whose state is still full, by close time.
	compactAfter time.Duration
	compactQ     []compactDue
	kvStream     jetstream.Stream // the bucket's stream (see purgeKeys)
	// expired are the summary keys Expire deleted (their delete markers
	// are purged at its next call).
	expired []string

	// flushMu makes flushes run one at a time: a checkpoint's writes
	// happen without mu (events go on folding), the next one starts from
	// the revisions they returned.
	flushMu sync.Mutex
	// kick asks Loop for a checkpoint before the interval: enough
	// messages wait, or a run is complete.
	kick chan struct{}
	// every is the checkpoint interval; kickAt the messages of one
	// partition waiting that start a checkpoint (half its consumer's
	// max_ack_pending: deliveries stop there); partPending counts them.
	every       time.Duration
	kickAt      int
	pendingMax  int
	partPending map[int]int

	mu      sync.Mutex
	runs    map[string]*liveRun
	pending []pendingMsg
	closed  atomic.Int64
	// ckpt is when the runs in memory were last all durable.
	ckpt atomic.Int64
}

// pendingMsg is a folded message awaiting its ack, with the live run it
// was folded into (so the flush need not decode it again).
type pendingMsg struct {
	ack bus.AckRef
	// msg is the whole message, kept only without partitions (see
	// pendingMax); nil otherwise.
	msg *bus.Msg
	run *liveRun
}

type liveRun struct {
	part  int // partition (0 when not partitioned)
	st    *RunState
	rev   uint64 // revision in the bucket; 0: not stored yet
	dirty bool   // events folded since the last checkpoint took the state
	// failed is set when a write of the run failed: it was forgotten, and
	// the messages folded into it are not acknowledged (redelivered, they
	// rebuild it from the last durable state). s.mu guards it.
	failed bool
	// closing is set while closeRuns writes the run's closed state
	// (without s.mu): its events wait (see Handle).
	closing bool
}

// ServiceConfig is what a Service needs besides the broker.
type ServiceConfig struct {
	Fold        split.Options
	IdleTimeout time.Duration
	Sinks       *sinks.Fanout
	// Print, if set, receives every split written to the sinks.
	Print func(split.Report)
	// OnClose, if set, is called after a run's split was written.
	OnClose func(id string, r split.Report)
	Now     func() time.Time
	// AckFloor, if set, returns the consumer's ack floor: the stream
	// sequence up to which every message was acknowledged, by any
	// aggregator sharing the consumer. A finished run is closed only once
	// the floor reached its run-finished event, so that no event published
	// before that one is still in flight: held unacknowledged by another
	// aggregator, or taken by one that crashed and due for redelivery
	// after the ack wait. A split written before them would be wrong (and
	// replaced later). Without AckFloor, or when it fails, a finished run
	// closes at once, or at the idle timeout. See ConsumerAckFloor.
	AckFloor func(ctx context.Context) (uint64, error)
	// Deliveries, when set, is the observer of Sinks' outcomes (see
	// deliveries): closed runs stay SinksPending until every sink settled
	// their split, and are re-sent after a restart until then.
	Deliveries *deliveries
	// Replicas of the state bucket when it is created (see EnsureBucket).
	Replicas int
	// Partitions, when set, is the partition count of the runs: the
	// service then loads open runs per partition (Acquire) instead of all
	// at start, and leaves a finished run that is not complete by content
	// open at Drain (its partition's next owner resumes it).
	Partitions int
	// CompactAfter is the grace a closed run keeps its full state for
	// (a late event within it re-opens the run and folds as before); then
	// the state is compacted (see RunState), and a new event for the run
	// is dead-lettered with reason "late". 0 never compacts.
	CompactAfter time.Duration
	// CheckpointInterval is how often Loop writes the changed runs'
	// states and acknowledges their messages (0: 50ms). A checkpoint
	// also starts early when a run is complete (its split is due), when
	// half of MaxAckPending messages of one partition wait, or when half
	// of pendingMax (pendingMaxRefs with partitions) wait in all.
	CheckpointInterval time.Duration
	// MaxAckPending is the consumers' max_ack_pending (0: a checkpoint
	// starts once 256 messages of one partition wait).
	MaxAckPending int
}

// EnsureBucket opens the state bucket, creating it with replicas when it
// is missing; an existing bucket with fewer replicas is raised to them,
// one with more keeps them (with a warning).
func EnsureBucket(ctx context.Context, js jetstream.JetStream, replicas int, log zerolog.Logger) (jetstream.KeyValue, error) {
	replicas = max(replicas, 1)
	kvc := jetstream.KeyValueConfig{
		Bucket:      StateBucket,
		Description: "gttsplit: durable state of every run",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}
	kv, err := js.KeyValue(ctx, StateBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, kvc)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, StateBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("state bucket %s: %w", StateBucket, err)
	}
	st, err := js.Stream(ctx, "KV_"+StateBucket)
	if err != nil {
		return nil, fmt.Errorf("state bucket %s: %w", StateBucket, err)
	}
	cur := st.CachedInfo().Config.Replicas
	bus.Drift(log.With().Str("bucket", StateBucket).Logger(), "nats.replicas", "state bucket", cur, replicas)
	if replicas > cur {
		log.Info().Int("from", cur).Int("to", replicas).Msg("nats.replicas: raising the state bucket's replicas")
		if kv, err = js.UpdateKeyValue(ctx, kvc); err != nil {
			return nil, fmt.Errorf("state bucket %s: raise replicas to %d: %w", StateBucket, replicas, err)
		}
	}
	return kv, nil
}

// NewService opens the state bucket and loads the runs still open in it.
func NewService(ctx context.Context, js jetstream.JetStream, cfg ServiceConfig, m *metrics, log zerolog.Logger) (*Service, error) {
	kv, err := EnsureBucket(ctx, js, cfg.Replicas, log)
	if err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if m == nil {
		m = newMetrics()
	}
	s := &Service{log: log, opts: cfg.Fold, idle: cfg.IdleTimeout, js: js, kv: kv, sinks: cfg.Sinks,
		print: cfg.Print, onClose: cfg.OnClose, now: cfg.Now, m: m, runs: map[string]*liveRun{},
		ackFloor: cfg.AckFloor, deliv: cfg.Deliveries, parts: cfg.Partitions, compactAfter: cfg.CompactAfter, owned: map[int]bool{},
		kick: make(chan struct{}, 1), every: cfg.CheckpointInterval, kickAt: max(cfg.MaxAckPending/2, 1), partPending: map[int]int{}}
	if s.parser = cfg.Fold.Parser; s.parser == nil {
		s.parser = split.MustParser() // what a fold without one uses
	}
	if s.kvStream, err = js.Stream(ctx, "KV_"+StateBucket); err != nil {
		return nil, fmt.Errorf("state bucket %s: %w", StateBucket, err)
	}
	if s.every <= 0 {
		s.every = flushEvery
	}
	if cfg.MaxAckPending <= 0 {
		s.kickAt = 256
	}
	s.pendingMax = pendingMax
	if s.parts > 0 {
		s.pendingMax = pendingMaxRefs
	}
	s.ckpt.Store(cfg.Now().UnixNano())
	if s.parts > 0 {
		s.index = newRunIndex()
		ictx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		ready, done := make(chan struct{}), make(chan struct{})
		go func() { defer close(done); s.index.watch(ictx, kv, log, ready) }()
		s.stopIndex = func() { cancel(); <-done }
		select {
		case <-ready:
		case <-time.After(10 * time.Second):
			log.Warn().Msg("run index: not read within 10s; /runs fills in as it is read")
		}
		return s, nil
	}
	if err := s.loadOpen(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// openKey is the marker of an open run in partition p: it lets the
// partition's next owner find the runs it must resume without reading
// every closed run.
func openKey(p int, runID string) string {
	return fmt.Sprintf("open.%d.%s", p, stateKey(runID))
}

// partOf is the partition of a run (0 when not partitioned).
func (s *Service) partOf(runID string) int {
	if s.parts == 0 {
		return 0
	}
	return bus.PartitionOf(runID, s.parts)
}

// Acquire loads the open runs of partition p (just taken over) from the
// state bucket, so their idle timeout runs here.
func (s *Service) Acquire(ctx context.Context, p int) error {
	lister, err := s.kv.ListKeysFiltered(ctx, fmt.Sprintf("open.%d.>", p))
	if err != nil {
		return fmt.Errorf("state bucket: %w", err)
	}
	var resend []*RunState
	var loaded []string
	n, taken := 0, false
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		if !taken {
			// Failed: the partition is not taken; what was loaded of it
			// goes (the next take-over loads it again).
			for _, id := range loaded {
				s.forget(id)
			}
		}
	}()
	for mk := range lister.Keys() {
		key := mk[len(fmt.Sprintf("open.%d.", p)):]
		st, rev, err := s.readState(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			s.purgeKeys(ctx, mk) // no delete marker left behind
			continue
		}
		if err != nil {
			return fmt.Errorf("state bucket: %w", err)
		}
		if st == nil {
			continue
		}
		if st.Closed {
			// The marker stays while the run's split is not settled by
			// every sink (sent again now) or its state is not compacted
			// (queued), so an owner that dies first leaves it to the next.
			if st.SinksPending {
				resend = append(resend, st)
			}
			s.queueClosed(st, p)
			if s.markerDone(st) {
				s.purgeKeys(ctx, mk)
			}
			continue
		}
		if s.runs[st.Origin.RunID] != nil {
			continue
		}
		s.runs[st.Origin.RunID] = &liveRun{part: p, st: st, rev: rev}
		s.m.runsOpen.Inc()
		loaded = append(loaded, st.Origin.RunID)
		n++
	}
	if err := ctx.Err(); err != nil {
		// The listing stops short silently when ctx ends.
		return fmt.Errorf("state bucket: open runs of partition %d: listing cut short: %w", p, err)
	}
	taken = true
	s.ownMu.Lock()
	s.owned[p] = true
	s.ownMu.Unlock()
	s.resend(ctx, resend)
	if n > 0 {
		s.log.Info().Int("partition", p).Int("runs", n).Msg("resumed open runs of the partition from the state bucket")
	}
	return nil
}

// Release writes what partition p's runs hold, acknowledges their
// messages and forgets them: the partition's next owner resumes them from
// the state bucket. The splits of the runs it closed are settled by the
// sinks first, for at most releaseSettle (else the next owner sends them
// again: the sinks are at least once).
func (s *Service) Release(ctx context.Context, p int) {
	// Splits of p the sinks deferred are no longer read back here (see
	// reloadSplit): the next owner re-sends them.
	s.ownMu.Lock()
	delete(s.owned, p)
	s.ownMu.Unlock()
	s.Flush(ctx)
	// A split written just before is settled by the sinks first (a
	// bounded wait), so that the next owner does not send it again.
	if s.deliv != nil {
		deadline := time.Now().Add(releaseSettle)
		for s.deliv.pending(func(run string) bool { return s.partOf(run) == p }) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		s.flushMu.Lock()
		s.settleDeliveries(ctx)
		s.flushMu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, r := range s.runs {
		if r.part == p && !r.dirty {
			s.forget(id)
		}
	}
	// The partition's next owner compacts them (it finds them by marker).
	s.compactQ = slices.DeleteFunc(s.compactQ, func(c compactDue) bool { return c.part == p })
}

// loadOpen brings the runs that were open when the last aggregator stopped
// back into memory, so their idle timeout runs again.
func (s *Service) loadOpen(ctx context.Context) error {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("state bucket: %w", err)
	}
	n := 0
	var resend []*RunState
	for key := range lister.Keys() {
		st, rev, err := s.readState(ctx, key)
		if err != nil || st == nil {
			continue
		}
		if st.Closed {
			if st.SinksPending {
				resend = append(resend, st)
			}
			s.queueClosed(st, 0)
			continue
		}
		s.runs[st.Origin.RunID] = &liveRun{st: st, rev: rev}
		n++
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("state bucket: open runs: listing cut short: %w", err)
	}
	s.resend(ctx, resend)
	s.m.runsOpen.Set(float64(n))
	if n > 0 {
		s.log.Info().Int("runs", n).Msg("resumed open runs from the state bucket")
	}
	return nil
}

// resend hands the sinks again the splits of closed runs that not every
// sink settled before the last aggregator stopped (the sinks are
// idempotent: a split they already have changes nothing).
func (s *Service) resend(ctx context.Context, sts []*RunState) {
	if s.sinks == nil || len(sts) == 0 {
		return
	}
	for _, st := range sts {
		s.resend1(ctx, st)
	}
	s.log.Info().Int("runs", len(sts)).Msg("re-sent splits whose delivery to the sinks was not confirmed")
}

// resend1 hands the sinks again the split of one closed run.
func (s *Service) resend1(ctx context.Context, st *RunState) {
	var rep split.Report
	if err := json.Unmarshal([]byte(st.Reported), &rep); err != nil {
		s.log.Warn().Err(err).Str("run_id", st.Origin.RunID).Msg("written split unreadable; not re-sent")
		return
	}
	if s.deliv != nil {
		s.deliv.queued(rep.Run.ID)
	}
	if err := s.sinks.Write(ctx, rep); err != nil {
		s.log.Warn().Err(err).Str("run_id", st.Origin.RunID).Msg("split not re-sent")
	}
}

// resendOverflow: a sink whose backlog passed even its deferred ids' cap
// dropped splits (they stay pending in the state bucket). Once no sink
// defers any more, the service reads the pending splits of the partitions
// it owns (all runs without partitions) from the bucket and sends them
// again, in the background, as a take-over does; a backlog that overflows
// again is caught by the next pass. Drain waits for it.
func (s *Service) resendOverflow(ctx context.Context) {
	if s.sinks == nil || s.deliv == nil || !s.deliv.overflow.Load() || !s.rescanning.CompareAndSwap(false, true) {
		return
	}
	for _, n := range s.sinks.Deferred() {
		if n > 0 {
			s.rescanning.Store(false)
			return
		}
	}
	s.deliv.overflow.Store(false)
	s.pubs.Add(1)
	go func() {
		defer s.pubs.Done()
		defer s.rescanning.Store(false)
		n, err := s.rescanPending(ctx)
		if err != nil {
			s.deliv.overflow.Store(true) // the next checkpoint tries again
			s.log.Warn().Err(err).Msg("splits a sink dropped: not all read back from the state bucket yet")
		}
		if n > 0 {
			s.log.Info().Int("runs", n).Msg("re-sent the splits a sink's full queue dropped (read back from the state bucket)")
		}
	}()
}

// rescanPending sends the sinks again the pending split of every closed run
// of the partitions owned (every run without partitions), read from the
// state bucket; it returns how many.
func (s *Service) rescanPending(ctx context.Context) (int, error) {
	var filters []string
	if s.parts > 0 {
		s.ownMu.Lock()
		for p := range s.owned {
			filters = append(filters, fmt.Sprintf("open.%d.", p))
		}
		s.ownMu.Unlock()
	} else {
		filters = []string{""}
	}
	n := 0
	for _, prefix := range filters {
		var lister jetstream.KeyLister
		var err error
		if prefix == "" {
			lister, err = s.kv.ListKeys(ctx)
		} else {
			lister, err = s.kv.ListKeysFiltered(ctx, prefix+">")
		}
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("state bucket: %w", err)
		}
		for key := range lister.Keys() {
			st, _, err := s.readState(ctx, strings.TrimPrefix(key, prefix))
			if err != nil || st == nil || !st.Closed || !st.SinksPending {
				continue
			}
			s.resend1(ctx, st)
			n++
		}
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("state bucket: listing cut short: %w", err)
		}
	}
	return n, nil
}

// reloadSplit is the sinks' FanoutConfig.Reload: a sink whose queue was
// full deferred a run's split, and now reads it back from the state bucket.
// It gives the run's latest split while the run is closed and its split is
// not settled by every sink; nothing when the run re-opened (its next close
// sends its split), was settled, is gone, or when its partition is no
// longer this aggregator's (its next owner re-sends the split when it takes
// the partition over).
func (s *Service) reloadSplit(ctx context.Context, sink, runID string) (split.Report, bool, error) {
	if s.parts > 0 {
		s.ownMu.Lock()
		own := s.owned[s.partOf(runID)]
		s.ownMu.Unlock()
		if !own {
			return split.Report{}, false, nil
		}
	}
	e, err := s.kv.Get(ctx, stateKey(runID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return split.Report{}, false, nil
	}
	if err != nil {
		return split.Report{}, false, fmt.Errorf("state bucket: %w", err)
	}
	st, err := UnmarshalState(e.Value(), s.opts)
	if err != nil {
		s.log.Warn().Err(err).Str("run_id", runID).Str("sink", sink).Msg("unreadable run state: deferred split not re-sent")
		return split.Report{}, false, nil
	}
	if !st.Closed || !st.SinksPending || st.Reported == "" {
		return split.Report{}, false, nil
	}
	var rep split.Report
	if err := json.Unmarshal([]byte(st.Reported), &rep); err != nil {
		s.log.Warn().Err(err).Str("run_id", runID).Str("sink", sink).Msg("written split unreadable: deferred split not re-sent")
		return split.Report{}, false, nil
	}
	return rep, true, nil
}

// settleDeliveries clears SinksPending of the closed runs whose split every
// sink settled. A failed or conflicting write is left for a later restart
// to re-send (harmless). s.mu is not held (a run re-opened meanwhile is
// caught by the compare-and-set of one write or the other).
func (s *Service) settleDeliveries(ctx context.Context) {
	if s.deliv == nil {
		return
	}
	for _, id := range s.deliv.take() {
		s.mu.Lock()
		live := s.runs[id] != nil
		s.mu.Unlock()
		if live {
			continue // re-opened: its next close decides
		}
		key := stateKey(id)
		e, err := s.kv.Get(ctx, key)
		if err != nil {
			continue
		}
		st, err := UnmarshalState(e.Value(), s.opts)
		if err != nil || !st.Closed || !st.SinksPending {
			continue
		}
		st.SinksPending = false
		if b, err := MarshalState(st); err == nil {
			if _, err := s.kv.Update(ctx, key, b, e.Revision()); err == nil && s.parts > 0 && s.markerDone(st) {
				s.purgeKeys(ctx, openKey(s.partOf(id), id))
			}
		}
	}
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)

// stateKey is the bucket key of a run: its id when that is a valid key, a
// hash otherwise (ids come from the network).
// readState reads the run state under key and its revision. A state that
// does not decode is logged and skipped (nil state, nil error); an error
// is the bucket's.
func (s *Service) readState(ctx context.Context, key string) (*RunState, uint64, error) {
	e, err := s.kv.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	st, err := UnmarshalState(e.Value(), s.opts)
	if err != nil {
		s.log.Warn().Str("key", key).Err(err).Msg("unreadable run state skipped")
		return nil, 0, nil
	}
	return st, e.Revision(), nil
}

func stateKey(runID string) string {
	if plainKey.MatchString(runID) {
		return "run." + runID
	}
	h := sha256.Sum256([]byte(runID))
	return "runx." + hex.EncodeToString(h[:16])
}

// Handle is the consumer's handler: it folds one message and queues it for
// acknowledgement after the next checkpoint (see Flush).
func (s *Service) Handle(ctx context.Context, msg bus.Msg) error {
	if msg.Metadata().NumDelivered > 1 {
		s.m.redelivered.Inc()
	}
	// The log lines no rule reads are counted, not unescaped (most of a
	// batch).
	lf := s.parser.NewLineFilter()
	d, err := msg.DecodeFiltered(lf.Keep)
	if err != nil {
		return s.deadLetter(ctx, msg, err)
	}
	if d.Type == events.TypeSplit {
		return msg.Ack()
	}
	t0 := time.Now()
	r, err := s.run(ctx, d.Origin)
	if err != nil {
		return err // nak: the bucket is not reachable
	}
	if d.Span != nil && lf.SkippedMarker() && r.st.Fold != nil && r.st.Fold.WantsDebug() {
		// The batch may hold the run's first -v marker, which the
		// filter leaves out: take it whole (the first batches of a
		// verbose log only).
		if whole, err := msg.Decode(); err == nil {
			d = whole
		}
	}
	if r.closing {
		// Its closed state is being written: the event comes again soon
		// and meets the closed run (a late event re-opens it).
		s.mu.Unlock()
		return msg.NakWithDelay(closingRetry)
	}
	if r.st.Compact() && !r.st.holds(d) {
		// New to a run whose record was compacted: not folded (see late).
		s.forget(d.Origin.RunID)
		s.mu.Unlock()
		return s.late(ctx, msg, r.st)
	}
	fresh := ApplyTo(r.st, d)
	due := false
	if fresh {
		if seq := msg.Metadata().StreamSeq; d.Finished != nil && seq > r.st.FinishedSeq {
			r.st.FinishedSeq = seq
		}
		r.st.LastEvent = s.now()
		r.dirty = true
		// A complete run closes at the next checkpoint: start it now.
		due = r.st.Finished && r.st.Fold.Complete()
	} else {
		// A duplicate (a redelivery, or an event re-published under
		// another message id): nothing to write, only to acknowledge.
		s.m.duplicates.Inc()
		if r.st.Closed && !r.dirty {
			s.forget(d.Origin.RunID) // loaded only to see it was a duplicate
		}
	}
	pm := pendingMsg{ack: msg.AckRef(), run: r}
	if s.parts == 0 {
		pm.msg = &msg
	}
	s.pending = append(s.pending, pm)
	n := len(s.pending)
	s.partPending[r.part]++
	due = due || s.partPending[r.part] >= s.kickAt || n >= s.pendingMax/2
	s.mu.Unlock()
	if fresh {
		s.m.foldSeconds.Observe(time.Since(t0).Seconds())
	}
	s.m.folded.Inc()
	switch {
	case n >= s.pendingMax:
		s.Flush(ctx) // the checkpoints fall behind: wait for one
	case due:
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// run returns the live run of o, loading it from the bucket (without s.mu)
// or creating it. It returns with s.mu held, unless it fails.
func (s *Service) run(ctx context.Context, o events.Origin) (*liveRun, error) {
	s.mu.Lock()
	if r := s.runs[o.RunID]; r != nil {
		return r, nil
	}
	s.mu.Unlock()
	r, err := s.load(ctx, o)
	s.mu.Lock()
	if cur := s.runs[o.RunID]; cur != nil {
		return cur, nil // loaded meanwhile by another handler
	}
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.runs[o.RunID] = r
	s.m.runsOpen.Inc() // a closed run re-opened by a late event counts again
	return r, nil
}

// load reads the state of o's run from the bucket, or returns a new one
// when there is none. (A state loaded here and written since by someone
// else is caught by the compare-and-set of the next write.)
func (s *Service) load(ctx context.Context, o events.Origin) (*liveRun, error) {
	e, err := s.kv.Get(ctx, stateKey(o.RunID))
	switch {
	case err == nil:
		st, err := UnmarshalState(e.Value(), s.opts)
		if err != nil {
			return nil, err
		}
		// A closed run that a new event re-opens needs its open marker
		// again (see write).
		st.reopen = st.Closed && !st.Compact()
		return &liveRun{part: s.partOf(o.RunID), st: st, rev: e.Revision()}, nil
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return &liveRun{part: s.partOf(o.RunID), st: NewRunState(o, s.opts)}, nil
	}
	return nil, fmt.Errorf("state of run %q: %w", o.RunID, err)
}

// NewRunState returns the empty state of a run of origin o.
func NewRunState(o events.Origin, opts split.Options) *RunState {
	return &RunState{Origin: o, Fold: split.NewFold(opts)}
}

// Bounds of a dead letter: the reason header and, for a message that
// cannot be dead-lettered as is, the body of its truncated copy.
const (
	dlqReasonMax = 1024
	dlqBodyMax   = 4096
)

// deadLetter publishes a message that cannot be folded to the dead-letter
// subject, with the reason, and terminates it. A message the broker will
// not take as a dead letter (over max_payload with the headers, or
// rejected by the stream) is dead-lettered as a truncated copy, its first
// dlqBodyMax bytes with a Gttsplit-Truncated header giving its size; if
// the broker rejects even that, the message is terminated all the same, so
// that poison always leaves the consumer. Only a transient failure (the
// broker away) leaves it for redelivery. The warnings are rate-limited.
func (s *Service) deadLetter(ctx context.Context, msg bus.Msg, cause error) error {
	reason := "invalid"
	switch {
	case errors.Is(cause, events.ErrUnknownType):
		reason = "unknown_type"
	case errors.Is(cause, errLate):
		reason = "late"
	}
	why := bus.Clip(cause.Error(), dlqReasonMax)
	subject := originalSubject(msg.Subject())
	o := originOf(subject)
	dm := nats.NewMsg(events.Subject(events.KindDLQ, o[0], o[1], o[2]))
	dm.Data = msg.Data()
	dm.Header.Set("Gttsplit-Reason", why)
	dm.Header.Set("Gttsplit-Original-Subject", subject)
	dm.Header.Set("Gttsplit-Stream-Seq", fmt.Sprint(msg.Metadata().StreamSeq))
	// A redelivered poison message (its ack wait ran out before the term)
	// is dead-lettered once: the stream drops the repeat.
	dm.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("dlq/%s/%d", msg.Metadata().Stream, msg.Metadata().StreamSeq))
	dlqID := dm.Header.Get(jetstream.MsgIDHeader)
	ack, err := s.js.PublishMsg(ctx, dm)
	if err == nil && ack.Duplicate && !s.dlqCount(dlqID) {
		return msg.Term() // dead-lettered and counted at an earlier delivery
	}
	truncated := false
	if err != nil && permanentPublishError(err) {
		truncated = true
		dm.Data = msg.Data()[:min(len(msg.Data()), dlqBodyMax)]
		dm.Header.Set("Gttsplit-Truncated", fmt.Sprint(len(msg.Data())))
		dm.Header.Set("Gttsplit-Dead-Letter-Error", bus.Clip(err.Error(), dlqReasonMax))
		_, err = s.js.PublishMsg(ctx, dm)
	}
	if err != nil && !permanentPublishError(err) {
		return fmt.Errorf("dead letter: %w", err) // nak: try again later
	}
	s.dlqCount(dlqID)
	s.m.dead.WithLabelValues(reason).Inc()
	if err != nil {
		s.dlqLog.Event(s.log.Error).Str("subject", subject).Str("reason", reason).Str("error", why).
			Str("dead_letter_error", bus.Clip(err.Error(), dlqReasonMax)).Msg("event terminated; the broker took no dead letter of it")
	} else {
		s.dlqLog.Event(s.log.Warn).Str("subject", subject).Str("reason", reason).Str("error", why).
			Bool("truncated", truncated).Msg("event dead-lettered")
	}
	return msg.Term()
}

// permanentPublishError reports whether the broker refused a message for
// what it is (too large, rejected by the stream), which sending it again
// would not change.
func permanentPublishError(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 500 && apiErr.Code != 408
}

// dlqCount records that the dead letter id was counted, and says whether
// it was not before (an earlier delivery's publish may have been stored
// with its answer lost: the repeat is then the one to count).
func (s *Service) dlqCount(id string) bool {
	s.dlqMu.Lock()
	defer s.dlqMu.Unlock()
	if s.dlqSeen == nil || len(s.dlqSeen) > 100_000 {
		s.dlqSeen = map[string]bool{}
	}
	if s.dlqSeen[id] {
		return false
	}
	s.dlqSeen[id] = true
	return true
}

// originalSubject returns the subject an event was published on: a
// message of the partitioned stream (gttsplitp.<P>.<kind>.<host>.<lane>.<run>)
// loses its partition prefix.
func originalSubject(subject string) string {
	toks := strings.Split(subject, ".")
	if len(toks) == 6 && toks[0] == bus.PartitionPrefix {
		return "gttsplit." + toks[2] + "." + toks[3] + "." + toks[4] + "." + toks[5]
	}
	return subject
}

// originOf reads host, lane and run from gttsplit.<kind>.<host>.<lane>.<run>.
func originOf(subject string) [3]string {
	out := [3]string{"_", "_", "_"}
	toks := strings.Split(subject, ".")
	if len(toks) == 5 {
		copy(out[:], toks[2:])
	}
	return out
}

// CheckpointAge is the time since the runs in memory were last all
// written to the state bucket.
func (s *Service) CheckpointAge() time.Duration { return s.now().Sub(time.Unix(0, s.ckpt.Load())) }

// Drain is the last flush of a stopping service: it flushes until no
// finished run waits for earlier events to be acknowledged, for at most
// drainSettle, then closes the finished runs that still wait (no other
// aggregator may know of them; a late event re-opens a run).
func (s *Service) Drain(ctx context.Context) {
	deadline := time.Now().Add(drainSettle)
	for {
		s.Flush(ctx)
		if !s.waiting() || !time.Now().Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(flushEvery):
		}
		if ctx.Err() != nil {
			break
		}
	}
	s.flushMu.Lock()
	s.mu.Lock()
	if s.parts == 0 {
		s.closeRuns(ctx, true)
	}
	s.mu.Unlock()
	s.flushMu.Unlock()
	s.pubs.Wait()
	s.closeIndex()
}

// waiting says a finished run is in memory and not closed.
func (s *Service) waiting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.runs {
		if r.st.Finished && !r.st.Closed && r.st.Fold.Complete() {
			return true
		}
	}
	return false
}

// write stores st under its run's key if the key is still at revision rev
// (rev 0: if there is no such key yet), and returns the new revision.
func (s *Service) write(ctx context.Context, st *RunState, rev uint64) (uint64, error) {
	b, err := MarshalState(st)
	if err != nil {
		return 0, err
	}
	return s.put(ctx, st, b, rev)
}

// put is write with st encoded in b; it reads no more of st than its
// origin, LastEvent, Closed and reopen (a checkpoint passes a copy without
// the fold, and clears the live state's reopen itself).
func (s *Service) put(ctx context.Context, st *RunState, b []byte, rev uint64) (uint64, error) {
	var err error
	key := stateKey(st.Origin.RunID)
	// An open run has its partition's open marker (so a new owner resumes
	// it) from its first write, and again from the write that re-opens it
	// after a close (the marker may be gone since).
	if s.parts > 0 && !st.Closed && (rev == 0 || st.reopen) {
		if _, err := s.kv.Put(ctx, openKey(s.partOf(st.Origin.RunID), st.Origin.RunID), []byte(st.Origin.RunID)); err != nil {
			return 0, err
		}
		s.putSummary(ctx, st, "open", time.Time{})
	}
	if rev == 0 {
		rev, err = s.kv.Create(ctx, key, b)
	} else {
		rev, err = s.kv.Update(ctx, key, b, rev)
	}
	if err == nil {
		s.m.stateWrites.Inc()
		if !st.Closed {
			st.reopen = false
		}
	}
	return rev, err
}

// isConflict says a compare-and-set write lost: the key exists, or is at
// another revision (code 10071, or 10164 on a replicated bucket).
func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongSequence(err)
}

func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// reload replaces r's state with the stored one, or forgets the run when
// the stored state is closed (another aggregator wrote its split). s.mu is
// held.
func (s *Service) reload(ctx context.Context, id string, r *liveRun) error {
	e, err := s.kv.Get(ctx, stateKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		// Vanished: the state in memory is written anew at the next flush.
		s.log.Warn().Str("run_id", id).Msg("run state vanished from the state bucket; written anew from memory")
		r.rev, r.dirty = 0, true
		return nil
	}
	if err != nil {
		return err
	}
	st, err := UnmarshalState(e.Value(), s.opts)
	if err != nil {
		return err
	}
	if st.Closed {
		s.forget(id)
		return nil
	}
	r.st, r.rev = st, e.Revision()
	return nil
}

// settled says every message before st's run-finished event was
// acknowledged (see ServiceConfig.AckFloor); *floor caches the ack floor
// for one pass of closeRuns.
func (s *Service) settled(ctx context.Context, st *RunState, floor **uint64) bool {
	if s.ackFloor == nil || st.FinishedSeq == 0 {
		return true
	}
	if *floor == nil {
		f, err := s.ackFloor(ctx)
		if err != nil {
			s.log.Debug().Err(err).Msg("ack floor not read; finished runs wait")
		}
		*floor = &f // 0 on an error: nothing settles in this pass
	}
	return **floor >= st.FinishedSeq
}

// cloneState returns a deep copy of st.
func cloneState(st *RunState, opts split.Options) (*RunState, error) {
	b, err := MarshalState(st)
	if err != nil {
		return nil, err
	}
	return UnmarshalState(b, opts)
}

// forget drops a run from memory (its state stays in the bucket). s.mu is
// held.
func (s *Service) forget(id string) {
	delete(s.runs, id)
	s.m.runsOpen.Dec()
}

// closeRuns writes the split of every finished run, and of every run idle
// for longer than the idle timeout (as incomplete). The closed state is
// written compare-and-set on the revision the split was computed from: if
// another aggregator wrote the run since, this split is stale and is not
// written; the stored state is taken instead, and the run is closed at a
// later flush if it is still due (or forgotten if it was closed). force
// closes finished runs that have not settled. Then it compacts the closed
// runs whose grace passed (see compactClosed). s.mu is held on entry and on
// return, and s.flushMu throughout; s.mu is let go while the closed states
// are written (events of the closing runs wait meanwhile, see Handle).
func (s *Service) closeRuns(ctx context.Context, force bool) {
	now := s.now()
	ids := make([]string, 0, len(s.runs))
	for id := range s.runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var floor *uint64 // read once, when a finished run needs it
	var cs []*closing
	for _, id := range ids {
		r := s.runs[id]
		if r.st.Closed || r.dirty || r.closing {
			continue
		}
		idle := s.idle > 0 && !r.st.LastEvent.IsZero() && now.Sub(r.st.LastEvent) > s.idle
		// A finished run closes once its fold holds everything its
		// collector announced (force: at a drain without partitions, as
		// no one else may know of it); else at the idle timeout.
		// A run whose collector dropped events never completes: it closes
		// once nothing came for dropGrace (what was in flight arrived).
		dropped := r.st.Dropped > 0 && !r.st.LastEvent.IsZero() && now.Sub(r.st.LastEvent) > dropGrace
		due := r.st.Finished && (force || (r.st.Fold.Complete() || dropped) && s.settled(ctx, r.st, &floor))
		if !idle && !due {
			continue
		}
		if c := s.closeCopy(r, id, now); c != nil {
			r.closing = true
			cs = append(cs, c)
		}
	}
	if len(cs) > 0 {
		// The writes go without s.mu (events of other runs fold
		// meanwhile), several at once.
		s.mu.Unlock()
		inParallel(len(cs), func(i int) { s.writeClosed(ctx, cs[i]) })
		s.mu.Lock()
	}
	for _, c := range cs {
		s.closed1(ctx, c)
	}
	s.compactClosed(ctx)
}

// closing is a run that closeRuns closes: the closed copy of its state,
// its encoding and split, and the outcome of the write.
type closing struct {
	id      string
	r       *liveRun
	st      *RunState
	b       []byte
	rev     uint64 // the revision the write replaces
	rep     split.Report
	changed bool // a split not written before
	now     time.Time
	newRev  uint64 // after the write
	err     error
}

// closeCopy makes r's closed state, its split and encoding; nil when that
// fails (logged). s.mu is held.
func (s *Service) closeCopy(r *liveRun, id string, now time.Time) *closing {
	// Close a copy: a failed write leaves the live state as it was. The
	// copy shares the fold (which nothing changes under s.mu but Handle,
	// and Handle leaves a closing run alone) unless the close finishes it.
	c := *r.st
	st := &c
	if !st.Finished {
		var err error
		if st, err = cloneState(r.st, s.opts); err != nil {
			s.log.Error().Err(err).Str("run_id", id).Msg("run state not copied")
			return nil
		}
		st.Fold.Finish(split.FinishInfo{Finished: now, Incomplete: true})
	}
	rep := Report(st)
	js, err := split.JSON(rep)
	if err != nil {
		s.log.Error().Err(err).Str("run_id", id).Msg("split not encoded")
		return nil
	}
	changed := string(js) != st.Reported
	st.Closed, st.ClosedAt = true, now
	st.Reported = string(js)
	if changed {
		st.Splits++
		st.SinksPending = s.sinks != nil
	}
	b, err := MarshalState(st)
	if err != nil {
		s.log.Error().Err(err).Str("run_id", id).Msg("closed state not encoded")
		return nil
	}
	return &closing{id: id, r: r, st: st, b: b, rev: r.rev, rep: rep, changed: changed, now: now}
}

// writeClosed writes a closed state, and then the run's summary and (when
// nothing needs it any more) the removal of its open marker. s.mu is not
// held.
func (s *Service) writeClosed(ctx context.Context, c *closing) {
	c.newRev, c.err = s.put(ctx, c.st, c.b, c.rev)
	if c.err != nil || s.parts == 0 {
		return
	}
	// The open marker stays while the split's delivery to the sinks is
	// pending or the state is not compacted: a partition's next owner
	// finds the run through it and sends the split again, or compacts it
	// (settleDeliveries and compactClosed remove it once both are done).
	if s.markerDone(c.st) {
		s.purgeKeys(ctx, openKey(c.r.part, c.id))
	}
	s.putSummary(ctx, c.st, "closed", c.now)
}

// closed1 ends the close of c after its write: the run leaves memory and
// its split goes to the split subject, the sinks and the printer. s.mu is
// held.
func (s *Service) closed1(ctx context.Context, c *closing) {
	r, id := c.r, c.id
	r.closing = false
	if isConflict(c.err) {
		s.m.conflicts.Inc()
		if err := s.reload(ctx, id, r); err != nil {
			s.m.persistErrs.Inc()
			s.log.Error().Err(err).Str("run_id", id).Msg("run state not read again; the run is closed later")
		}
		return
	}
	if c.err != nil {
		s.m.persistErrs.Inc()
		s.log.Error().Err(c.err).Str("run_id", id).Msg("closed state not written; the run is closed again later")
		return
	}
	r.st, r.rev = c.st, c.newRev
	if s.runs[id] == r { // (a partition's release may have dropped it)
		s.forget(id)
	}
	s.queueClosed(c.st, r.part)
	rep := c.rep
	status := "complete"
	if !rep.Run.Complete {
		status = "incomplete"
	}
	if !c.changed {
		return // the same split was already written
	}
	s.m.completed.WithLabelValues(status).Inc()
	s.closed.Add(1)
	s.publishSplit(ctx, rep, r.st.Splits-1)
	if s.sinks != nil {
		if s.deliv != nil {
			s.deliv.queued(rep.Run.ID)
		}
		if err := s.sinks.Write(ctx, rep); err != nil {
			s.log.Error().Err(err).Str("run_id", id).Msg("split not queued for the sinks")
		}
	}
	if s.print != nil {
		s.print(rep)
	}
	if s.onClose != nil {
		s.onClose(id, rep)
	}
	s.log.Info().Str("run_id", id).Str("status", status).Msg("split written")
}

// splitPublishTries bounds the attempts to publish one split event (with
// a doubling pause from 100 ms: about 100 s in all).
const splitPublishTries = 10

// publishSplit publishes the split as an event on gttsplit.split.>, in the
// background, retrying a failed publish (its message id makes a repeat a
// no-op); Drain waits for it.
func (s *Service) publishSplit(ctx context.Context, r split.Report, n int) {
	ev, err := events.NewSplit(r, n)
	var w events.Wire
	if err == nil {
		w, err = events.ToWire(ev)
	}
	if err != nil {
		s.log.Warn().Err(err).Str("run_id", r.Run.ID).Msg("split event not built")
		return
	}
	s.pubs.Add(1)
	go func() {
		defer s.pubs.Done()
		pause := 100 * time.Millisecond
		for try := 1; ; try++ {
			m := nats.NewMsg(w.Subject)
			m.Data = w.Data
			m.Header.Set(jetstream.MsgIDHeader, w.ID)
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, err := s.js.PublishMsg(pctx, m)
			cancel()
			if err == nil {
				return
			}
			s.m.splitPubErr.Inc()
			if try >= splitPublishTries {
				s.log.Error().Err(err).Str("run_id", r.Run.ID).Int("tries", try).Msg("split event not published")
				return
			}
			s.log.Warn().Err(err).Str("run_id", r.Run.ID).Msg("split event not published; retrying")
			time.Sleep(pause)
			pause *= 2
		}
	}()
}

// Snapshot returns the current split of a run (open, or from the bucket).
func (s *Service) Snapshot(ctx context.Context, id string) (split.Report, bool, error) {
	s.mu.Lock()
	if r := s.runs[id]; r != nil {
		rep := Report(r.st)
		s.mu.Unlock()
		return rep, true, nil
	}
	s.mu.Unlock()
	e, err := s.kv.Get(ctx, stateKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return split.Report{}, false, nil
	}
	if err != nil {
		return split.Report{}, false, err
	}
	st, err := UnmarshalState(e.Value(), s.opts)
	if err != nil {
		return split.Report{}, false, err
	}
	return Report(st), true, nil
}

// RunSummary is one line of /runs.
type RunSummary struct {
	ID        string    `json:"id"`
	Host      string    `json:"host"`
	Lane      string    `json:"lane"`
	State     string    `json:"state"` // open, finished (split pending) or closed
	LastEvent time.Time `json:"last_event"`
	// ClosedAt is when the run's split was written (closed runs).
	ClosedAt time.Time `json:"closed_at,omitzero"`
}

// List returns the open runs and, from the bucket, the closed ones: from
// the run index when the service has one (partitions), else by reading
// every run's state.
func (s *Service) List(ctx context.Context) ([]RunSummary, error) {
	if s.index != nil {
		var out []RunSummary
		for after := ""; ; {
			page, more := s.listPage(after, 10_000)
			out = append(out, page...)
			if !more || len(page) == 0 {
				return out, nil
			}
			after = page[len(page)-1].ID
		}
	}
	seen := map[string]bool{}
	var out []RunSummary
	s.mu.Lock()
	for id, r := range s.runs {
		st := "open"
		if r.st.Finished {
			st = "finished"
		}
		out = append(out, RunSummary{ID: id, Host: r.st.Origin.Host, Lane: r.st.Origin.Lane, State: st, LastEvent: r.st.LastEvent})
		seen[id] = true
	}
	s.mu.Unlock()
	lister, err := s.kv.ListKeys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, err
	}
	if lister != nil {
		for key := range lister.Keys() {
			e, err := s.kv.Get(ctx, key)
			if err != nil {
				continue
			}
			st, err := UnmarshalState(e.Value(), s.opts)
			if err != nil || seen[st.Origin.RunID] {
				continue
			}
			state := "open"
			switch {
			case st.Closed:
				state = "closed"
			case st.Finished:
				state = "finished"
			}
			out = append(out, RunSummary{ID: st.Origin.RunID, Host: st.Origin.Host, Lane: st.Origin.Lane, State: state, LastEvent: st.LastEvent})
		}
		if err := ctx.Err(); err != nil {
			return nil, err // the listing stopped short
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Closed reports how many splits were written since the start.
func (s *Service) Closed() int64 { return s.closed.Load() }
