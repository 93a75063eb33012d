package split

import (
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// The fold's state is bounded whatever the log holds, so a run's persisted
// state stays far below a broker's message limit: host-weight trace lines
// are folded into traceAcc (never stored one by one), malformed lines are
// counted, the first build, verbosity and legacy lines are kept on their
// own, and the other relevant lines are kept up to MaxRecords (see
// keepRecord for which go first). Every part is a function of the set of
// lines applied, so the fold stays order- and duplicate-free.
const (
	// MaxRecords bounds the relevant lines (other than trace lines) a fold
	// keeps. A run that has more drops the earliest lines of the kinds
	// that have the most (see keepRecord) and is flagged state_capped.
	MaxRecords = 2048
	// MaxTraceNames bounds the tensor-name hashes the trace keeps: up to
	// that many distinct names the count is exact; beyond, it is estimated
	// from the MaxTraceNames smallest hashes (flagged state_capped).
	MaxTraceNames = 4096
)

// traceAcc is the order-free fold of the host-weight trace lines: the line
// with the largest resident= (ties: the lowest position), the last line by
// position, how many lines, and the distinct tensor names (as hashes).
type traceAcc struct {
	N     int              `json:"n"`
	Max   *llamalog.Record `json:"max,omitempty"`
	MaxS  string           `json:"max_s,omitempty"` // stream of Max
	Last  *llamalog.Record `json:"last,omitempty"`
	LastS string           `json:"last_s,omitempty"` // stream of Last
	Names hashSet          `json:"names"`
}

// posLess orders lines by position: sequence number, then stream.
func posLess(aSeq uint64, aStream string, bSeq uint64, bStream string) bool {
	if aSeq != bSeq {
		return aSeq < bSeq
	}
	return aStream < bStream
}

func (t *traceAcc) add(stream string, r llamalog.Record) {
	t.addHashed(stream, &r, nameHash(r.Name), r.Name != "")
}

// addHashed is add with the tensor name given as its nameHash (named
// false: no name; r.Name is not used, and not kept). Max and Last are
// overwritten in place, so a trace line allocates nothing.
func (t *traceAcc) addHashed(stream string, r *llamalog.Record, name uint64, named bool) {
	t.N++
	if t.Max == nil || r.MiB > t.Max.MiB || r.MiB == t.Max.MiB && posLess(r.Seq, stream, t.Max.Seq, t.MaxS) {
		if t.Max == nil {
			t.Max = new(llamalog.Record)
		}
		*t.Max, t.MaxS = *r, stream
		t.Max.Name = ""
	}
	if t.Last == nil || posLess(t.Last.Seq, t.LastS, r.Seq, stream) {
		if t.Last == nil {
			t.Last = new(llamalog.Record)
		}
		*t.Last, t.LastS = *r, stream
		t.Last.Name = ""
	}
	if named {
		t.Names.add(name, MaxTraceNames)
	}
}

// names returns the number of distinct tensor names, and whether it is an
// estimate (more than MaxTraceNames).
func (t *traceAcc) names() (n int, estimated bool) {
	return t.Names.distinct(MaxTraceNames)
}

// nameHash is a 64-bit FNV-1a hash of s, finished with the splitmix64
// mixer so that the low and high bits are uniform (the distinct-count
// estimate needs uniform hashes).
func nameHash[T string | []byte](s T) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// hashSet keeps the k smallest distinct hashes it was given (a k-minimum-
// values sketch), sorted. Its content is a function of the set of hashes
// added, whatever the order; with at most k distinct hashes it is exact.
type hashSet struct {
	h    []uint64
	full bool // more than k distinct hashes were added
}

func (s *hashSet) add(h uint64, k int) {
	i, found := slices.BinarySearch(s.h, h)
	if found {
		return
	}
	if len(s.h) >= k {
		s.full = true
		if i >= len(s.h) {
			return // larger than the k smallest
		}
		s.h = slices.Insert(s.h, i, h)
		s.h = s.h[:k]
		return
	}
	s.h = slices.Insert(s.h, i, h)
}

// distinct returns the count of distinct hashes added: exact when the set
// never overflowed, else the k-minimum-values estimate (k-1)/u_k with u_k
// the k-th smallest hash as a fraction of the hash space.
func (s *hashSet) distinct(k int) (int, bool) {
	if !s.full {
		return len(s.h), false
	}
	u := float64(s.h[len(s.h)-1]) / math.Exp2(64)
	if u <= 0 {
		return len(s.h), true
	}
	return int(math.Round(float64(k-1) / u)), true
}

// MarshalJSON writes the hashes as one base64 string of big-endian words
// (8 bytes a hash instead of ~20 digits), "!"-prefixed when the set
// overflowed.
func (s hashSet) MarshalJSON() ([]byte, error) {
	b := make([]byte, 8*len(s.h))
	for i, h := range s.h {
		binary.BigEndian.PutUint64(b[8*i:], h)
	}
	enc := base64.RawStdEncoding.EncodeToString(b)
	if s.full {
		enc = "!" + enc
	}
	return json.Marshal(enc)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (s *hashSet) UnmarshalJSON(data []byte) error {
	var str string
	if err := json.Unmarshal(data, &str); err != nil {
		return err
	}
	full := len(str) > 0 && str[0] == '!'
	if full {
		str = str[1:]
	}
	b, err := base64.RawStdEncoding.DecodeString(str)
	if err != nil {
		return err
	}
	if len(b)%8 != 0 {
		return fmt.Errorf("hash set: %d bytes is not a multiple of 8", len(b))
	}
	hs := make([]uint64, len(b)/8)
	for i := range hs {
		hs[i] = binary.BigEndian.Uint64(b[8*i:])
	}
	if !slices.IsSorted(hs) {
		return fmt.Errorf("hash set: not sorted")
	}
	*s = hashSet{h: hs, full: full}
	return nil
}

// keep routes one parsed relevant line (applied for the first time) into
// the bounded state.
func (st *state) keep(k lineKey, r *llamalog.Record) {
	switch r.Kind {
	case llamalog.KindTrace:
		st.Trace.add(k.stream, *r)
	case llamalog.KindMalformed:
		st.Malformed++
	case llamalog.KindSummary:
		// never added to any row: nothing to keep
	case llamalog.KindBuild, llamalog.KindVerbosity, llamalog.KindLegacy:
		// Only the first line of each kind (by position) is used.
		if st.firsts == nil {
			st.firsts = map[llamalog.Kind]keyedRecord{}
		}
		if f, ok := st.firsts[r.Kind]; !ok || posLess(r.Seq, k.stream, f.Seq, f.Stream) {
			st.firsts[r.Kind] = keyedRecord{Stream: k.stream, Record: *r}
		}
	default:
		st.Capped++
		st.keepRecord(k, r, MaxRecords)
	}
}

// keepRecord adds a record to st.records, keeping at most limit of them.
// When the room is full a record goes (maybe the new one): the first in
// evictKey.less's order, the earliest of the lowest class of evictClass (the
// superseded kinds first, the model-load lines last), except that the
// latest limit/4 of each of the classes 0 and 1 always stay. So a log with
// more model loads than the room holds keeps the last loads' buffer lines
// and reservations, which are the live load's, and as many model-load
// lines as the rest of the room holds. Each class that gave up a record is
// marked in st.Dropped.
//
// The kept set is a function of the set of records applied, whatever the
// order: FuzzKeepRecordMatchesSort holds it equal to sharing the room out
// from every record at once. Below the limit a record is appended; at the
// limit it takes the slot of the one that goes (see evictQueue, built
// then): no allocation, and for lines applied in order no search.
func (st *state) keepRecord(k lineKey, r *llamalog.Record, limit int) {
	e := evictKey{seq: k.seq, stream: k.stream, class: evictClass(r), kind: r.Kind}
	if n := len(st.records); n < limit {
		e.slot = int32(n)
		if n == cap(st.records) {
			st.records = growBy(st.records, min(max(n/4, 8), limit-n))
		}
		st.records = append(st.records, keyedRecord{Stream: k.stream, Record: *r})
		if st.evict != nil {
			st.evict.insert(e)
		}
		return
	}
	q := st.evictOrder()
	c := q.victim(e.class, limit/4)
	st.Dropped |= 1 << c
	if c == e.class && (q.cls[c].empty() || e.less(q.cls[c].first())) {
		return // the first to go is this one
	}
	first := q.cls[c].first()
	e.slot = first.slot
	q.cls[c].dropFirst()
	st.records[e.slot] = keyedRecord{Stream: k.stream, Record: *r}
	q.insert(e)
}

// growBy returns s with room for exactly n more records. append (and
// slices.Grow) would double a slice this small: a served run that keeps
// one record past a power of two would hold twice its records (5.4 KiB an
// open run for the 4B run's 34), where a quarter more is at most a quarter
// spare for a few more copies.
func growBy(s []keyedRecord, n int) []keyedRecord {
	g := make([]keyedRecord, len(s), len(s)+n)
	copy(g, s)
	return g
}

// bulkRecords is how many kept records make a fold a bulk one (see
// growRecords).
const bulkRecords = 256

// growRecords makes room for n more records ahead of a piece of a log read
// in bulk (LogFeed). Past bulkRecords the records go straight to
// MaxRecords: a big log fills them, and growing 176-byte records by append
// (a dozen copies, each a fresh block the collector zeroes) cost more than
// parsing the lines they hold. A served run (AddLine) grows by a quarter
// (growBy): most keep a few dozen records, and each open run's spare room
// is memory.
func (st *state) growRecords(n int) {
	need := len(st.records) + n
	if need <= cap(st.records) || need <= bulkRecords || len(st.records) >= MaxRecords {
		return
	}
	st.records = slices.Grow(st.records, MaxRecords-len(st.records))
}

// evictClass orders the kinds of kept lines by what the rules lose when
// one goes (see keepRecord): 0 for lines a later one of their kind
// supersedes (compute reservations, which are redone for every batch
// shape, the memory breakdown tables, the echoes and output
// reallocations), 1 for the rest (KV, recurrent-state, output and unknown
// buffers), 2 for the model-load lines (load, model buffer and context
// lines, and the markers of which loads are live: draft, router, mmproj,
// --fit; the devices a load uses).
func evictClass(r *llamalog.Record) int8 {
	switch r.Kind {
	case llamalog.KindLoad, llamalog.KindContext, llamalog.KindRole, llamalog.KindRouter, llamalog.KindClip, llamalog.KindFitBracket, llamalog.KindDevice:
		return 2
	case llamalog.KindBuffer:
		switch r.BufKind {
		case "model":
			return 2
		case "compute":
			return 0
		}
		return 1
	case llamalog.KindEcho, llamalog.KindBreakdownHead, llamalog.KindBreakdownRow, llamalog.KindOutputRealloc:
		return 0
	}
	return 1
}

// evictKey is what the eviction order (less) compares of a kept record,
// with the record's index in st.records.
type evictKey struct {
	seq    uint64
	stream string
	slot   int32
	class  int8
	kind   llamalog.Kind
}

// less is the order in which kept records are dropped (but for the floors
// of keepRecord): by class (see evictClass), then earliest by position
// first (a later reservation, table or load supersedes an earlier one). It
// is a fixed total order, so the records a class keeps are its greatest
// whatever the order of arrival.
func (a *evictKey) less(b *evictKey) bool {
	if a.class != b.class {
		return a.class < b.class
	}
	if a.seq != b.seq || a.stream != b.stream {
		return posLess(a.seq, a.stream, b.seq, b.stream)
	}
	return a.kind < b.kind
}

// evictOrder returns the kept records' keys in evictKey.less's order, built
// when missing (a new or restored state).
func (st *state) evictOrder() *evictQueue {
	if st.evict == nil || st.evict.len() != len(st.records) {
		q := &evictQueue{}
		// Room for each class to hold its records and half as many
		// again, so that its queue is seldom copied to grow (see
		// insert); not more, as a served run keeps its queue.
		var n [len(q.cls)]int
		for _, r := range st.records {
			n[evictClass(&r.Record)]++
		}
		for c := range q.cls {
			q.cls[c].keys = make([]evictKey, 0, n[c]+n[c]/2+1)
		}
		for i, r := range st.records {
			e := evictKey{seq: r.Seq, stream: r.Stream, slot: int32(i), class: evictClass(&r.Record), kind: r.Kind}
			q.cls[e.class].keys = append(q.cls[e.class].keys, e)
		}
		for c := range q.cls {
			slices.SortFunc(q.cls[c].keys, func(a, b evictKey) int {
				if a.less(&b) {
					return -1
				}
				return 1
			})
		}
		st.evict = q
	}
	return st.evict
}

// evictQueue holds the kept records' keys in evictKey.less's order: per class,
// sorted, the first to go at the head.
// Lines mostly arrive in position order, so a key is appended to its class
// and the first dropped from a head; only a line older than its class's
// last is inserted in place.
type evictQueue struct {
	cls [3]keyQueue
}

// keyQueue is a sorted run of keys whose first head were dropped.
type keyQueue struct {
	keys []evictKey
	head int
}

func (q *evictQueue) len() int {
	n := 0
	for c := range q.cls {
		n += q.cls[c].len()
	}
	return n
}

// victim returns the class that gives up a record when one of class
// added comes: the lowest class that holds more than floor records (added
// counted); the model-load lines (class 2) have no floor.
func (q *evictQueue) victim(added int8, floor int) int8 {
	for c := int8(0); c < 2; c++ {
		n := q.cls[c].len()
		if c == added {
			n++
		}
		if n > floor {
			return c
		}
	}
	return 2
}

func (k *keyQueue) len() int    { return len(k.keys) - k.head }
func (k *keyQueue) empty() bool { return k.head == len(k.keys) }

// first returns the class's first key to go (the queue is not empty).
func (k *keyQueue) first() *evictKey { return &k.keys[k.head] }

// dropFirst removes the key first returned.
func (k *keyQueue) dropFirst() {
	k.head++
	if k.head > 64 && 2*k.head > len(k.keys) {
		// Reuse the dropped room.
		k.keys = k.keys[:copy(k.keys, k.keys[k.head:])]
		k.head = 0
	}
}

func (q *evictQueue) insert(e evictKey) {
	k := &q.cls[e.class]
	if len(k.keys) == cap(k.keys) && k.head > 0 {
		// Full: reuse the dropped room rather than grow.
		k.keys = k.keys[:copy(k.keys, k.keys[k.head:])]
		k.head = 0
	}
	if n := len(k.keys); n == k.head || k.keys[n-1].less(&e) {
		k.keys = append(k.keys, e)
		return
	}
	live := k.keys[k.head:]
	i, _ := slices.BinarySearchFunc(live, e, func(a, b evictKey) int {
		if a.less(&b) {
			return -1
		}
		return 1
	})
	k.keys = slices.Insert(k.keys, k.head+i, e)
}

// droppedRecords is how many relevant lines the cap left out.
func (st *state) droppedRecords() int { return st.Capped - len(st.records) }

// capFrontier says, per eviction class, where the class's kept records
// start when the cap dropped some of it: every dropped line of the class
// lies before that position (keepRecord drops a class's earliest first),
// and every line of the class at it or after it is kept.
type capFrontier [3]struct {
	dropped bool
	seq     uint64
	stream  string
}

// frontier returns the state's capFrontier. A class that lost lines and
// kept none has its frontier past every position.
func (st *state) frontier() capFrontier {
	var f capFrontier
	for c := range f {
		if st.Dropped&(1<<c) == 0 {
			continue
		}
		f[c].dropped, f[c].seq = true, math.MaxUint64
		for _, r := range st.records {
			if evictClass(&r.Record) == int8(c) && posLess(r.Seq, r.Stream, f[c].seq, f[c].stream) {
				f[c].seq, f[c].stream = r.Seq, r.Stream
			}
		}
	}
	return f
}

// before reports whether a line of class c at (seq, stream) lies where the
// cap dropped lines of class c: the class's lines there may be missing.
func (f *capFrontier) before(c int8, seq uint64, stream string) bool {
	return f[c].dropped && posLess(seq, stream, f[c].seq, f[c].stream)
}

// beforeSeq is before for a position known by its seq only (seq is one
// counter over a run's streams): at the frontier's seq counts as before.
func (f *capFrontier) beforeSeq(c int8, seq uint64) bool {
	return f[c].dropped && seq <= f[c].seq
}

// orphan reports whether a kept record lies before every kept model-load
// line of a state whose cap dropped some: a buffer line, reservation or
// table of a load whose own lines are gone, which cannot be placed.
func (f *capFrontier) orphan(kr *keyedRecord) bool {
	switch kr.Kind {
	case llamalog.KindBuild, llamalog.KindVerbosity, llamalog.KindLegacy:
		return false // the first of each, kept apart
	}
	return evictClass(&kr.Record) < 2 && f.before(2, kr.Seq, kr.Stream)
}

// keyedRecord is a Record with its stream (a persisted record).
type keyedRecord struct {
	Stream string `json:"s"`
	llamalog.Record
}

// sortedRecords returns the kept records and the first build, verbosity
// and legacy lines, by position: pointers into the state (the caller must
// not change them), not copies (160 bytes each).
func (st *state) sortedRecords() []*keyedRecord {
	recs := make([]*keyedRecord, 0, len(st.records)+len(st.firsts))
	for i := range st.records {
		recs = append(recs, &st.records[i])
	}
	for _, r := range st.firsts {
		recs = append(recs, &r)
	}
	slices.SortFunc(recs, func(a, b *keyedRecord) int {
		if a.Seq != b.Seq {
			return cmp.Compare(a.Seq, b.Seq)
		}
		if a.Kind != b.Kind {
			return cmp.Compare(a.Kind, b.Kind)
		}
		return strings.Compare(a.Stream, b.Stream)
	})
	return recs
}

// capWarnings says which caps of the state were hit, for the report.
func (st *state) capWarnings() []string {
	var w []string
	if n := st.droppedRecords(); n > 0 {
		w = append(w, fmt.Sprintf("the run has %d relevant log lines; the fold keeps %d (the %d earliest superseded reservations, tables and other lines are not used; model-load lines go last, and the latest %d reservation and %d other buffer lines stay)", st.Capped, MaxRecords, n, MaxRecords/4, MaxRecords/4))
	}
	if n, est := st.Trace.names(); est {
		w = append(w, fmt.Sprintf("more than %d distinct packed tensor names: their count (%d) is an estimate", MaxTraceNames, n))
	}
	return w
}
