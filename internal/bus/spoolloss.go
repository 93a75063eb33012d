package bus

import (
	"bytes"
	"maps"
	"os"
	"slices"
	"sync"
)

// SpoolLoss is what corrupt spool records cost: the stretches of a
// segment that held no valid record and were skipped (the events in them
// are lost), their bytes, and the runs they held events of.
type SpoolLoss struct {
	Holes int
	Bytes int64
	// Runs are the runs whose events could still be read in the lost
	// bytes, or, when none could, the runs of the records on either side.
	Runs []string
}

// spoolLoss counts a spool's losses; its own lock (the pump writes, Stats
// reads), taken last.
type spoolLoss struct {
	mu    sync.Mutex
	holes int
	bytes int64
	runs  map[string]struct{}
}

func (l *spoolLoss) add(n int64, runs []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holes++
	l.bytes += n
	if l.runs == nil {
		l.runs = map[string]struct{}{}
	}
	for _, r := range runs {
		l.runs[r] = struct{}{}
	}
}

func (l *spoolLoss) get() SpoolLoss {
	l.mu.Lock()
	defer l.mu.Unlock()
	return SpoolLoss{Holes: l.holes, Bytes: l.bytes, Runs: slices.Sorted(maps.Keys(l.runs))}
}

// SpoolLoss returns what corrupt records of the spool cost so far (found
// when it was opened, or while it was drained).
func (p *Publisher) SpoolLoss() SpoolLoss { return p.pump.sp.loss.get() }

// lose makes [off, end) of segment sg a hole: the records in it are lost.
// It says so at WARN with the runs it can name: those whose events it reads
// in the lost bytes (f, when not nil), else prev (the run of the record
// before) and the run of the record at end.
func (s *spool) lose(sg *segment, f *os.File, off, end int64, prev string, cause error) {
	sg.holes = append(sg.holes, hole{off: off, end: end})
	s.corrupt++
	var runs []string
	if f != nil {
		b := make([]byte, end-off)
		if _, err := f.ReadAt(b, off); err == nil {
			runs = runsIn(b)
		}
	}
	named := "runs"
	if len(runs) == 0 {
		named = "runs_around"
		if prev != "" {
			runs = append(runs, prev)
		}
		if f != nil && end < sg.size {
			if w, _, err := readRecord(f, end, sg.size, sg.v1); err == nil && runOf(w) != prev {
				runs = append(runs, runOf(w))
			}
		}
	}
	s.loss.add(end-off, runs)
	s.log.Warn().Err(cause).Str("spool", s.dir).Str("segment", segName(sg.id)).Int64("offset", off).
		Int64("bytes_lost", end-off).Strs(named, runs).
		Msg("corrupt spool record: its events are lost, reading on at the next valid record")
}

// subjectAttr precedes the run id in an event's JSON.
var subjectAttr = []byte(`"subject":"`)

// runsIn returns the run ids that the events' JSON in b names (their
// "subject" attribute), sorted, each once.
func runsIn(b []byte) []string {
	seen := map[string]struct{}{}
	for {
		i := bytes.Index(b, subjectAttr)
		if i < 0 {
			break
		}
		b = b[i+len(subjectAttr):]
		j := bytes.IndexByte(b, '"')
		if j <= 0 || j > 253 {
			continue
		}
		if id := b[:j]; printable(id) {
			seen[string(id)] = struct{}{}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// printable reports ASCII without controls, space or quotes.
func printable(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
