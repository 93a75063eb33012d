package runtable

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sync/atomic"
	"time"
)

// Memory: what the runs of a table take in memory is bounded by
// Config.RunMemory (serve derives it from memory_limit_mib, see
// internal/app/aggregator's runMemory). Two things count against it:
//
//   - the runs held in memory (the partitions' own open runs). A run is
//     taken to cost twice its encoded state (measured: a run with only its
//     start takes 1.2 KiB of heap for 0.7 KiB encoded, an open run of the
//     4B kind 14.4 KiB for 8.7 KiB) and what the table keeps beside it
//     (runOverhead); a run not written yet newRunCost;
//   - what every open run costs this process wherever its state is
//     (besideRuns): its summary in the run index (Index.footprint: every
//     open run of every partition is in it), the cold entry of a shed run
//     (coldEntryCost), and Config.BrokerRunCost an open run for a broker
//     in the same process (the embedded server's index of the run's keys
//     in the state bucket). That part grows with the open runs that
//     exist, not with those in memory, so the more runs are open the
//     fewer the table holds in memory;
//   - the closed runs' summaries in the run index, kept for
//     store.retention: at most their share of the bound (indexShare),
//     past which the older are evicted to stubs (evict.go); the stubs;
//     and Config.BrokerClosedRunCost a closed run for a broker in the
//     same process (its closed key, kept for store.retention). Neither
//     can be shed: past the bound they leave the open runs less room.
//
// The count is a model; the heap is measured too: while the heap live
// after the last collection passes heapShare of the Go runtime's soft
// memory limit (serve sets it from memory_limit_mib), the runs count as
// past the bound, and shedding takes out twice the excess more.
//
// Past the bound:
//
//   - each partition, after its checkpoint, sheds its runs that hold
//     nothing unwritten (written, not finished, not closing), those idle
//     the longest first, until the table is back under shedTo of the
//     bound: they stay open in the state bucket (their open key), and in
//     memory only as a cold entry (the time of their last event, for the
//     idle timeout). A cold run is read back from the bucket's leader
//     when an event comes for it, or when its idle timeout passed (to be
//     closed);
//   - an event for a run not in memory waits for its partition's next
//     checkpoint (started at once) before it folds (waitRoom), so a flood
//     of new runs goes to the bucket at the pace the bucket takes it, and
//     what is not written yet stays within a partition's few pulls. The
//     message in hand keeps its ack wait from running out meanwhile (see
//     flow.go: the ledger); the partitions whose runs are in memory fold on.
//
// Readiness says "shedding" while runs are kept in the bucket, and the
// metrics gttsplit_runs_shed, gttsplit_runs_shed_total,
// gttsplit_run_memory_bytes and gttsplit_run_index_memory_bytes say how
// many and how much.

const (
	// runOverhead is what the table keeps for a run beside its state;
	// newRunCost what a run not written yet is taken to cost.
	runOverhead = 1 << 10
	newRunCost  = 4 << 10
	// shedTo is the share of the bound shedding brings the runs down to.
	shedTo = 0.9
	// reviveBatch bounds the cold runs one pass reads back to close.
	reviveBatch = 32
	// reviveAtOnce bounds the partitions reading back at once (the
	// others' passes close what they hold and read back at a later
	// one): the embedded broker reads a whole block of the bucket (4
	// MiB) for a key, and each partition's oldest idle runs lie in a block
	// of their own once the partitions went at different paces (16
	// partitions reading back together held 20 such blocks, 80 MiB, in a
	// flood of 50,000 closing runs).
	reviveAtOnce = 2
	// reviveSpan is how far past the cold runs written first (of every
	// partition owned) a partition reads back its own (bytes the table
	// wrote to the bucket in between, store.pos): a block of the bucket.
	// Past it a partition waits for those further behind, so that the
	// read-backs of every partition fall in the same few blocks, which
	// the broker keeps for 10 s after their last read: each partition
	// reading back its own oldest, 2 at a time, kept 7-8 blocks (28-32
	// MiB) of the bucket in a flood of 100,000 closing runs.
	reviveSpan = 4 << 20
	// heldSpan is how far past the held runs due by their idle timeout
	// written first (of every partition owned) a partition closes its
	// own (heldInSpan): a block of the bucket. A close purges the run's
	// open key and writes its summary anew, and the embedded broker loads
	// the whole block (4 MiB) that holds a message to remove it: held runs
	// closed in the order of their ids removed from every block the
	// held runs' states fill (9-10 blocks, 36-40 MiB, at the peak of a
	// flood of 100,000 closing runs).
	heldSpan = 4 << 20
	// floorStale is how long a partition's cold floor (reviveIdle) is
	// taken into account: a partition whose passes stopped (held, or
	// stuck on a write) does not hold the others' read-backs for longer.
	floorStale = holdAtMost
	// coldEntryCost is what a shed run's cold entry takes beside its id
	// (a map slot of an id and a time, with the map's slack; measured
	// by TestBesideRunsCostCharged).
	coldEntryCost = 88
)

// memory is the table's account of its runs in memory.
type memory struct {
	budget int64        // Config.RunMemory (<= 0: no bound)
	used   atomic.Int64 // the runs held in memory
	cold   atomic.Int64 // open runs kept in the bucket only
	// coldBytes is what their cold entries take.
	coldBytes atomic.Int64
	// pullsHeld is how many partitions' pulls wait for the heap (holdPull).
	pullsHeld atomic.Int64
	// excess stands in for heapExcess, holdFor (ns) for holdAtMost, when
	// a test sets them.
	excess  atomic.Pointer[func() int64]
	holdFor atomic.Int64
	// brokerClosed is Config.BrokerClosedRunCost (a test may change it).
	brokerClosed atomic.Int64
	// span stands in for reviveSpan, heldSpan for heldSpan, when a test
	// sets them (> 0).
	span, heldSpan atomic.Int64
	// figure stands in for runtimeFigure in heapNear when a test sets it.
	figure atomic.Pointer[func(name string) (v, limit int64, ok bool)]
}

// coldRun is an open run kept in the state bucket only: its last event's
// time in Unix nanoseconds (for its idle timeout), and where its state
// was last written in the bucket (liveRun.at).
type coldRun struct{ last, at int64 }

// besideRuns is what the open runs cost this process wherever their state
// is: their summaries in the run index, the cold entries, and the
// broker's share (Config.BrokerRunCost an open run in the index); and
// what the closed runs' summaries and stubs take in the index, with the
// broker's share of them (Config.BrokerClosedRunCost a closed run).
func (t *Table) besideRuns() int64 {
	n, b := t.index.footprint(false)
	nc, closed := t.index.footprint(true)
	return b + closed + t.mem.coldBytes.Load() + n*t.cfg.BrokerRunCost + nc*t.mem.brokerClosed.Load()
}

// memUsed is what counts against the bound: the runs in memory and
// besideRuns.
func (t *Table) memUsed() int64 { return t.mem.used.Load() + t.besideRuns() }

// overMem says the runs passed the bound, or the heap passed heapShare of
// the runtime's limit.
func (t *Table) overMem() bool {
	return t.mem.budget > 0 && (t.memUsed() > t.mem.budget || t.heapExcess() > 0)
}

// shedTarget is what shedding brings the runs down to: shedTo of the
// bound, and while the heap is past heapShare of the runtime's limit,
// twice that excess less than the runs are counted now (a run takes less
// than it is counted: 0.6 of it for a run of one start).
func (t *Table) shedTarget() int64 {
	target := int64(shedTo * float64(t.mem.budget))
	if ex := t.heapExcess(); ex > 0 {
		target = min(target, t.memUsed()-2*ex)
	}
	return target
}

// heapShare is the share of the Go runtime's soft memory limit the live
// heap may reach before the runs are shed whatever they are counted: the
// count is a model, and the rest of the process (the embedded broker's
// buffers above all) moves; past it the collector runs so often that it
// falls behind, and the limit is passed.
const heapShare = 0.75

// heapExcess is how far the heap live after the last collection is past
// heapShare of the runtime's soft memory limit (0: not past, or no
// limit).
func heapExcess() int64 {
	live, limit, ok := runtimeFigure("/gc/heap/live:bytes")
	if !ok {
		return 0
	}
	return max(0, live-int64(heapShare*float64(limit)))
}

// heapNear says the heap live after the last collection is past
// heapShare of the runtime's soft memory limit less a tenth of the limit
// (true: no limit, or no figure): then the held runs' closes keep to the
// held span (close.go: closeFirst).
func (t *Table) heapNear() bool {
	figure := runtimeFigure
	if f := t.mem.figure.Load(); f != nil {
		figure = *f
	}
	live, limit, ok := figure("/gc/heap/live:bytes")
	return !ok || float64(live) > (heapShare-0.1)*float64(limit)
}

// runtimeFigure is the runtime's metric name (a byte count) and its soft
// memory limit; ok is false when there is no limit or no such figure.
func runtimeFigure(name string) (v, limit int64, ok bool) {
	limit = debug.SetMemoryLimit(-1)
	if limit <= 0 || limit == math.MaxInt64 {
		return 0, 0, false
	}
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0, 0, false
	}
	return int64(s[0].Value.Uint64()), limit, true
}

// heapExcess is heapExcess(), or what a test has the table take for it.
func (t *Table) heapExcess() int64 {
	if f := t.mem.excess.Load(); f != nil {
		return (*f)()
	}
	return heapExcess()
}

// runCost is what a run whose state was last encoded in size bytes (0:
// never) is taken to cost in memory.
func runCost(size int) int64 {
	if size == 0 {
		return newRunCost
	}
	return 2*int64(size) + runOverhead
}

// account counts r's cost anew (its size changed). pt.mu is held.
func (pt *part) account(r *liveRun) {
	c := runCost(r.size)
	pt.t.mem.used.Add(c - r.cost)
	r.cost = c
}

// addRun puts r in memory. pt.mu is held.
func (pt *part) addRun(id string, r *liveRun) {
	pt.runs[id] = r
	pt.account(r)
}

// removeRun takes run id out of memory. pt.mu is held.
func (pt *part) removeRun(id string) {
	if r := pt.runs[id]; r != nil {
		delete(pt.runs, id)
		pt.t.mem.used.Add(-r.cost)
		r.cost = 0
	}
}

// live says run id is open here: in memory or kept in the bucket. pt.mu
// is held.
func (pt *part) live(id string) bool {
	_, cold := pt.cold[id]
	return cold || pt.runs[id] != nil
}

// shed takes the partition's runs that hold nothing unwritten out of
// memory, those idle the longest first, while the table's runs pass
// shedTo of the bound; their state stays in the bucket. It reports how
// many it shed.
func (pt *part) shed() int {
	t := pt.t
	if !t.overMem() {
		return 0
	}
	pt.mu.Lock()
	type cand struct {
		id   string
		last time.Time
		at   int64
	}
	var cs []cand
	for id, r := range pt.runs {
		// A run whose close failed may have no open key any more
		// (unsure): read back, it would be taken for closed.
		if r.dirty || r.folds != r.written || r.closing != nil || r.unsure || !r.stored || r.st.Closed || r.st.Finished {
			continue
		}
		cs = append(cs, cand{id, r.st.LastEvent, r.at})
	}
	slices.SortFunc(cs, func(a, b cand) int { return a.last.Compare(b.last) })
	target := t.shedTarget()
	n := 0
	for _, c := range cs {
		if t.memUsed() <= target {
			break
		}
		pt.removeRun(c.id)
		pt.addCold(c.id, c.last, c.at)
		n++
	}
	pt.mu.Unlock()
	if n > 0 {
		t.m.shed.Add(float64(n))
	}
	t.memChanged()
	return n
}

// warmRun reads a cold run's state back from its open key (nil, nil when
// it is not cold, or not open any more). pt.mu is not held.
func (pt *part) warmRun(ctx context.Context, id string) (*liveRun, error) {
	pt.mu.Lock()
	_, cold := pt.cold[id]
	pt.mu.Unlock()
	if !cold {
		return nil, nil
	}
	b, err := pt.t.st.get(ctx, openKey(pt.p, id))
	if errors.Is(err, errNotFound) {
		return nil, nil // not open any more: its closed key tells
	}
	if err != nil {
		return nil, fmt.Errorf("open state of run %q: %w", id, err)
	}
	st, err := decodeStored(pt.t, stateKey(id), b)
	if err != nil || st == nil {
		return nil, fmt.Errorf("%w: the open state of run %q: %v", errNotState, id, err)
	}
	return &liveRun{st: st, stored: true, size: len(b)}, nil
}

// installWarm puts a run read back from the bucket in memory and returns
// it, unless one is there meanwhile (returned instead); a state read
// before the run was read back, written and shed again, or closed, is not
// put (it is returned as it is: lockRun asks again). pt.mu is held.
func (pt *part) installWarm(id string, r *liveRun) *liveRun {
	if cur := pt.runs[id]; cur != nil {
		return cur
	}
	c, ok := pt.cold[id]
	if !ok || c.last != r.st.LastEvent.UnixNano() {
		return r
	}
	r.at = c.at
	pt.uncold(id)
	pt.addRun(id, r)
	return r
}

// addCold keeps run id, whose last event came at last and whose state
// was written at at, in the bucket only. pt.mu is held.
func (pt *part) addCold(id string, last time.Time, at int64) {
	if _, ok := pt.cold[id]; !ok {
		pt.t.mem.cold.Add(1)
		pt.t.mem.coldBytes.Add(coldCost(id))
	}
	pt.cold[id] = coldRun{last: last.UnixNano(), at: at}
	if pt.coldSince.IsZero() || last.Before(pt.coldSince) {
		pt.coldSince = last
	}
}

// uncold drops run id's cold entry, if any. pt.mu is held.
func (pt *part) uncold(id string) {
	if _, ok := pt.cold[id]; ok {
		delete(pt.cold, id)
		pt.t.mem.cold.Add(-1)
		pt.t.mem.coldBytes.Add(-coldCost(id))
	}
}

// coldCost is what run id's cold entry is taken to cost.
func coldCost(id string) int64 { return coldEntryCost + int64(len(id)) }

// dueCold is which of the cold runs passed their idle timeout at now: the
// n written first (those whose state lies first in the bucket), in that
// order, with where each lies; with the oldest last event of them all,
// and whether every due run is in the n. In the order they were written,
// because the embedded broker reads a whole block (4 MiB) of the bucket
// for one key and keeps it while reads come: runs taken in the map's
// order read from all of the blocks the states fill (a flood of 100,000
// closing runs kept ~100 MiB of them), and so do runs taken by their last
// event when a run written long after its last event (kept in memory
// meanwhile) lies far from the others.
func dueCold(cold map[string]coldRun, now time.Time, idle time.Duration, n int) ([]stamped, time.Time, bool) {
	var due []stamped
	var oldest time.Time
	for id, c := range cold {
		last := time.Unix(0, c.last)
		if oldest.IsZero() || last.Before(oldest) {
			oldest = last
		}
		if now.Sub(last) > idle {
			due = append(due, stamped{id, c.at})
		}
	}
	whole := len(due) <= n
	sortStamped(due)
	return due[:min(n, len(due))], oldest, whole
}

// coldFloor is where the cold runs due that were written first lie in
// the bucket, of every partition owned whose passes said so within
// floorStale of now (math.MaxInt64: none).
func (t *Table) coldFloor(now time.Time) int64 {
	return t.floorOf(now, func(pt *part) (int64, int64) { return pt.coldFloor.Load(), pt.floorAt.Load() })
}

// floorOf is the least of the partitions' floors (what floor gives of
// each, with when it was said, Unix ns; 0: never) said within floorStale
// of now (math.MaxInt64: none).
func (t *Table) floorOf(now time.Time, floor func(*part) (at, said int64)) int64 {
	least := int64(math.MaxInt64)
	for _, pt := range t.parts() {
		at, said := floor(pt)
		if said == 0 || now.Sub(time.Unix(0, said)) > floorStale {
			continue
		}
		least = min(least, at)
	}
	return least
}

// reviveSpan is reviveSpan, or a test's.
func (t *Table) reviveSpan() int64 {
	if s := t.mem.span.Load(); s > 0 {
		return s
	}
	return reviveSpan
}

// dueInSpan is which cold runs of the partition a pass reads back to
// close: those past their idle timeout (up to reviveBatch, those written
// first: dueCold) that lie within reviveSpan of the due runs every
// partition owned wrote first (coldFloor), so that the read-backs of
// every partition fall in the same blocks of the bucket and the partition
// furthest behind goes first. It says where its own first due run lies
// for the others' passes.
func (pt *part) dueInSpan(now time.Time) []string {
	t := pt.t
	if t.cfg.IdleTimeout <= 0 {
		return nil
	}
	pt.mu.Lock()
	if len(pt.cold) == 0 || now.Sub(pt.coldSince) <= t.cfg.IdleTimeout {
		pt.mu.Unlock()
		pt.floorAt.Store(0)
		return nil // none is due yet
	}
	due, oldest, whole := dueCold(pt.cold, now, t.cfg.IdleTimeout, reviveBatch)
	if whole {
		pt.coldSince = oldest
	}
	pt.mu.Unlock()
	if len(due) == 0 {
		pt.floorAt.Store(0)
		return nil
	}
	pt.coldFloor.Store(due[0].at)
	pt.floorAt.Store(now.UnixNano())
	return withinSpan(due, t.coldFloor(now), t.reviveSpan(), len(due))
}

// withinSpan is the ids of the first n of due (sorted by where each
// lies) that lie within span past floor (math.MaxInt64: no partition
// said where it is, every one is within): the runs a pass takes, the
// others' due runs lying further behind going first.
func withinSpan(due []stamped, floor, span int64, n int) []string {
	upTo := floor
	if upTo <= math.MaxInt64-span {
		upTo += span
	}
	var ids []string
	for _, d := range due {
		if len(ids) >= n || d.at > upTo {
			break
		}
		ids = append(ids, d.id)
	}
	return ids
}

// heldFloorOf is where the held runs due written first lie in the
// bucket, of every partition owned whose close passes said so within
// floorStale of now (math.MaxInt64: none).
func (t *Table) heldFloorOf(now time.Time) int64 {
	return t.floorOf(now, func(pt *part) (int64, int64) { return pt.heldFloor.Load(), pt.heldAt.Load() })
}

// heldSpanOf is heldSpan, or a test's.
func (t *Table) heldSpanOf() int64 {
	if s := t.mem.heldSpan.Load(); s > 0 {
		return s
	}
	return heldSpan
}

// heldInSpan is which of the partition's held runs due by their idle
// timeout alone (due: each with where its state lies) a close pass
// closes, at most n: those written first, within heldSpan of the held
// due runs every partition owned wrote first (heldFloorOf), so that the
// removals of every partition's closes fall in the same few blocks of
// the bucket and the partition furthest behind goes first. It says
// where its own first due run lies for the others' passes (even when n
// is 0). Runs read back to be closed, a run whose close failed, and one
// of an unknown place are not given to it: they close at once.
func (pt *part) heldInSpan(now time.Time, due []stamped, n int) []string {
	t := pt.t
	if len(due) == 0 {
		pt.heldAt.Store(0)
		return nil
	}
	sortStamped(due)
	pt.heldFloor.Store(due[0].at)
	pt.heldAt.Store(now.UnixNano())
	return withinSpan(due, t.heldFloorOf(now), t.heldSpanOf(), n)
}

// reviveIdle reads back the cold runs whose idle timeout passed (those
// dueInSpan gives; at most reviveAtOnce partitions at once), so that
// closeDue closes them. pt.ckptMu is held.
func (pt *part) reviveIdle(ctx context.Context, now time.Time) {
	t := pt.t
	due := pt.dueInSpan(now)
	if len(due) == 0 {
		return
	}
	if t.reviving != nil {
		select {
		case t.reviving <- struct{}{}:
			defer func() { <-t.reviving }()
		default:
			return // others read back now: at a later pass
		}
	}
	defer t.memChanged()
	for _, id := range due {
		r, err := pt.warmRun(ctx, id)
		if err != nil {
			t.log.Debug().Err(err).Str("run_id", id).Msg("idle run not read back from the state bucket yet")
			return
		}
		pt.mu.Lock()
		if r == nil {
			// Its open key is gone: nothing to close.
			if _, ok := pt.cold[id]; ok {
				pt.uncold(id)
				t.m.runsOpen.Dec()
				t.log.Info().Str("run_id", id).Int("partition", pt.p).
					Msg("a shed run read back to be closed has no open state in the state bucket: closed elsewhere; not closed here")
			}
		} else if pt.installWarm(id, r) == r {
			r.warm = true // closed at once, not held to the held span
		}
		pt.mu.Unlock()
	}
}

// waitRoom: past the bound, an event for a run not in memory waits for the
// partition's next checkpoint, started now (it writes the partition's new
// runs, and sheds them), or for ctx, or at most the ack wait.
func (pt *part) waitRoom(ctx context.Context, id string) {
	t := pt.t
	if !t.overMem() {
		return
	}
	pt.mu.Lock()
	if pt.runs[id] != nil {
		pt.mu.Unlock()
		return
	}
	done := pt.ckptDone
	pt.mu.Unlock()
	t.m.memWaits.Inc()
	select {
	case pt.kick <- struct{}{}:
	default:
	}
	tm := time.NewTimer(t.cfg.Consumer.AckWait)
	defer tm.Stop()
	select {
	case <-done:
	case <-ctx.Done():
	case <-tm.C:
	}
}

// checkpointed tells the events waiting for room that a checkpoint
// ended. pt.mu is held.
func (pt *part) checkpointed() {
	close(pt.ckptDone)
	pt.ckptDone = make(chan struct{})
}

// forgetCold drops the partition's cold entries (it is handed over).
// pt.mu is held.
func (pt *part) forgetCold() {
	var b int64
	for id := range pt.cold {
		b += coldCost(id)
	}
	pt.t.mem.cold.Add(-int64(len(pt.cold)))
	pt.t.mem.coldBytes.Add(-b)
	pt.cold = map[string]coldRun{}
	pt.coldSince = time.Time{}
	pt.floorAt.Store(0)
	pt.heldAt.Store(0)
}

// memChanged sets the memory metrics and readiness.
func (t *Table) memChanged() {
	used, cold, beside := t.mem.used.Load(), t.mem.cold.Load(), t.besideRuns()
	t.m.runMemory.Set(float64(used))
	t.m.runIndexMemory.Set(float64(beside))
	t.m.runsShed.Set(float64(cold))
	if cold > 0 {
		t.health.set("shedding", fmt.Sprintf("shedding: %d open runs kept in the state bucket, not in memory (the runs' memory bound, %d MiB, is reached; %d MiB of it what every open run costs wherever its state is, its summary and cold entry, and the closed runs' summaries and stubs); each is read back when its next event comes",
			cold, t.mem.budget>>20, beside>>20))
	} else {
		t.health.clear("shedding")
	}
	t.heldChanged()
}
