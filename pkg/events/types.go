package events

import (
	"errors"
	"time"
)

// Event types: versioned reverse-DNS names (CloudEvents "type").
const (
	TypeRunStarted   = "io.gttsplit.run.started.v1"
	TypeLogLines     = "io.gttsplit.log.lines.v1"
	TypeFDInfoSample = "io.gttsplit.fdinfo.sample.v1"
	TypeRunFinished  = "io.gttsplit.run.finished.v1"
	TypeSplit        = "io.gttsplit.split.v1"
)

// Types lists every event type this package builds and decodes.
var Types = []string{TypeRunStarted, TypeLogLines, TypeFDInfoSample, TypeRunFinished, TypeSplit}

// Extension attribute names carried by every event.
const (
	AttrRunID = "runid"
	AttrHost  = "host"
	AttrLane  = "lane"
)

// SourcePrefix starts every event's source; the host follows.
const SourcePrefix = "urn:gttsplit:collector:"

// ContentType is the datacontenttype of every event's data.
const ContentType = "application/json"

// StructuredContentType is the media type of a whole structured event, for
// transports that carry a Content-Type header.
const StructuredContentType = "application/cloudevents+json"

// Id position names used in event ids (the middle part of
// <runid>/<position>/<n>). A log stream may not use one of these names.
const (
	posStarted  = "started"
	posFinished = "finished"
	posFDInfo   = "fdinfo"
	posSplit    = "split"
)

// Errors returned by the constructors, Decode, Unmarshal and Reader.
var (
	// ErrUnknownType marks an event whose type (or version of a known
	// type) this package does not know.
	ErrUnknownType = errors.New("events: unknown event type")
	// ErrInvalid marks an event that is not a valid gttsplit CloudEvent:
	// bad JSON, a failed Validate, a missing attribute, an id that does not
	// match its payload, or a payload that does not decode.
	ErrInvalid = errors.New("events: invalid event")
	// ErrLineTooLong marks a recorded-stream line longer than MaxLineBytes.
	ErrLineTooLong = errors.New("events: line too long")
)

// Origin names the run an event belongs to. RunID and Host are required;
// Lane may be empty.
type Origin struct {
	RunID string
	Host  string
	Lane  string
}

// StartDetail is what a run-started event carries beyond split.RunInfo.
type StartDetail struct {
	// Args is the command's argv as executed (after -v was appended).
	Args []string
	// Env holds the environment toggles that matter to the split, as the
	// child saw them (e.g. GGML_HRX_HOST_WEIGHT_TRACE=1).
	Env map[string]string
	// EnvAdded names the variables of Env the collector set itself.
	EnvAdded []string
	// VerboseAppended is true when the collector appended -v.
	VerboseAppended bool
	// SourceDir is the llama.cpp source tree the commit was read from.
	SourceDir string
	// PID is the measured process (the wrapped child or the attached pid).
	PID int
}

// FinishDetail is what a run-finished event carries beyond split.FinishInfo.
type FinishDetail struct {
	// Duration is the run's wall time as the collector measured it.
	Duration time.Duration
	// DroppedEvents counts events of this run the collector could not
	// deliver or spool (a full spool); non-zero means the split may miss
	// data.
	DroppedEvents uint64
}

// RunStartedData is the data of an io.gttsplit.run.started.v1 event.
type RunStartedData struct {
	Command         string            `json:"command"`
	Args            []string          `json:"args"`
	Env             map[string]string `json:"env"`
	EnvAdded        []string          `json:"env_added"`
	VerboseAppended bool              `json:"verbose_appended"`
	Issue           string            `json:"issue"`
	ControlOf       string            `json:"control_of,omitempty"`
	// NoLog says the collector reads no log of the process (collector
	// attach without --log): the run has only its fdinfo samples.
	NoLog        bool   `json:"no_log,omitempty"`
	SourceDir    string `json:"source_dir"`
	SourceCommit string `json:"source_commit"`
	SourceDirty  *bool  `json:"source_dirty"`
	// SourceCommitTime is the source commit's committer time (omitted
	// when unknown).
	SourceCommitTime time.Time `json:"source_commit_time,omitzero"`
	CollectorVersion string    `json:"collector_version"`
	PID              int       `json:"pid"`
	Started          time.Time `json:"started,omitzero"`
}

// LogLinesData is the data of an io.gttsplit.log.lines.v1 event: consecutive
// lines of one stream; the seq of Lines[i] is FirstSeq+i.
type LogLinesData struct {
	Stream   string     `json:"stream"`
	FirstSeq uint64     `json:"first_seq"`
	Lines    []LineData `json:"lines"`
}

// LineData is one log line; T is its capture time (omitted when unknown).
type LineData struct {
	T    time.Time `json:"t,omitzero"`
	Text string    `json:"text"`
}

// FDInfoSampleData is the data of an io.gttsplit.fdinfo.sample.v1 event.
type FDInfoSampleData struct {
	Seq   uint64     `json:"seq"`
	T     time.Time  `json:"t,omitzero"`
	Procs []ProcData `json:"procs"`
	Cards []CardData `json:"cards"`
}

// ProcData is the DRM fds of one process of the measured tree.
type ProcData struct {
	PID int      `json:"pid"`
	FDs []FDData `json:"fds"`
}

// FDData is one fd: its number, readlink target and raw fdinfo text.
type FDData struct {
	FD   int    `json:"fd"`
	Link string `json:"link"`
	Text string `json:"text"`
}

// CardData is one amdgpu card's device-wide GTT counters.
type CardData struct {
	Card          string `json:"card"`
	GTTUsedBytes  int64  `json:"gtt_used_bytes"`
	GTTTotalBytes int64  `json:"gtt_total_bytes"`
}

// RunFinishedData is the data of an io.gttsplit.run.finished.v1 event.
type RunFinishedData struct {
	Finished      time.Time `json:"finished,omitzero"`
	ExitCode      *int      `json:"exit_code"`
	Signal        string    `json:"signal"`
	Incomplete    bool      `json:"incomplete"`
	DurationNS    int64     `json:"duration_ns"`
	DroppedEvents uint64    `json:"dropped_events"`
	// Sent is what the collector sent of the run (absent from events of
	// collectors that did not say): the aggregator calls a run complete
	// once it folded all of it.
	Sent *SentData `json:"sent,omitempty"`
}

// SentData is what a collector sent of a run: per log stream the distinct
// lines and the last line's seq, and the distinct samples and the last
// sample's seq. Events the collector dropped (see dropped_events) are not
// counted.
type SentData struct {
	Streams       []StreamSentData `json:"streams"`
	Samples       uint64           `json:"samples"`
	LastSampleSeq uint64           `json:"last_sample_seq"`
	// Sampling is how the collector sampled (absent from collectors that
	// did not say).
	Sampling *SamplingData `json:"sampling,omitempty"`
}

// SamplingData is how a collector sampled fdinfo: the interval, the
// samples taken at once at a memory-relevant log line, and the largest
// time between two consecutive samples.
type SamplingData struct {
	IntervalNS   int64  `json:"interval_ns"`
	Triggered    uint64 `json:"triggered"`
	LargestGapNS int64  `json:"largest_gap_ns"`
}

// StreamSentData is what a collector sent of one log stream.
type StreamSentData struct {
	Stream  string `json:"stream"`
	Lines   uint64 `json:"lines"`
	LastSeq uint64 `json:"last_seq"`
}
