package runtable

import (
	"context"
	"encoding/json"
	"math"
	"time"

	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// What the external tests (package runtable_test) look at inside.
var (
	StateKey   = stateKey
	OpenKey    = openKey
	PendKey    = pendKey
	SummaryKey = summaryKey

	Fingerprint     = fingerprint
	DigestFalseRate = digestFalseRate
)

// The bounds of a run's fingerprints.
const (
	DigestExact       = digestExact
	DigestFilterBytes = digestFilterBytes
)

// Get is Index.get: a run's summary in the run index.
func (ix *Index) Get(id string) (RunSummary, bool) { return ix.get(id) }

// Compacted is RunState.compacted.
func (st *RunState) Compacted() *RunState { return st.compacted() }

// Holds is RunState.holds.
func (st *RunState) Holds(d events.Decoded) bool { return st.holds(d) }

// PlainState is st as encoding/json writes the stored form (MarshalState
// splices the fold in instead).
func PlainState(st *RunState) ([]byte, error) {
	return json.Marshal(storedState{V: StateVersion, stateFields: (*stateFields)(st)})
}

// digestFalseRate is the chance that the filter holding n events says it
// took an event it did not (0 while the fingerprints are exact).
func digestFalseRate(n uint64) float64 {
	if n <= digestExact {
		return 0
	}
	// (1 - (1 - 1/m)^(k·n))^k, the filter's false positive rate.
	m := float64(digestFilterBytes * 8)
	k := float64(digestHashes)
	return math.Pow(1-math.Pow(1-1/m, k*float64(n)), k)
}

// RunMemory is what the runs the table holds in memory are taken to cost,
// in bytes, and how many open runs it keeps in the state bucket only.
func (t *Table) RunMemory() (used int64, shed int) {
	return t.mem.used.Load(), int(t.mem.cold.Load())
}

// RunMemoryCharged is what counts against the runs' memory bound: the
// runs held in memory and, of that, what every run costs wherever its
// state is (besideRuns: the run index, the cold entries, the broker's
// share).
func (t *Table) RunMemoryCharged() (total, beside int64) {
	beside = t.besideRuns()
	return t.mem.used.Load() + beside, beside
}

// SummaryCost is what a run's summary is taken to cost in the run index.
func SummaryCost(s RunSummary) int64 { return summaryCost(&s) }

// IsShed says open run id is kept in the state bucket only.
func (t *Table) IsShed(id string) bool {
	pt := t.part(partitionOf(id, t.cfg.Partitions))
	if pt == nil {
		return false
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	_, ok := pt.cold[id]
	return ok
}

// NewRunCost is what a run not written yet is taken to cost in memory,
// RunCost one whose state was encoded in so many bytes.
const NewRunCost = newRunCost

// IndexShare is the share (1/IndexShare) of the runs' memory bound the
// run index's open summaries, and its closed ones, may each take.
const IndexShare = indexShare

var RunCost = runCost

// OnCompactRead has f told each run a compaction read and is about to
// write back (f may block it there), until the returned func is called.
func OnCompactRead(f func(id string)) (undo func()) {
	compactRead.Store(&f)
	return func() { compactRead.Store(nil) }
}

// OnCommitted has f told the last key of each write (or atomic batch) a
// commit got through, before it sends the next, until the returned func
// is called.
func OnCommitted(f func(key string)) (undo func()) {
	committed.Store(&f)
	return func() { committed.Store(nil) }
}

// OnConsumerStopped has f told the partition of each consumer that
// stopped handling messages, until the returned func is called.
func OnConsumerStopped(f func(p int)) (undo func()) {
	consumerStopped.Store(&f)
	return func() { consumerStopped.Store(nil) }
}

// SetPulls makes every pull of the partitions expire after expiry (busy
// or idle) and be given up grace after that, until the returned func is
// called.
func SetPulls(expiry, grace time.Duration) (undo func()) {
	testPulls.Store(&[2]time.Duration{expiry, grace})
	return func() { testPulls.Store(nil) }
}

// IndexOpen is what the run index holds of the open runs: how many it
// lists, what their summaries are charged, how many it does not list,
// and the bound of the listed summaries (bytes).
func (t *Table) IndexOpen() (listed, bytes, unlisted, capBytes int64) {
	ix := t.index
	unlisted, capBytes = ix.Unlisted()
	return ix.runs[0].Load(), ix.bytes[0].Load(), unlisted, capBytes
}

// IndexClosed is what the run index holds of the closed runs: how many
// summaries it holds, how many stubs (evicted), what both are charged,
// and their bound (bytes).
func (t *Table) IndexClosed() (held, stubs, bytes, capBytes int64) {
	ix := t.index
	_, bytes = ix.footprint(true)
	stubs, capBytes = ix.Evicted()
	return ix.runs[1].Load(), stubs, bytes, capBytes
}

// SetBrokerClosedRunCost stands in for Config.BrokerClosedRunCost: what a
// broker in this process takes for each closed run kept.
func (t *Table) SetBrokerClosedRunCost(b int64) { t.mem.brokerClosed.Store(b) }

// ClosedKept is what the closed runs kept are taken to cost (trim.go),
// and their share of the runs' memory bound.
func (t *Table) ClosedKept() (runs, bytes, capBytes int64) {
	runs, bytes = t.closedKept()
	return runs, bytes, t.closedKeepCap()
}

// TrimClosed is trimClosed: one pass of the janitor's deleting of closed
// runs past their share.
func (t *Table) TrimClosed(ctx context.Context) int { return t.trimClosed(ctx) }

// LaneRuns are lane k's runs the lane changes are made of (evict.go).
func (t *Table) LaneRuns(ctx context.Context, k LaneKey) []regress.Run { return t.laneRuns(ctx, k) }

// SetWatchEvery sets how often a table watches its consumers (watch) and
// asks a quiet one, or the stream, again (info), for the tables started
// after it; it returns what puts them back. Only serial tests use it.
func SetWatchEvery(watch, info time.Duration) (restore func()) {
	w, i := watchEvery, infoEvery
	watchEvery, infoEvery = watch, info
	return func() { watchEvery, infoEvery = w, i }
}

// HoldForHeap has the table take its live heap for past its share by over
// bytes (0: not past: the heap is measured again), and hold a pull or a
// close pass at most holdFor (0: holdAtMost).
func (t *Table) HoldForHeap(over int64, holdFor time.Duration) {
	t.mem.holdFor.Store(int64(holdFor))
	if over <= 0 {
		t.mem.excess.Store(nil)
		return
	}
	f := func() int64 { return over }
	t.mem.excess.Store(&f)
}

// HeldNow is how many pulls and how many close passes are held for the
// heap now.
func (t *Table) HeldNow() (pulls, passes int) {
	for _, pt := range t.parts() {
		if pt.held.Load() {
			passes++
		}
	}
	return int(t.mem.pullsHeld.Load()), passes
}

// PullExpiry is a busy partition's pull's expiry, PullBatch the most a
// pull asks for.
const (
	PullExpiry = pullExpiry
	PullBatch  = pullBatch
)

// SetPullFloor has the table take its broker for in this process, with a
// span of span bytes of events a consumer may run ahead of the one
// furthest behind, and stale for floorStale (pullfloor.go).
func (t *Table) SetPullFloor(span int64, stale time.Duration) {
	t.floor.stale.Store(int64(stale))
	t.floor.span.Store(span)
}

// PullsAtFloor is how many pulls wait for the floor now.
func (t *Table) PullsAtFloor() int { return int(t.floor.waiting.Load()) }

// GatePulls holds every table's next pull of a partition, before its
// floor is looked at, while gate says so (given the table's group, the
// partition, and the stream sequence of its consumer's last message and
// the events it said were behind it), until the returned func is called.
func GatePulls(gate func(group string, p int, seq, behind uint64) bool) (undo func()) {
	testPullGate.Store(&gate)
	return func() { testPullGate.Store(nil) }
}

// AtomicBatches says the table writes the state bucket in atomic batches.
func (t *Table) AtomicBatches() bool { return t.st.atomic.Load() }
