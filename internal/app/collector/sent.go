package collector

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// sentLog counts what the collector handed to its publisher (or wrote
// offline) of one run, for the run-finished event's announcement: the
// distinct lines per stream, the samples, the last seqs, and when the run
// started. With a path (attach) it is kept on disk and written before each
// event goes out, so a restarted attach announces what the earlier one
// sent too; a crash between the write and the publish can only make the
// announcement larger than what arrived (the run is then closed as
// incomplete at the idle timeout), never smaller (a split written
// complete before the rest arrived).
type sentLog struct {
	path string // "" keeps it in memory

	Streams    map[string]*split.SeqSet `json:"streams"`
	Samples    uint64                   `json:"samples"`
	LastSample uint64                   `json:"last_sample_seq"`
	Started    time.Time                `json:"started,omitzero"`

	// Whose run it is (attach): a later attach finds by it the
	// unfinished run of a process that exited while no collector watched
	// it (goneRuns). A log an earlier version wrote does not say: its run
	// is not found that way.
	attachedRun
}

// attachedRun says whose run a sent log counts.
type attachedRun struct {
	RunID string `json:"run_id,omitempty"`
	Host  string `json:"host,omitempty"`
	PID   int    `json:"pid,omitempty"`
	// StartTicks is the process's start time (/proc/PID/stat): with the
	// pid it names one process.
	StartTicks uint64 `json:"start_ticks,omitempty"`
	// Log is the absolute path of the followed log ("" without --log).
	Log string `json:"log,omitempty"`
}

// identify records whose run the log counts; a log on disk that did not
// say it yet (written by an earlier version, or of another process that
// this run id now names) is saved at once.
func (s *sentLog) identify(a attachedRun) error {
	if s.attachedRun == a {
		return nil
	}
	s.attachedRun = a
	if s.path == "" || s.Started.IsZero() {
		return nil // saved with the run's start
	}
	return s.save()
}

// goneRuns returns the unfinished runs (a sent log names them) in dir of
// host's process pid, except the one started at liveStart (0: no process
// has that pid now) and the run runID; with only set, that run alone.
// Oldest first.
func goneRuns(dir, host string, pid int, liveStart uint64, runID, only string) []*sentLog {
	paths, _ := filepath.Glob(filepath.Join(dir, "sent-*.json"))
	var out []*sentLog
	for _, p := range paths {
		s, err := openSentLog(p)
		if err != nil || s.RunID == "" || s.Host != host || s.PID != pid ||
			liveStart != 0 && s.StartTicks == liveStart || s.RunID == runID || only != "" && s.RunID != only {
			continue
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

// openSentLog returns the sent log at path, resuming what it holds for
// the same run ("" for one in memory). An unreadable file is started
// afresh (logged by the caller from the error).
func openSentLog(path string) (*sentLog, error) {
	s := &sentLog{path: path, Streams: map[string]*split.SeqSet{}}
	if path == "" {
		return s, nil
	}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return s, nil
	}
	if err == nil {
		err = json.Unmarshal(b, s)
	}
	if err != nil {
		s = &sentLog{path: path, Streams: map[string]*split.SeqSet{}}
		return s, fmt.Errorf("sent log %s: %w (started afresh)", path, err)
	}
	if s.Streams == nil {
		s.Streams = map[string]*split.SeqSet{}
	}
	return s, nil
}

// add counts what r sends and, with a path, saves the log; it returns
// whether anything changed.
func (s *sentLog) add(r sources.Record) error {
	changed := false
	switch {
	case r.Started != nil:
		if s.Started.IsZero() && !r.Started.Started.IsZero() {
			s.Started, changed = r.Started.Started, true
		}
	case r.Lines != nil:
		for _, l := range r.Lines {
			ss := s.Streams[l.Stream]
			if ss == nil {
				ss = new(split.SeqSet)
				s.Streams[l.Stream] = ss
			}
			if ss.Add(l.Seq) {
				changed = true
			}
		}
	case r.Sample != nil:
		s.Samples++
		s.LastSample = max(s.LastSample, r.Sample.Seq)
		changed = true
	}
	if !changed || s.path == "" {
		return nil
	}
	return s.save()
}

// save writes the log atomically (a temporary file renamed over it).
func (s *sentLog) save() error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}

// remove deletes the log once the run is finished.
func (s *sentLog) remove() {
	if s.path != "" {
		_ = os.Remove(s.path)
	}
}

// sent is the announcement of the run-finished event.
func (s *sentLog) sent() *split.Sent {
	out := &split.Sent{Samples: s.Samples, LastSampleSeq: s.LastSample}
	for name, ss := range s.Streams {
		out.Streams = append(out.Streams, split.StreamSent{Stream: name, Lines: ss.Count(), LastSeq: ss.Max()})
	}
	sort.Slice(out.Streams, func(i, j int) bool { return out.Streams[i].Stream < out.Streams[j].Stream })
	return out
}

// duration is the run's wall time up to finished (0 when the start is
// unknown or later).
func (s *sentLog) duration(finished time.Time) time.Duration {
	if s.Started.IsZero() || finished.IsZero() || finished.Before(s.Started) {
		return 0
	}
	return finished.Sub(s.Started)
}
