package split

import (
	"encoding/json"
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

	// Devices splits the rows by the llama.cpp device their buffers are
	// on, and Cards the measured memory by card (docs/accounting.md rules
	// 16 to 18). Both are omitted when the split has one GPU
	// device and no discrete card: its rows are then that device's.
	Devices []Device `json:"devices,omitempty"`
	Cards   []Card   `json:"cards,omitempty"`

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
	// Open says the run has started and its run-finished event has not
	// come: its figures are the ones seen so far, and what is absent is
	// not seen yet.
	Open bool `json:"open,omitempty"`
	// Replaces is the run's earlier split that this one replaces: the run
	// was closed incomplete (the idle timeout), and late events of its own
	// host re-opened it. Omitted for a run's first split (and in every
	// split that is not an aggregator's: a replay folds a run once).
	Replaces *Replaced `json:"replaces,omitempty"`
}

// Replaced is a run's earlier, incomplete split, which a later split of
// the run replaces (the report is flagged replaces_incomplete).
type Replaced struct {
	// Written is when it was written (RFC 3339, the aggregator's clock).
	Written string `json:"written"`
	// Split is its number among the run's splits (0 for the first): the n
	// of its split event's id, <run>/split/<n>.
	Split int `json:"split"`
	// Missing is what it lacked of what the run's collector sent (its
	// detail.missing).
	Missing []string `json:"missing,omitempty"`
}

// Replacing makes r the split that replaces p, the run's earlier
// incomplete split: r.Run.Replaces says which, and r is flagged
// replaces_incomplete.
func (r *Report) Replacing(p Replaced) {
	r.Run.Replaces = &p
	r.raise(FlagReplaces)
}

// Provenance names what was measured (docs/accounting.md rule 13).
type Provenance struct {
	LlamaBuild   string `json:"llama_build"`
	SourceCommit string `json:"source_commit"`
	SourceDirty  *bool  `json:"source_dirty"`
	// SourceCommitTime is the source commit's committer time (RFC 3339,
	// UTC), when the collector read it from the tree; left out when not.
	SourceCommitTime string `json:"source_commit_time,omitempty"`
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
	// Failed lists the buffer lines of the contexts and multimodal
	// projectors whose creation failed: freed with them, in no row.
	Failed []BufferLine `json:"failed_buffers,omitempty"`

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

// Device kinds: a row of the device table.
const (
	DeviceGPU    = "device" // a device's own buffers (CUDA0, ROCm1, Vulkan0, MTL0 ...)
	DeviceSplit  = "split"  // a buffer spread over several devices (CUDA0_Split with -sm row, Meta(...) with -sm tensor)
	DevicePinned = "pinned" // pinned host memory mapped for the GPU (CUDA_Host, ROCm_Host ...)
	DeviceHost   = "host"   // plain host memory (CPU, CPU_Mapped, CPU_REPACK, AMX ...), not GPU memory
	DeviceRemote = "remote" // a remote (RPC) device: another host's memory, in no row
)

// Device is one row of the device table: the buffers of the live loads on
// one llama.cpp device (or pinned, host or remote memory), and, for a
// device matched to a card, that card's own memory against them. The
// device, split and pinned rows sum to model_gtt_mib, state_mib and
// compute_mib; the host row is model_host_mib, detail.host_kv_mib and
// detail.host_compute_mib. A figure is null when its row is.
type Device struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// BufferTypes are the buffer types summed in the row, as printed.
	BufferTypes []string `json:"buffer_types"`
	// Spans are the devices a split row is spread over.
	Spans []string `json:"spans,omitempty"`
	// From the log's "using device" line: its description, PCI address
	// (as printed), the free memory llama.cpp saw, and the line.
	Description string `json:"description,omitempty"`
	PCI         string `json:"pci,omitempty"`
	FreeMiB     *MiB   `json:"free_mib,omitempty"`
	Line        uint64 `json:"line,omitempty"`

	ModelMiB   *MiB `json:"model_mib"`
	StateMiB   *MiB `json:"state_mib"`
	ComputeMiB *MiB `json:"compute_mib"`

	// Card is the drm-pdev of the card the device was matched to, Match
	// how ("pci": the address the log prints; "order": the devices' order
	// against the cards, an assumption), Unmatched why it was not.
	Card      string `json:"card,omitempty"`
	Match     string `json:"match,omitempty"`
	Unmatched string `json:"unmatched,omitempty"`
	// NotAttributedMiB is its card's own memory at its peak minus what
	// the log attributes to the card (its devices' rows): the card's
	// figure, shared when several devices are on one card.
	NotAttributedMiB *MiB `json:"not_attributed_mib,omitempty"`
	NotAttributedPct *Pct `json:"not_attributed_pct,omitempty"`
}

// Card is one card (a PCI device, drm-pdev) the process held memory on,
// from the fdinfo samples: per region class its peak and final, the
// devices matched to it, and its own memory against them.
type Card struct {
	PDev   string `json:"pdev"`
	Driver string `json:"driver"`
	// Memory is where its devices' buffers live: "vram" on a discrete
	// card, "gtt" on an APU (whose small carve-out cannot hold them); ""
	// when the process held none of either.
	Memory  string       `json:"memory"`
	Regions []CardRegion `json:"regions"`
	Clients int          `json:"clients"` // distinct DRM clients at the final tick
	Devices []string     `json:"devices"`
	// AttributedMiB is what the log attributes to the card's own memory:
	// its devices' rows (and split or pinned rows wholly on it, pinned
	// ones only when its memory is GTT), by row in ModelMiB, StateMiB,
	// ComputeMiB, and the packed copy when the run has one device;
	// NotAttributedMiB its peak minus that (null with no device, or a
	// device whose model row is unknown).
	ModelMiB         *MiB     `json:"model_mib,omitempty"`
	StateMiB         *MiB     `json:"state_mib,omitempty"`
	ComputeMiB       *MiB     `json:"compute_mib,omitempty"`
	PackedMiB        *MiB     `json:"packed_mib,omitempty"`
	AttributedMiB    *MiB     `json:"attributed_mib"`
	NotAttributedMiB *MiB     `json:"not_attributed_mib"`
	NotAttributedPct *Pct     `json:"not_attributed_pct"`
	Notes            []string `json:"notes,omitempty"`
}

// CardRegion is a card's memory of one region class: vram, gtt or cpu.
type CardRegion struct {
	Class string `json:"class"`
	// Regions are the kernel's region names summed ("vram", "vram0",
	// "local0", "system0"); Resident says a figure was resident memory
	// only (drm-memory-*).
	Regions  string `json:"regions"`
	Resident bool   `json:"resident,omitempty"`
	PeakMiB  MiB    `json:"peak_mib"`
	PeakAt   string `json:"peak_at,omitempty"`
	FinalMiB MiB    `json:"final_mib"`
	FinalAt  string `json:"final_at,omitempty"`
}

// JSON renders the report as indented JSON (the gttsplit.split.v1 object), with a final newline.
func JSON(r Report) ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
