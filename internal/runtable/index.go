package runtable

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// The run index: every run has a small summary key (sum.<skey>) in the
// state bucket, written when the run is first stored, when it closes and
// when it is compacted. Every aggregator watches those keys into memory,
// so /runs pages through any number of runs without reading their
// states, a partition's new owner finds the closed runs to compact, and
// the retention janitor the closed runs to drop.

// indexPrefix starts the summary keys.
const indexPrefix = "sum."

// summaryKey is the summary key of a run.
func summaryKey(runID string) string { return indexPrefix + stateKey(runID) }

// Index is the in-memory copy of the summary keys, sorted by run id, and
// the last closed split of every lane (see lanes.go).
//
// It holds a summary for every closed run in the bucket (up to closedCap
// bytes of them: past it, a stub of the older ones, see evict.go), and for the open
// runs (any partition's) up to openCap bytes of them: an open run past
// that is not listed, only counted (unlisted: a hash of its summary key,
// until its summary says it closed or is deleted), so a flood of open
// runs costs the index a few bytes a run past the cap, not a summary.
// What it takes is kept small: a summary's hosts, lanes and states are
// shared strings (up to maxNames of them), and a summary key is kept only
// when the run id cannot be read back from it. What the open runs'
// summaries and the unlisted entries take counts against the runs'
// memory bound (footprint, memory.go); the closed runs' are kept for
// store.retention and counted apart.
type Index struct {
	mu   sync.RWMutex
	m    map[string]RunSummary
	ids  []string          // sorted
	keys map[string]string // summary key -> run id, of the keys summaryID cannot read
	// openCap bounds what the open runs' summaries take, in bytes (0: no
	// bound; Table sets it to indexShare of Config.RunMemory).
	openCap int64
	// unlisted are the open runs not listed for openCap, by the hash of
	// their summary key (seed).
	unlisted map[uint64]struct{}
	seed     maphash.Seed
	// names are the hosts', lanes' and states' strings the summaries
	// share (there are as many as hosts and lanes, not runs).
	names map[string]string
	// runs and bytes are how many summaries of open runs ([0]) and of
	// closed runs ([1]) the index holds, and what they are taken to cost
	// (summaryCost).
	runs, bytes [2]atomic.Int64
	unlistedN   atomic.Int64 // len(unlisted)
	// closedCap bounds what the closed runs' summaries and stubs take, in
	// bytes (0: no bound; Table sets it to indexShare of
	// Config.RunMemory); past it the oldest are evicted to stubs
	// (evict.go). closedQ are the held closed runs, the first held
	// first (with ids no longer held, skipped).
	closedCap int64
	closedQ   []string
	stubs     map[string]closedStub
	groups    []stubGroup
	groupIDs  map[LaneKey]uint32
	// freeGroups are groups' places left by their last stub.
	freeGroups []uint32
	stubsN     atomic.Int64 // len(stubs)
	stubBytes  atomic.Int64 // what the stubs are charged (stubCost)
	mPeak      int          // the most summaries m held since it was made (shrink)
	lanes
	// members are every lane's closed runs with figures, its controls
	// too (lanechanges.go).
	members laneMembers
	// ready is closed once the keys present at the start were read.
	ready chan struct{}

	stopWatch func()
}

func newIndex() *Index {
	return &Index{m: map[string]RunSummary{}, keys: map[string]string{}, names: map[string]string{}, lanes: newLanes(),
		members: newLaneMembers(), ready: make(chan struct{}), unlisted: map[uint64]struct{}{}, seed: maphash.MakeSeed(),
		stubs: map[string]closedStub{}, groupIDs: map[LaneKey]uint32{}}
}

const (
	// indexShare is the share of the runs' memory bound (Config.RunMemory)
	// the run index's summaries of open runs may take.
	indexShare = 8 // 1/8
	// unlistedCost is what an open run not listed takes in the index (a
	// hash in a set, with the set's slack; measured by
	// TestBesideRunsCostCharged).
	unlistedCost = 40
)

// Unlisted is how many open runs the index does not list (past openCap),
// and the bound in bytes their summaries would pass (0: no bound).
func (ix *Index) Unlisted() (runs int64, capBytes int64) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return int64(len(ix.unlisted)), ix.openCap
}

const (
	// summaryBase is what a run's summary takes in the index beside its
	// id (its map slot and place in the sorted ids, with their slack),
	// figuresBase what a closed run's figures take beside their strings
	// (with the run's place in its lane); both measured by
	// TestBesideRunsCostCharged.
	summaryBase = 352
	figuresBase = 768
)

// summaryCost is what s is taken to cost in the index.
func summaryCost(s *RunSummary) int64 {
	c := summaryBase + int64(len(s.ID)+len(s.Host)+len(s.Lane))
	if f := s.Split; f != nil {
		c += figuresBase + int64(len(f.Model)+len(f.Build)+len(f.Commit)+len(f.CommitTime)+len(f.Started)+len(f.Issue)+len(f.ControlOf))
	}
	return c
}

// footprint is how many open runs (closed: closed runs) the index holds,
// listed or not (closed: held or evicted to a stub), and what they are
// taken to cost, in bytes.
func (ix *Index) footprint(closed bool) (runs int64, bytes int64) {
	k := kindOf(closed)
	runs, bytes = ix.runs[k].Load(), ix.bytes[k].Load()
	if !closed {
		u := ix.unlistedN.Load()
		runs, bytes = runs+u, bytes+u*unlistedCost
	} else {
		runs, bytes = runs+ix.stubsN.Load(), bytes+ix.stubBytes.Load()
	}
	return runs, bytes
}

func kindOf(closed bool) int {
	if closed {
		return 1
	}
	return 0
}

// count adds (n 1) or takes (n -1) s to or from the footprint.
func (ix *Index) count(s *RunSummary, n int64) {
	k := kindOf(s.State == "closed")
	ix.runs[k].Add(n)
	ix.bytes[k].Add(n * summaryCost(s))
}

// summaryID is the run id a summary key names, when the key says it
// (a plain run id's key); ok false otherwise.
func summaryID(key string) (string, bool) {
	const plain = indexPrefix + "run."
	if len(key) <= len(plain) || key[:len(plain)] != plain {
		return "", false
	}
	return key[len(plain):], true
}

// maxNames bounds the shared strings (a bus that names a host or lane of
// its own in every run must not grow them without end).
const maxNames = 4096

// name returns the shared copy of v. ix.mu is held.
func (ix *Index) name(v string) string {
	if n, ok := ix.names[v]; ok {
		return n
	}
	if len(ix.names) < maxNames {
		ix.names[v] = v
	}
	return v
}

// start follows the summary keys of kv; it returns once the keys present
// at the start were read (or after 10 s, with a warning: /runs fills in as
// they are read).
func (ix *Index) start(ctx context.Context, kv jetstream.KeyValue, log zerolog.Logger) error {
	ictx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ready, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); ix.watch(ictx, kv, log, ready) }()
	ix.stopWatch = func() { cancel(); <-done }
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		log.Warn().Msg("run index: not read within 10s; /runs fills in as it is read")
	case <-ctx.Done():
		ix.stop()
		return ctx.Err()
	}
	return nil
}

// ReadIndex reads every run's summary in kv once (`aggregator history`),
// sorted by run id. It waits for all of them until ctx ends.
func ReadIndex(ctx context.Context, kv jetstream.KeyValue, log zerolog.Logger) ([]RunSummary, error) {
	ix := newIndex()
	wctx, cancel := context.WithCancel(ctx)
	ready, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); ix.watch(wctx, kv, log, ready) }()
	select {
	case <-ready:
	case <-ctx.Done():
	}
	cancel()
	<-done
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("run index not read: %w", err)
	}
	out, _ := ix.page("", ix.Len())
	return out, nil
}

// stop stops following the keys (idempotent).
func (ix *Index) stop() {
	if ix.stopWatch != nil {
		ix.stopWatch()
		ix.stopWatch = nil
	}
}

// unlist keeps the open run of summary key key (not listed) counted only,
// when its summary s would pass openCap. ix.mu is held.
func (ix *Index) unlist(key string, s *RunSummary) bool {
	if ix.openCap <= 0 || s.State == "closed" {
		return false
	}
	if _, listed := ix.m[s.ID]; listed || ix.bytes[0].Load()+summaryCost(s) <= ix.openCap {
		return false
	}
	h := maphash.String(ix.seed, key)
	if _, ok := ix.unlisted[h]; !ok {
		ix.unlisted[h] = struct{}{}
		ix.unlistedN.Add(1)
	}
	return true
}

// isUnlisted says run id is an open run the index does not list.
func (ix *Index) isUnlisted(id string) bool {
	if ix.unlistedN.Load() == 0 {
		return false
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if len(ix.unlisted) == 0 {
		return false
	}
	_, ok := ix.unlisted[maphash.String(ix.seed, summaryKey(id))]
	return ok
}

// relist drops key from the unlisted runs, if it is one. ix.mu is held.
func (ix *Index) relist(key string) bool {
	if len(ix.unlisted) == 0 {
		return false
	}
	h := maphash.String(ix.seed, key)
	if _, ok := ix.unlisted[h]; !ok {
		return false
	}
	delete(ix.unlisted, h)
	ix.unlistedN.Add(-1)
	return true
}

func (ix *Index) put(key string, s RunSummary) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if st, ok := ix.stubs[s.ID]; ok {
		if s.State == "closed" && unixNano(s.ClosedAt) == st.at && (s.Split != nil) == st.figures {
			// The same close written again (compacted): its stub says so.
			st.compact, st.last = s.Compact, unixNano(s.LastEvent)
			ix.stubs[s.ID] = st
			return
		}
		// Opened again by a late event, or closed again (its open
		// summary between not seen: the watch gives a key's newest
		// value): held again, its new figures with it (the newest split
		// of its lane, it may be).
		ix.unstub(s.ID)
		ix.dropID(s.ID)
	}
	if ix.unlist(key, &s) {
		return
	}
	ix.relist(key)
	s.Host, s.Lane, s.State = ix.name(s.Host), ix.name(s.Lane), ix.name(s.State)
	old, had := ix.m[s.ID]
	if !had {
		i := sort.SearchStrings(ix.ids, s.ID)
		ix.ids = append(ix.ids, "")
		copy(ix.ids[i+1:], ix.ids[i:])
		ix.ids[i] = s.ID
	} else {
		ix.count(&old, -1)
	}
	hold := s.State == "closed" && (!had || old.State != "closed")
	if hold {
		ix.evictClosed(summaryCost(&s)) // room first: the count stays within closedCap
	}
	ix.count(&s, 1)
	ix.m[s.ID] = s
	if id, ok := summaryID(key); !ok || id != s.ID {
		ix.keys[key] = s.ID
	}
	ix.relane(ix.m, s.ID, old, had)
	ix.members.refile(s.ID, &s)
	if hold {
		ix.holdClosed(s.ID)
	}
}

// dropID takes id out of the sorted ids. ix.mu is held.
func (ix *Index) dropID(id string) {
	if i := sort.SearchStrings(ix.ids, id); i < len(ix.ids) && ix.ids[i] == id {
		ix.ids = append(ix.ids[:i], ix.ids[i+1:]...)
	}
}

// get returns a run's summary.
func (ix *Index) get(id string) (RunSummary, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	s, ok := ix.m[id]
	return s, ok
}

func (ix *Index) del(key string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.relist(key) {
		return
	}
	id, ok := ix.keys[key]
	if ok {
		delete(ix.keys, key)
	} else if id, ok = summaryID(key); !ok {
		return
	}
	if _, ok := ix.unstub(id); ok {
		ix.dropID(id)
		return
	}
	old, had := ix.m[id]
	if !had {
		return
	}
	delete(ix.m, id)
	ix.count(&old, -1)
	ix.relane(ix.m, id, old, true)
	ix.members.refile(id, nil)
	ix.dropID(id)
}

// page returns up to limit summaries with ids after after, sorted, and
// whether more follow.
func (ix *Index) page(after string, limit int) ([]RunSummary, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	i := sort.SearchStrings(ix.ids, after)
	if i < len(ix.ids) && ix.ids[i] == after {
		i++
	}
	end := min(len(ix.ids), i+limit)
	out := make([]RunSummary, 0, end-i)
	for _, id := range ix.ids[i:end] {
		if s, ok := ix.m[id]; ok {
			out = append(out, s)
		} else if st, ok := ix.stubs[id]; ok {
			out = append(out, ix.stubSummary(id, st))
		}
	}
	return out, end < len(ix.ids)
}

// expired returns the ids of partition p's runs (of n) closed before
// cutoff.
func (ix *Index) expired(p, n int, cutoff time.Time) []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var out []string
	for id, s := range ix.m {
		if s.State == "closed" && !s.ClosedAt.IsZero() && s.ClosedAt.Before(cutoff) && partitionOf(id, n) == p {
			out = append(out, id)
		}
	}
	c := unixNano(cutoff)
	for id, st := range ix.stubs {
		if st.at != 0 && st.at < c && partitionOf(id, n) == p {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// closedFull returns partition p's runs (of n) that are closed and not
// compacted.
func (ix *Index) closedFull(p, n int) []RunSummary {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var out []RunSummary
	for id, s := range ix.m {
		if s.State == "closed" && !s.Compact && partitionOf(id, n) == p {
			out = append(out, s)
		}
	}
	for id, st := range ix.stubs {
		if !st.compact && partitionOf(id, n) == p {
			out = append(out, RunSummary{ID: id, State: "closed", ClosedAt: fromUnixNano(st.at)})
		}
	}
	return out
}

// Len is the number of runs in the index.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.ids)
}

// watch follows the summary keys of kv into ix until ctx ends; ready is
// closed once the keys present at the start were read.
func (ix *Index) watch(ctx context.Context, kv jetstream.KeyValue, log zerolog.Logger, ready chan<- struct{}) {
	once := sync.Once{}
	done := func() { once.Do(func() { close(ready); close(ix.ready) }) }
	defer done()
	for ctx.Err() == nil {
		w, err := kv.Watch(ctx, indexPrefix+">")
		if err != nil {
			log.Debug().Err(err).Msg("run index: watch")
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
				continue
			}
		}
		for e := range w.Updates() {
			if e == nil {
				done()
				continue
			}
			switch e.Operation() {
			case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
				ix.del(e.Key())
			default:
				var s RunSummary
				if json.Unmarshal(e.Value(), &s) == nil && s.ID != "" {
					ix.put(e.Key(), s)
				}
			}
		}
		_ = w.Stop()
	}
}

// janitor deletes the closed runs past retention a minute after the start
// and then every hour, and every trimEvery those past the closed runs'
// memory share (trimClosed), until ctx ends.
func (t *Table) janitor(ctx context.Context, retention time.Duration) {
	if retention <= 0 && t.closedKeepCap() <= 0 {
		return
	}
	tk := time.NewTicker(trimEvery)
	defer tk.Stop()
	next := time.Now().Add(time.Minute)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		if retention > 0 && !time.Now().Before(next) {
			t.Expire(ctx, retention)
			next = time.Now().Add(time.Hour)
		}
		t.trimClosed(ctx)
	}
}

// Expire deletes the closed runs of the partitions owned whose split was
// written more than retention ago (their closed, open and summary keys,
// purged: the markers go by themselves), and returns how many.
func (t *Table) Expire(ctx context.Context, retention time.Duration) int {
	if retention <= 0 {
		return 0
	}
	n := 0
	cutoff := t.cfg.Now().Add(-retention)
	for _, pt := range t.parts() {
		for _, id := range t.index.expired(pt.p, t.cfg.Partitions, cutoff) {
			deleted, err := pt.expire(ctx, id, false)
			if err != nil {
				t.log.Warn().Err(err).Str("run_id", id).Msg("expired run not deleted")
				break
			}
			if deleted {
				n++
			}
		}
	}
	if n > 0 {
		t.log.Info().Int("runs", n).Dur("retention", retention).Msg("closed runs past store.retention deleted")
	}
	return n
}

// expire deletes the closed run id, unless a late event re-opened it;
// early (trimClosed: before store.retention) also unless its split is not
// settled by every sink yet, and its markers go after trimMarkerTTL. It
// holds pt.ckptMu: a compaction that read the run before would otherwise
// write it back after the deletion.
func (pt *part) expire(ctx context.Context, id string, early bool) (bool, error) {
	pt.ckptMu.Lock()
	defer pt.ckptMu.Unlock()
	t := pt.t
	pt.mu.Lock()
	live := pt.live(id)
	pt.mu.Unlock()
	if live {
		return false, nil // re-opened by a late event
	}
	ttl := markerTTL
	if early {
		ttl = trimMarkerTTL
		if pend, err := t.unsettled(ctx, pt.p, id); pend || err != nil {
			return false, err
		}
	}
	for _, k := range []string{stateKey(id), openKey(pt.p, id), summaryKey(id)} {
		if err := t.st.purgeTTL(ctx, pt.lease, k, ttl); err != nil {
			return false, err
		}
	}
	t.index.del(summaryKey(id))
	return true, nil
}
