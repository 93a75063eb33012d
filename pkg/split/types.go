package split

import "time"

// Schema is the value of Report.Schema for this version of the report.
const Schema = "gttsplit.split.v1"

// Line is one log line of a run, as captured. Seq is the line's position in
// the run's log (one counter for all streams of a run, starting at 0 or 1);
// Stream names where it was read ("stderr", "stdout", "log"). The pair
// (Stream, Seq) identifies a line: a line applied twice counts once, and the
// fold orders lines by Seq, so arrival order does not matter.
//
// Time is when the line was captured (zero when unknown); the fold does not
// use it, the event contract carries it.
type Line struct {
	Stream string
	Seq    uint64
	Text   string
	Time   time.Time
}

// Sample is one sampling tick of the measured process tree: the fdinfo text
// of the DRM fds of every process in the tree, and optionally the card's GTT
// counters, all taken at Time. Seq identifies the tick within the run.
type Sample struct {
	Seq   uint64
	Time  time.Time
	Procs []ProcFDs
	Cards []CardGTT
}

// ProcFDs is the fdinfo of one process at one tick.
type ProcFDs struct {
	PID int
	FDs []FDInfo
}

// FDInfo is the verbatim text of /proc/<pid>/fdinfo/<fd>. Link is the fd's
// readlink target when the sampler knew it ("" otherwise); the fold decides
// from Text alone.
type FDInfo struct {
	FD   int
	Link string
	Text string
}

// CardGTT is an amdgpu card's device-wide GTT counters in bytes
// (/sys/class/drm/<card>/device/mem_info_gtt_{used,total}).
type CardGTT struct {
	Card       string
	UsedBytes  int64
	TotalBytes int64
}

// RunInfo describes the run being measured; it comes from the run-started
// event (or from the command line of `aggregator parse`). Empty fields are
// unknown.
type RunInfo struct {
	ID      string
	Host    string
	Lane    string
	Command string
	Issue   string // OWNER/REPO#N of the tracker issue, if any
	// ControlOf is the run this run is the control of (the same command
	// with offload off), if the collector was told one.
	ControlOf string
	// NoLog says the collector read no log of the process (collector
	// attach without --log): the split has only its fdinfo samples.
	NoLog        bool
	Started      time.Time
	SourceCommit string
	SourceDirty  *bool
	// SourceCommitTime is the source commit's committer time (zero:
	// unknown).
	SourceCommitTime time.Time `json:",omitzero"`
	CollectorVersion string
}

// FinishInfo describes how the run ended (the run-finished event).
type FinishInfo struct {
	Finished time.Time
	ExitCode *int
	Signal   string
	// Incomplete is set when the run was closed without a run-finished
	// event (idle timeout).
	Incomplete bool
	// DroppedEvents counts events the collector could not deliver (a full
	// spool); the split then misses data and is flagged.
	DroppedEvents uint64
	// Sent is what the collector says it sent of the run; nil when the
	// run-finished event did not say (collectors before it did). A run is
	// complete when the fold holds all of it (see Fold.Missing).
	Sent *Sent `json:",omitempty"`
}

// Sent is what a collector sent of a run: per log stream the distinct
// lines and the last line's sequence number, and the distinct samples and
// the last sample's sequence number.
type Sent struct {
	Streams       []StreamSent
	Samples       uint64
	LastSampleSeq uint64
	// Sampling is how the collector sampled (nil: it did not say).
	Sampling *Sampling `json:",omitempty"`
}

// Sampling is how a collector sampled a run's fdinfo: its interval, how
// many samples it took at a memory-relevant log line on top of the
// interval's, and the largest time between two consecutive samples (a peak
// shorter than that can be missed).
type Sampling struct {
	Interval   time.Duration
	Triggered  uint64
	LargestGap time.Duration
}

// StreamSent is what a collector sent of one log stream.
type StreamSent struct {
	Stream  string
	Lines   uint64
	LastSeq uint64
}
