package split

import (
	"encoding/json"
	"slices"
	"sort"
)

// SeqSet is a set of sequence numbers kept as sorted ranges (consecutive
// numbers cost one pair), as the fold keeps the lines and ticks it has. The
// zero value is empty. It is not safe for concurrent use.
type SeqSet struct{ r rangeSet }

// Add adds v and reports whether it was new.
func (s *SeqSet) Add(v uint64) bool {
	if s.r.has(v) {
		return false
	}
	s.r.add(v)
	return true
}

// Has reports whether v is in the set.
func (s SeqSet) Has(v uint64) bool { return s.r.has(v) }

// Count returns how many numbers the set holds.
func (s *SeqSet) Count() uint64 { return s.r.count() }

// Max returns the largest number in the set (0 when empty).
func (s *SeqSet) Max() uint64 {
	if len(s.r) == 0 {
		return 0
	}
	return s.r[len(s.r)-1][1]
}

// MarshalJSON writes the ranges as [[lo,hi],...].
func (s SeqSet) MarshalJSON() ([]byte, error) {
	if s.r == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(s.r)
}

// UnmarshalJSON reads what MarshalJSON wrote; ranges out of order,
// overlapping or reversed are normalised.
func (s *SeqSet) UnmarshalJSON(b []byte) error {
	var rs [][2]uint64
	if err := json.Unmarshal(b, &rs); err != nil {
		return err
	}
	s.r = nil
	for _, x := range rs {
		lo, hi := min(x[0], x[1]), max(x[0], x[1])
		s.r.addRange(lo, hi)
	}
	return nil
}

// Sent returns what the fold holds, in the form a collector announces what
// it sent: per log stream the distinct lines and the largest seq, and the
// distinct samples and the largest sample seq. Streams are sorted by name.
func (f *Fold) Sent() Sent {
	var out Sent
	for name, rs := range f.st.Lines {
		s := SeqSet{r: rs}
		out.Streams = append(out.Streams, StreamSent{Stream: name, Lines: s.Count(), LastSeq: s.Max()})
	}
	sort.Slice(out.Streams, func(i, j int) bool { return out.Streams[i].Stream < out.Streams[j].Stream })
	seen := SeqSet{r: f.st.Ticks.Seen}
	out.Samples, out.LastSampleSeq = seen.Count(), seen.Max()
	return out
}

// Seen is what a fold took in, by position only: per log stream the lines
// applied, the sample ticks, and whether it has the run's start and a real
// (not idle-timeout) finish. It tells an event the fold already holds from
// a new one without the fold (a closed run's compact record keeps it in
// place of the fold).
type Seen struct {
	Lines   map[string]SeqSet `json:"lines,omitempty"`
	Samples SeqSet            `json:"samples"`
	Run     bool              `json:"run,omitempty"`
	Finish  bool              `json:"finish,omitempty"`
}

// Seen returns what the fold took in (a copy).
func (f *Fold) Seen() Seen {
	out := Seen{Samples: SeqSet{r: slices.Clone(f.st.Ticks.Seen)}, Run: f.st.HaveRun,
		Finish: f.st.HaveFinish && !f.st.Finish.Incomplete}
	if len(f.st.Lines) > 0 {
		out.Lines = make(map[string]SeqSet, len(f.st.Lines))
		for name, rs := range f.st.Lines {
			out.Lines[name] = SeqSet{r: slices.Clone(rs)}
		}
	}
	return out
}
