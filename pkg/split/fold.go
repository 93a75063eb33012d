package split

import (
	"bytes"
	"encoding/json"
	"slices"
	"sort"
	"time"
)

// Options tune the fold.
type Options struct {
	// Parser classifies lines; nil means the default trace grammar.
	Parser *Parser
	// UnattributedThresholdPct flags a run whose unattributed rest exceeds
	// this share of the peak; 0 means the default, 10.
	UnattributedThresholdPct float64
}

// DefaultThresholdPct is the default unattributed threshold (SPEC §2 rule 9).
const DefaultThresholdPct = 10

// Fold accumulates the lines and samples of one run and computes its split.
// It is pure: no I/O, no clock, no goroutines. The result is a function of
// the set of lines and samples applied: a line is identified by (Stream,
// Seq) and a sample by Seq, so duplicates count once and arrival order does
// not matter. A Fold is not safe for concurrent use.
type Fold struct {
	p       *Parser
	thr     float64
	st      state
	scratch []byte
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
	// records holds the relevant lines, keyed by position.
	records map[lineKey]Record
	MaxSeq  uint64 `json:"max_seq"`
	// DebugSeq is the position of a line only -v prints (0: none seen).
	DebugSeq uint64 `json:"debug_seq"`
	ticks    map[uint64]tick
	// SampleLinesSkipped counts lines a samples file could not use.
	SampleLinesSkipped int `json:"sample_lines_skipped"`
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

// NewFold returns an empty fold.
func NewFold(o Options) *Fold {
	p := o.Parser
	if p == nil {
		p = MustParser()
	}
	thr := o.UnattributedThresholdPct
	if thr <= 0 {
		thr = DefaultThresholdPct
	}
	return &Fold{p: p, thr: thr, st: state{records: map[lineKey]Record{}, ticks: map[uint64]tick{}}}
}

// SetRun records the run's description (the run-started event).
func (f *Fold) SetRun(r RunInfo) { f.st.Run, f.st.HaveRun = r, true }

// Finish records how the run ended (the run-finished event, or an idle
// timeout with Incomplete set). A real finish is never replaced by an idle
// close.
func (f *Fold) Finish(fi FinishInfo) {
	if f.st.HaveFinish && !f.st.Finish.Incomplete && fi.Incomplete {
		return
	}
	f.st.Finish, f.st.HaveFinish = fi, true
}

// AddLine applies one log line.
func (f *Fold) AddLine(l Line) { f.AddLineBytes(l.Stream, l.Seq, []byte(l.Text)) }

// AddLineBytes applies one log line given as bytes; b is not retained.
func (f *Fold) AddLineBytes(stream string, seq uint64, b []byte) {
	if seq > f.st.MaxSeq {
		f.st.MaxSeq = seq
	}
	if !f.p.Relevant(b, f.st.DebugSeq == 0) {
		return
	}
	k := lineKey{stream, seq}
	if _, dup := f.st.records[k]; dup {
		return
	}
	r, ok := f.p.Parse(seq, Payload(b, &f.scratch))
	if !ok {
		return
	}
	if r.Kind == KindDebugMarker {
		// Only the presence of a -v marker matters: keep one (the first by
		// position, so the state does not depend on arrival order).
		if f.st.DebugSeq == 0 || seq < f.st.DebugSeq {
			f.st.DebugSeq = seq
		}
		return
	}
	f.st.records[k] = r
}

// AddSample applies one sampling tick. A tick whose Seq was applied before
// is ignored.
func (f *Fold) AddSample(s Sample) {
	if _, dup := f.st.ticks[s.Seq]; dup {
		return
	}
	t := tick{Seq: s.Seq, Time: s.Time, Cards: slices.Clone(s.Cards)}
	procs := slices.Clone(s.Procs)
	sort.SliceStable(procs, func(i, j int) bool { return procs[i].PID < procs[j].PID })
	seen := map[[2]string]bool{}
	for _, p := range procs {
		fds := slices.Clone(p.FDs)
		sort.SliceStable(fds, func(i, j int) bool { return fds[i].FD < fds[j].FD })
		for _, fd := range fds {
			c, v := ParseFDInfo([]byte(fd.Text))
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
	f.st.ticks[s.Seq] = t
}

// NoteSkippedSampleLines adds n to the count of samples-file lines that
// could not be used, so the report can say so.
func (f *Fold) NoteSkippedSampleLines(n int) { f.st.SampleLinesSkipped += n }

// Len reports how many relevant lines and ticks the fold holds.
func (f *Fold) Len() (lines, ticks int) { return len(f.st.records), len(f.st.ticks) }

type persisted struct {
	state
	Records []persistedRecord `json:"records"`
	Ticks   []tick            `json:"ticks"`
}

type persistedRecord struct {
	Stream string `json:"s"`
	Record
}

// MarshalJSON persists the fold's state (for a restart-safe aggregator).
// The output is deterministic.
func (f *Fold) MarshalJSON() ([]byte, error) {
	p := persisted{state: f.st}
	for k, r := range f.st.records {
		p.Records = append(p.Records, persistedRecord{Stream: k.stream, Record: r})
	}
	sort.Slice(p.Records, func(i, j int) bool {
		a, b := p.Records[i], p.Records[j]
		if a.Seq != b.Seq {
			return a.Seq < b.Seq
		}
		return a.Stream < b.Stream
	})
	for _, t := range f.st.ticks {
		p.Ticks = append(p.Ticks, t)
	}
	sort.Slice(p.Ticks, func(i, j int) bool { return p.Ticks[i].Seq < p.Ticks[j].Seq })
	return json.Marshal(p)
}

// UnmarshalJSON restores a state written by MarshalJSON into f, which must
// come from NewFold (its options are kept).
func (f *Fold) UnmarshalJSON(b []byte) error {
	var p persisted
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&p); err != nil {
		return err
	}
	st := p.state
	st.records = make(map[lineKey]Record, len(p.Records))
	for _, r := range p.Records {
		st.records[lineKey{r.Stream, r.Seq}] = r.Record
	}
	st.ticks = make(map[uint64]tick, len(p.Ticks))
	for _, t := range p.Ticks {
		st.ticks[t.Seq] = t
	}
	if f.p == nil {
		*f = *NewFold(Options{})
	}
	f.st = st
	return nil
}
