package split

import (
	"bytes"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// Options tune the fold.
type Options struct {
	// Parser classifies lines; nil means the default trace grammar.
	Parser *llamalog.Parser
	// UnattributedThresholdPct flags a run whose unattributed rest exceeds
	// this share of the peak; 0 means the default, 10.
	UnattributedThresholdPct float64
}

// DefaultTracePattern and DefaultTraceNamePattern are the host-weight
// trace patterns a Parser is built with by default (the aggregator's
// split.trace_pattern and split.trace_name_pattern keys).
const (
	DefaultTracePattern     = llamalog.DefaultTracePattern
	DefaultTraceNamePattern = llamalog.DefaultTraceNamePattern
)

// DefaultThresholdPct is the default unattributed threshold (docs/accounting.md rule 10).
const DefaultThresholdPct = 10

// Fold accumulates the lines and samples of one run and computes its split.
// It is pure: no I/O, no clock, no goroutines. The result is a function of
// the set of lines and samples applied: a line is identified by (Stream,
// Seq) and a sample by Seq, so duplicates count once and arrival order does
// not matter. A Fold is not safe for concurrent use.
type Fold struct {
	p          *llamalog.Parser
	thr        float64
	st         state
	lineParser lineParser // addRelevant's
	lineT      int64      // AddLine: the capture time of the line being applied (unix ns; 0 unknown)
	names      *nameCache // a log read in bulk: the trace names' hashes (nil: none)
}

type lineKey struct {
	stream string
	seq    uint64
}

// state is everything a Fold keeps; it is what MarshalJSON persists.
type state struct {
	Run        RunInfo    `json:"run"`
	HaveRun    bool       `json:"have_run"`
	Finish     FinishInfo `json:"finish"`
	HaveFinish bool       `json:"have_finish"`
	// records holds the relevant lines other than trace, malformed,
	// summary and first-only lines, in no order, each position once: at
	// most MaxRecords, the latest (see keep).
	records []keyedRecord
	// evict orders records for eviction (built when the cap is reached).
	evict *evictQueue
	// firsts holds the first build, verbosity and legacy line.
	firsts map[llamalog.Kind]keyedRecord
	// Capped counts the distinct lines that went to records (kept or not).
	Capped int `json:"capped,omitempty"`
	// Dropped has bit c set when the cap left out lines of eviction class
	// c (evictClass): they all lie before the class's kept records (see
	// frontier).
	Dropped uint8 `json:"dropped,omitempty"`
	// Trace is the fold of the host-weight trace lines.
	Trace traceAcc `json:"trace"`
	// Malformed counts the lines that looked relevant and did not parse.
	Malformed int `json:"malformed,omitempty"`
	// Lines holds, per stream, the positions of every line applied (as
	// ranges): it makes a repeated line a no-op and counts the lines read.
	Lines map[string]rangeSet `json:"lines"`
	// DebugSeq is the position of a line only -v prints (0: none seen).
	DebugSeq uint64 `json:"debug_seq"`
	// HaveBuild and HaveVerbosity say the fold has a build (verbosity)
	// line; only the first of each is used, so ReadLog stops looking.
	HaveBuild     bool `json:"have_build,omitempty"`
	HaveVerbosity bool `json:"have_verbosity,omitempty"`
	// Ticks are folded as they arrive; only what the split needs is kept,
	// so a run sampled every 100 ms for days stays small: the peak tick,
	// the final tick, which ticks were seen, and per-tick skip counts.
	Ticks tickState `json:"ticks"`
	// SampleLinesSkipped counts lines a samples file could not use.
	SampleLinesSkipped int `json:"sample_lines_skipped"`
	// Markers are the model-load and context lines, for the timeline (at
	// most MaxMarkers, the latest by position).
	Markers []marker `json:"markers,omitempty"`
}

// tickState is the order-free fold of all ticks: the peak is the tick with
// the largest client sum (ties: the earliest by time, then seq), the final is
// the latest tick with an amdgpu client (by time, then seq). Both are
// idempotent, so duplicates cannot change them; Seen makes counts exact.
type tickState struct {
	Seen  rangeSet `json:"seen"`
	Peak  *tick    `json:"peak,omitempty"`
	Final *tick    `json:"final,omitempty"`
	// FDsSkipped sums the malformed fds of every distinct tick (Seen makes
	// each tick count once).
	FDsSkipped int  `json:"fds_skipped,omitempty"`
	Resident   bool `json:"resident,omitempty"` // some client gave only drm-memory-gtt
	AnyClients bool `json:"any_clients,omitempty"`
	// Series is the downsampled process GTT over time (the timeline).
	Series seriesState `json:"series,omitzero"`
	// LegacySkipped is the per-tick form older states were written with;
	// it is read into FDsSkipped and never written.
	LegacySkipped map[uint64]int `json:"skipped,omitempty"`
	// Mem is the process's memory per card and region class, each
	// folded over the ticks (cards.go); MemSkipped counts the region
	// figures of distinct ticks that did not parse.
	Mem        []cardMem `json:"mem,omitempty"`
	MemSkipped int       `json:"mem_skipped,omitempty"`
}

func (t *tick) sum() int64 {
	var n int64
	for _, c := range t.Clients {
		n += c.Bytes
	}
	return n
}

func (t *tick) before(u *tick) bool {
	if !t.Time.Equal(u.Time) {
		return t.Time.Before(u.Time)
	}
	return t.Seq < u.Seq
}

func (ts *tickState) add(t tick) {
	ts.Seen.add(t.Seq)
	ts.FDsSkipped += t.FDsSkipped
	if len(t.Clients) == 0 {
		return
	}
	ts.AnyClients = true
	for _, c := range t.Clients {
		if c.Key != "drm-total-gtt" {
			ts.Resident = true // drm-memory-gtt, or the pre-5.19 "gtt mem"
		}
	}
	if !t.Time.IsZero() {
		ts.Series.add(seriesPoint{T: t.Time.UnixNano(), Seq: t.Seq, B: t.sum()})
	}
	if p := ts.Peak; p == nil || t.sum() > p.sum() || t.sum() == p.sum() && t.before(p) {
		c := t
		ts.Peak = &c
	}
	if f := ts.Final; f == nil || f.before(&t) {
		c := t
		ts.Final = &c
	}
}

// rangeSet is a set of uint64 kept as sorted, disjoint, non-adjacent
// closed ranges: consecutive sequence numbers cost one pair.
type rangeSet [][2]uint64

func (r rangeSet) has(v uint64) bool {
	i := sortSearch(r, v)
	return i < len(r) && r[i][0] <= v
}

// sortSearch returns the first range whose end is >= v. A value past the
// last range (lines read in order) is answered without a search.
func sortSearch(r rangeSet, v uint64) int {
	if len(r) == 0 || r[len(r)-1][1] < v {
		return len(r)
	}
	lo, hi := 0, len(r)-1
	for lo < hi {
		m := (lo + hi) / 2
		if r[m][1] < v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

func (r *rangeSet) add(v uint64) {
	s := *r
	i := sortSearch(s, v)
	if i < len(s) && s[i][0] <= v {
		return
	}
	joinLeft := i > 0 && s[i-1][1]+1 == v
	joinRight := i < len(s) && v+1 == s[i][0]
	switch {
	case joinLeft && joinRight:
		s[i-1][1] = s[i][1]
		s = append(s[:i], s[i+1:]...)
	case joinLeft:
		s[i-1][1] = v
	case joinRight:
		s[i][0] = v
	default:
		s = append(s, [2]uint64{})
		copy(s[i+1:], s[i:])
		s[i] = [2]uint64{v, v}
	}
	*r = s
}

// addRange adds lo..hi (lo <= hi).
func (r *rangeSet) addRange(lo, hi uint64) {
	out := make(rangeSet, 0, len(*r)+1)
	placed := false
	for _, x := range *r {
		switch {
		case x[1]+1 < lo: // wholly before, not adjacent
			out = append(out, x)
		case hi+1 < x[0]: // wholly after
			if !placed {
				out = append(out, [2]uint64{lo, hi})
				placed = true
			}
			out = append(out, x)
		default: // overlaps or touches: merge into lo..hi
			lo, hi = min(lo, x[0]), max(hi, x[1])
		}
	}
	if !placed {
		out = append(out, [2]uint64{lo, hi})
	}
	*r = out
}

func (r rangeSet) count() uint64 {
	var n uint64
	for _, x := range r {
		n += x[1] - x[0] + 1
	}
	return n
}

type tick struct {
	Seq         uint64      `json:"seq"`
	Time        time.Time   `json:"t"`
	Clients     []clientGTT `json:"clients,omitempty"`
	Cards       []CardGTT   `json:"cards,omitempty"`
	FDsSkipped  int         `json:"fds_skipped,omitempty"`
	Unsupported int         `json:"unsupported,omitempty"`
}

type clientGTT struct {
	PDev  string `json:"pdev"`
	ID    string `json:"id"`
	Bytes int64  `json:"bytes"`
	Key   string `json:"key"`
}

// defaultParser is the parser of the folds given none: one for all of
// them (a Parser is safe for concurrent use; compiling its patterns for
// each fold cost every open run 3 KiB).
var defaultParser = sync.OnceValue(llamalog.MustParser)

// NewFold returns an empty fold.
func NewFold(o Options) *Fold {
	p := o.Parser
	if p == nil {
		p = defaultParser()
	}
	thr := o.UnattributedThresholdPct
	if thr <= 0 {
		thr = DefaultThresholdPct
	}
	return &Fold{p: p, thr: thr}
}

// SetRun records the run's description (the run-started event). It reports
// whether the fold had none yet.
func (f *Fold) SetRun(r RunInfo) bool {
	fresh := !f.st.HaveRun
	f.st.Run, f.st.HaveRun = r, true
	return fresh
}

// Finish records how the run ended (the run-finished event, or an idle
// timeout with Incomplete set). A real finish is never replaced by an idle
// close.
//
// It reports whether the run's end changed: the first finish, or a real
// finish after an idle close.
func (f *Fold) Finish(fi FinishInfo) bool {
	if f.st.HaveFinish && !f.st.Finish.Incomplete {
		if !fi.Incomplete {
			f.st.Finish = fi // a repeated finish: same event, same info
		}
		return false
	}
	fresh := !f.st.HaveFinish || !fi.Incomplete
	f.st.Finish, f.st.HaveFinish = fi, true
	return fresh
}

// AddLine applies one log line. It reports whether the line was new (a line
// applied before changes nothing).
func (f *Fold) AddLine(l Line) bool {
	if !l.Time.IsZero() {
		f.lineT = l.Time.UnixNano()
		defer func() { f.lineT = 0 }()
	}
	// The text as bytes in a lent buffer: AddLineBytes keeps nothing of
	// them, and a conversion would allocate (and the heap grow by) every
	// line applied.
	bp := lineBufs.Get().(*[]byte)
	b := append((*bp)[:0], l.Text...)
	fresh := f.AddLineBytes(l.Stream, l.Seq, b)
	if cap(b) <= maxLentLine {
		*bp = b
		lineBufs.Put(bp)
	}
	return fresh
}

// lineBufs lends AddLine room for a line's bytes, shared by every fold (a
// buffer per fold would cost each open run its longest line).
var lineBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxLentLine is the largest buffer lineBufs keeps.
const maxLentLine = 64 << 10

// AddLineBytes applies one log line given as bytes; b is not retained. It
// reports whether the line was new.
func (f *Fold) AddLineBytes(stream string, seq uint64, b []byte) bool {
	rs := f.st.Lines[stream]
	if rs.has(seq) {
		return false
	}
	rs.add(seq)
	if f.st.Lines == nil {
		f.st.Lines = map[string]rangeSet{}
	}
	f.st.Lines[stream] = rs
	if f.p.Relevant(b, f.st.DebugSeq == 0) {
		f.addRelevant(stream, seq, b)
	}
	return true
}

func (f *Fold) addRelevant(stream string, seq uint64, b []byte) {
	if f.lineParser.parse(f.p, seq, b, f.names) {
		f.foldParsed(stream, seq, &f.lineParser.out)
	}
}

// lineParser reads relevant lines into parsedLines: the part of
// addRelevant that depends on the line alone, which a reader may run on
// another goroutine than the fold (ParsePiece). One serves one goroutine.
type lineParser struct {
	scratch []byte
	ps      llamalog.Scratch // the parser's: strings seen before, a trace line's name
	out     parsedLine       // what parse read last
}

// parsedLine is a relevant line parsed: its record (Seq the line's, or
// its place in a piece) and, for a trace line, its tensor name's hash.
type parsedLine struct {
	r     llamalog.Record
	name  uint64
	named bool
}

// parse reads line seq into lp.out; false for a line that gives no record.
// names (nil: none) caches the trace names' hashes.
func (lp *lineParser) parse(p *llamalog.Parser, seq uint64, b []byte, names *nameCache) bool {
	if !utf8.Valid(b) {
		// A line that reached the aggregator in an event went through
		// JSON, which turned each byte that is not UTF-8 into U+FFFD: do
		// the same here, so that a saved log folds to the same split.
		b = validUTF8(b)
	}
	s := llamalog.Payload(b, &lp.scratch)
	out := &lp.out
	var ok bool
	out.r, ok = p.ParseWith(seq, s, &lp.ps)
	if !ok {
		return false
	}
	out.r.Port = llamalog.RouterPort(b)
	out.name, out.named = 0, false
	if out.r.Kind == llamalog.KindTrace {
		// Most lines of a traced load: only the tensor name's hash is
		// kept.
		name := lp.ps.TakeTraceName()
		if names != nil {
			out.name = names.hash(name)
		} else {
			out.name = nameHash(name)
		}
		out.named = len(name) > 0
	}
	return true
}

// foldParsed folds relevant line seq of stream, parsed into pl.
func (f *Fold) foldParsed(stream string, seq uint64, pl *parsedLine) {
	r := &pl.r
	if r.Kind == llamalog.KindTrace {
		f.st.Trace.addHashed(stream, r, pl.name, pl.named)
		return
	}
	k := lineKey{stream, seq}
	if r.Kind == llamalog.KindDebugMarker {
		// Only the presence of a -v marker matters: keep one (the first by
		// position, so the state does not depend on arrival order).
		if f.st.DebugSeq == 0 || seq < f.st.DebugSeq {
			f.st.DebugSeq = seq
		}
		return
	}
	switch r.Kind {
	case llamalog.KindLoad:
		f.st.addMarker(marker{Kind: MarkerModelLoad, Seq: seq, Stream: stream, T: f.lineT})
	case llamalog.KindContext:
		f.st.addMarker(marker{Kind: MarkerContext, Seq: seq, Stream: stream, T: f.lineT})
	case llamalog.KindBuild:
		f.st.HaveBuild = true
	case llamalog.KindVerbosity:
		f.st.HaveVerbosity = true
	}
	f.st.keep(k, r)
}

// WantsDebug reports whether the fold still looks for a line only -v
// prints (see llamalog.LineFilter).
func (f *Fold) WantsDebug() bool { return f.st.DebugSeq == 0 }

// MarkLines counts lines lo..hi of stream as read (as AddLine does for a
// line that is not relevant) and reports whether any of them was new.
func (f *Fold) MarkLines(stream string, lo, hi uint64) bool {
	if hi < lo {
		return false
	}
	rs := f.st.Lines[stream]
	if i := sortSearch(rs, lo); i < len(rs) && rs[i][0] <= lo && rs[i][1] >= hi {
		return false // all read before
	}
	f.markLines(stream, lo, hi)
	return true
}

// markLines records that lines lo..hi of stream were read (ReadLog parses
// only the relevant ones).
func (f *Fold) markLines(stream string, lo, hi uint64) {
	if hi < lo {
		return
	}
	if f.st.Lines == nil {
		f.st.Lines = map[string]rangeSet{}
	}
	rs := f.st.Lines[stream]
	rs.addRange(lo, hi)
	f.st.Lines[stream] = rs
}

// linesRead counts the distinct lines applied.
func (f *Fold) linesRead() uint64 {
	var n uint64
	for _, rs := range f.st.Lines {
		n += rs.count()
	}
	return n
}

// AddSample applies one sampling tick. A tick whose Seq was applied before
// is ignored; it reports whether the tick was new.
func (f *Fold) AddSample(s Sample) bool {
	if f.st.Ticks.Seen.has(s.Seq) {
		return false
	}
	t := tick{Seq: s.Seq, Time: s.Time}
	for _, cd := range s.Cards {
		// A card is device-wide: read again for another process of the
		// tree at the same tick, it is the same memory (the first
		// reading is kept).
		if slices.ContainsFunc(t.Cards, func(k CardGTT) bool { return k.Card == cd.Card }) {
			continue
		}
		// A decoder may give every string of a sample as a slice of one
		// (the whole event's text): a kept tick must not hold it.
		cd.Card = strings.Clone(cd.Card)
		t.Cards = append(t.Cards, cd)
	}
	procs := slices.Clone(s.Procs)
	sort.SliceStable(procs, func(i, j int) bool { return procs[i].PID < procs[j].PID })
	seen := map[[2]string]bool{}
	var mem cardTickMem
	var keys memKeys
	for _, p := range procs {
		fds := slices.Clone(p.FDs)
		sort.SliceStable(fds, func(i, j int) bool { return fds[i].FD < fds[j].FD })
		for _, fd := range fds {
			c, v := parseFDInfo([]byte(fd.Text), &keys)
			if v == FDAmdgpu || v == FDOtherDriver {
				mem.add(&c, &keys)
			}
			switch v {
			case FDAmdgpu:
				k := [2]string{c.PDev, c.ClientID}
				if seen[k] {
					continue // the same client on another fd or process: once
				}
				seen[k] = true
				t.Clients = append(t.Clients, clientGTT{PDev: c.PDev, ID: c.ClientID, Bytes: c.GTTBytes, Key: c.Key})
			case FDMalformed:
				t.FDsSkipped++
			case FDUnsupported:
				t.Unsupported++
			}
		}
	}
	f.st.Ticks.add(t)
	f.st.Ticks.addMem(t.Seq, t.Time, &mem)
	return true
}

// NoteSkippedSampleLines adds n to the count of samples-file lines that
// could not be used, so the report can say so.
func (f *Fold) NoteSkippedSampleLines(n int) { f.st.SampleLinesSkipped += n }

// Len reports how many relevant lines (trace lines included) and distinct
// ticks the fold has taken in.
func (f *Fold) Len() (lines int, ticks uint64) {
	return f.st.Capped + f.st.Trace.N + f.st.Malformed + len(f.st.firsts), f.st.Ticks.Seen.count()
}

type persisted struct {
	state
	Records []keyedRecord `json:"records"`
}

// llamaSeen reports whether any line of the log was one llama.cpp (or the
// host-weight trace) prints: a line kept for the rows, a first-only line
// (build, verbosity, legacy totals), a trace line, a malformed relevant
// line or a line only -v prints.
func (st *state) llamaSeen() bool {
	return st.Capped > 0 || len(st.firsts) > 0 || st.Trace.N > 0 || st.Malformed > 0 || st.DebugSeq != 0
}

// MarshalJSON persists the fold's state (for a restart-safe aggregator).
// The output is deterministic, and bounded whatever the log holds (see
// MaxRecords).
func (f *Fold) MarshalJSON() ([]byte, error) {
	p := persisted{state: f.st, Records: make([]keyedRecord, 0, len(f.st.records)+len(f.st.firsts))}
	p.Records = append(p.Records, f.st.records...)
	for _, r := range f.st.firsts {
		p.Records = append(p.Records, r)
	}
	sort.Slice(p.Records, func(i, j int) bool {
		a, b := p.Records[i], p.Records[j]
		if a.Seq != b.Seq {
			return a.Seq < b.Seq
		}
		if a.Stream != b.Stream {
			return a.Stream < b.Stream
		}
		return a.Kind < b.Kind
	})
	return json.Marshal(p)
}

// UnmarshalJSON restores a state written by MarshalJSON into f, which must
// come from NewFold (its options are kept). A state written before the
// state was bounded (every trace and malformed line a record, skipped fds
// per tick) is read into the bounded form.
func (f *Fold) UnmarshalJSON(b []byte) error {
	var p persisted
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&p); err != nil {
		return err
	}
	st := p.state
	st.records = nil
	st.firsts = nil
	at := make(map[lineKey]int, len(p.Records)) // a position twice: the last wins
	legacy := st.Capped == 0 && st.Trace.N == 0
	capped := st.Capped
	for _, r := range p.Records {
		k := lineKey{r.Stream, r.Seq}
		switch r.Kind {
		case llamalog.KindBuild, llamalog.KindVerbosity, llamalog.KindLegacy, llamalog.KindTrace, llamalog.KindMalformed, llamalog.KindSummary:
			st.keep(k, &r.Record) // first-only kinds; trace and malformed only in old states
		default:
			if i, ok := at[k]; ok {
				st.records[i].Record = r.Record
				continue
			}
			at[k] = len(st.records)
			st.records = append(st.records, r)
		}
	}
	if legacy {
		capped = len(st.records)
	}
	st.Capped = capped
	if st.droppedRecords() > 0 && st.Dropped == 0 {
		// Capped when the classes did not share the room: the lines
		// dropped were every line of the classes below the lowest kept
		// one, and the earliest of that class.
		low := int8(len(capFrontier{}) - 1)
		for _, r := range st.records {
			low = min(low, evictClass(&r.Record))
		}
		st.Dropped = 1<<(low+1) - 1
	}
	for _, n := range st.Ticks.LegacySkipped {
		st.Ticks.FDsSkipped += n
	}
	st.Ticks.LegacySkipped = nil
	if f.p == nil {
		*f = *NewFold(Options{})
	}
	f.st = st
	return nil
}

// validUTF8 returns b with each byte that does not start a valid UTF-8
// sequence replaced by U+FFFD, as encoding/json writes a string.
func validUTF8(b []byte) []byte {
	out := make([]byte, 0, len(b)+8)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return out
}
