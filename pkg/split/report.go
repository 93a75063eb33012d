package split

import (
	"math"
	"strconv"
)

// MiB is a size in mebibytes. It marshals to JSON as a number rounded to two
// decimals; a nil *MiB marshals as null (unknown).
type MiB float64

// MarshalJSON writes the value rounded to two decimals.
func (m MiB) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, round2(float64(m)), 'f', -1, 64), nil
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// Pct is a percentage, marshalled like MiB (two decimals).
type Pct = MiB

// Report is the split of one run (its rows and keys: docs/accounting.md). Pointer fields are null when
// unknown; the reason is always in Flags.
type Report struct {
	Schema     string     `json:"schema"`
	Run        RunMeta    `json:"run"`
	Provenance Provenance `json:"provenance"`

	PeakGTTMiB  *MiB `json:"peak_gtt_mib"`
	FinalGTTMiB *MiB `json:"final_gtt_mib"`

	ModelGTTMiB  *MiB `json:"model_gtt_mib"`
	ModelHostMiB *MiB `json:"model_host_mib"`

	PackedMiB     *MiB `json:"packed_mib"`
	PackedWeights *int `json:"packed_weights"`

	StateMiB   *MiB `json:"state_mib"`
	ComputeMiB *MiB `json:"compute_mib"`

	UnattributedMiB *MiB `json:"unattributed_mib"`
	UnattributedPct *Pct `json:"unattributed_pct"`
	DuplicatePct    *Pct `json:"duplicate_pct"`

	// Models lists every real model load of the log (main, draft/MTP,
	// mmproj, router children's models) with its own figures; the rows
	// above sum the live ones (docs/accounting.md rule 3).
	Models []ModelLoad `json:"models"`

	Flags  []string `json:"flags"`
	Checks []Check  `json:"checks"`

	Detail   Detail `json:"detail"`
	Expected string `json:"expected"`

	// Timeline is the process GTT over the run (downsampled, at most 1000
	// points) with the log's load and context markers; omitted when no
	// sample had a time.
	Timeline *Timeline `json:"timeline,omitempty"`
}

// RunMeta is the "run" object of the report.
type RunMeta struct {
	ID      string `json:"id"`
	Host    string `json:"host"`
	Lane    string `json:"lane"`
	Command string `json:"command"`
	Issue   string `json:"issue,omitempty"`
	// ControlOf is the run this run is the control of (collector run
	// --control-of), if any.
	ControlOf string `json:"control_of,omitempty"`
	ExitCode  *int   `json:"exit_code"`
	Signal    string `json:"signal,omitempty"`
	Started   string `json:"started"`  // RFC 3339, "" when unknown
	Finished  string `json:"finished"` // RFC 3339, "" when unknown
	Complete  bool   `json:"complete"`
}

// Provenance names what was measured (docs/accounting.md rule 13).
type Provenance struct {
	LlamaBuild       string `json:"llama_build"`
	SourceCommit     string `json:"source_commit"`
	SourceDirty      *bool  `json:"source_dirty"`
	CollectorVersion string `json:"collector_version"`
}

// ModelLoad is one real model load and what it holds: its model buffers
// and the KV/state and compute buffers of its contexts. A load is live
// unless a later load of the same file replaced it or the router unloaded
// it (Ended says which).
type ModelLoad struct {
	Role string `json:"role"` // main, draft, mmproj, or model (a further load)
	File string `json:"file"` // as the loader printed it; "" when the log does not say
	Line uint64 `json:"line"` // the load's first line
	// RouterPort is the llama-server router child that loaded it (0: none).
	RouterPort   int    `json:"router_port,omitempty"`
	Live         bool   `json:"live"`
	Ended        string `json:"ended,omitempty"`
	ModelGTTMiB  *MiB   `json:"model_gtt_mib"`
	ModelHostMiB *MiB   `json:"model_host_mib"`
	StateMiB     *MiB   `json:"state_mib"`
	ComputeMiB   *MiB   `json:"compute_mib"`
	Contexts     int    `json:"contexts"`
}

// Check is one cross-check between two sources that speak of the same bytes.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok | warn | fail
	Detail string `json:"detail"`
}

// Check statuses.
const (
	StatusOK   = "ok"
	StatusWarn = "warn"
	StatusFail = "fail"
)

// Detail carries the figures behind the headline rows, so a reader can
// re-derive every number of the split.
type Detail struct {
	KVMiB *MiB `json:"kv_mib"`
	RSMiB *MiB `json:"rs_mib"`
	// OtherStateMiB is state of cache kinds outside the KV/RS rule (the
	// DSV4 "... state" buffers), inside state_mib.
	OtherStateMiB  *MiB `json:"other_state_mib,omitempty"`
	ComputeOnlyMiB *MiB `json:"compute_only_mib"`
	OutputMiB      *MiB `json:"output_mib"`
	HostKVMiB      MiB  `json:"host_kv_mib"`
	HostComputeMiB MiB  `json:"host_compute_mib"`
	// Buffers lists every buffer line counted in a row, in log order.
	Buffers []BufferLine `json:"buffers"`
	// Unknown lists buffer lines of kinds the core does not know; they are
	// in no row (so in "not attributed").
	Unknown []BufferLine `json:"unknown_buffers,omitempty"`
	// Remote lists the buffer lines of remote (RPC) devices: another
	// host's memory, in no row.
	Remote []BufferLine `json:"remote_buffers,omitempty"`

	ModelLoads       int    `json:"model_loads"`   // real loads seen (live or not)
	ProbeLoads       int    `json:"probe_loads"`   // --fit dry runs seen
	LiveContexts     int    `json:"live_contexts"` // contexts of the live loads
	Reservations     int    `json:"reservations"`  // compute reservations of the live contexts
	PackedTraceLines int    `json:"packed_trace_lines"`
	PackedPeakSeq    uint64 `json:"packed_peak_line"` // log line of the largest resident=
	PackedLastMiB    *MiB   `json:"packed_last_mib"`  // the last resident= (after evictions)

	Samples int `json:"samples"`
	// Sampling is how the collector sampled, when it said (see Sampling).
	Sampling       *SamplingDetail `json:"sampling,omitempty"`
	GPUClients     int             `json:"gpu_clients"` // distinct amdgpu clients at the peak
	PeakAt         string          `json:"peak_at,omitempty"`
	FinalAt        string          `json:"final_at,omitempty"`
	PeakKey        string          `json:"peak_key,omitempty"` // drm-total-gtt or drm-memory-gtt
	CardGTTUsedMiB *MiB            `json:"card_gtt_used_mib"`

	LinesRead    uint64   `json:"lines_read"`
	LinesSkipped int      `json:"lines_skipped"` // malformed lines counted and skipped
	FDsSkipped   int      `json:"fds_skipped"`   // truncated or malformed fdinfo files
	Warnings     []string `json:"warnings,omitempty"`
	// Missing says what an incomplete run lacks of what its collector
	// sent (the run-finished event, lines of a stream, samples).
	Missing []string `json:"missing,omitempty"`
}

// SamplingDetail is the sampling behind the peak, as the collector stated
// it: a transient peak shorter than the largest gap can be missed.
type SamplingDetail struct {
	IntervalMs   MiB    `json:"interval_ms"`
	Samples      uint64 `json:"samples"`
	Triggered    uint64 `json:"triggered"`
	LargestGapMs MiB    `json:"largest_gap_ms"`
}

// BufferLine is one llama.cpp buffer line as counted.
type BufferLine struct {
	Line uint64 `json:"line"`
	Func string `json:"func"`
	Name string `json:"name"`
	Kind string `json:"kind"`
	MiB  MiB    `json:"mib"`
	Row  string `json:"row"` // model, model_host, state, compute, host, remote, mmproj, unknown
}
