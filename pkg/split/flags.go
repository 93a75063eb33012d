package split

import (
	"fmt"
	"slices"
	"strings"
)

// Flags: what a report says of how far to trust it, each a name (in the
// report's "flags"), its words (the text and Markdown reports', the live
// page's) and its place in the report's order, declared together in
// flagTable. A new flag is a constant and an entry there, raised by the
// rule that finds it (docs/accounting.md rule 12).

// Flag names (docs/accounting.md rule 12).
const (
	FlagNotModelLoad     = "not_model_load"
	FlagNotVerbose       = "not_verbose"
	FlagPreB3761         = "pre_b3761"
	FlagLegacyFormat     = "legacy_format"
	FlagFitProbe         = "fit_probe"
	FlagMultipleModels   = "multiple_models"
	FlagMultipleContexts = "multiple_contexts"
	FlagNoContext        = "no_context"
	FlagUnknownBuffer    = "unknown_buffer_kind"
	FlagMmproj           = "mmproj"
	FlagComputeMismatch  = "compute_mismatch"
	FlagOutputRealloc    = "output_realloc"
	FlagNoTrace          = "no_trace"
	FlagNoSamples        = "no_samples"
	FlagNoGPUClient      = "no_gpu_client"
	FlagResidentOnly     = "resident_gtt_only"
	FlagUnattribHigh     = "unattributed_high"
	FlagUnattribNegative = "unattributed_negative"
	FlagLinesSkipped     = "lines_skipped"
	FlagFDsSkipped       = "fds_skipped"
	FlagSourceDirty      = "source_dirty"
	FlagSourceUnknown    = "source_unknown"
	FlagIncomplete       = "incomplete"
	FlagEventsDropped    = "events_dropped"
	// FlagReplaces says the split replaces the run's earlier, incomplete
	// one (Report.Replacing; its run.replaces says which).
	FlagReplaces         = "replaces_incomplete"
	FlagRemoteBuffers    = "remote_buffers"
	FlagDeviceOrder      = "device_order_assumed"
	FlagDeviceUnmatched  = "device_unmatched"
	FlagDeviceOverCard   = "device_over_card"
	FlagControl          = "control"
	FlagControlOffloaded = "control_offloaded"
	FlagChildFailed      = "child_failed"
	FlagChildSignalled   = "child_signalled"
	FlagNoLog            = "no_log"
	FlagContextFailed    = "context_failed"
	FlagMmprojFailed     = "mmproj_failed"
	// FlagStateCapped says a cap of the fold's state was hit (see
	// MaxRecords and MaxTraceNames); the report's warnings say which.
	FlagStateCapped = "state_capped"
)

// flagTable is every flag in the order a report lists them, with what it
// means in words, and, for a flag of absent evidence, what it means while
// the run is open (open: not seen yet, rather than not there). FlagWords
// adds a report's own figures (the exit status, the signal).
var flagTable = []struct{ name, text, open string }{
	{FlagChildFailed, "the command exited with a non-zero status: a failed run, measured until it ended", ""},
	{FlagChildSignalled, "the command was stopped by a signal: an interrupted run, measured until it stopped", ""},
	{FlagNoLog, "no log was read (collector attach without --log): every log row is unknown, only the fdinfo samples were measured", ""},
	{FlagNotModelLoad, "the log has no model load (no `loaded meta data` line and no model buffer line): the model row is unknown; KV + state and compute come from the buffer lines the log does have", "no model load seen yet (the run is still open): the model row is unknown so far"},
	{FlagNotVerbose, "the log is not a -v log (no debug-only line): buffer lines may be missing, numbers computed from what is there", "no debug-only line seen yet (the run is still open): whether the log is -v is not known yet"},
	{FlagPreB3761, "a llama.cpp build before b3761 whose log has no per-buffer line: format not supported", ""},
	{FlagLegacyFormat, "pre-b1843 totals lines (`mem required`, `VRAM used`) seen: not per-buffer, not counted", ""},
	{FlagFitProbe, "a --fit probe load (all model buffers 0.00 MiB) was seen and ignored, with its contexts", ""},
	{FlagMultipleModels, "more than one live model (main and draft/MTP, mmproj, router children): each is listed under models and all are summed in the rows", ""},
	{FlagMultipleContexts, "a model has more than one live context: all of them are summed", ""},
	{FlagNoContext, "a model was loaded but no context was created for it", "a model was loaded, no context seen yet (the run is still open)"},
	{FlagContextFailed, "a context's creation failed: its buffers were freed with it and are in no row (listed under failed buffers; a sample taken before the failure may still hold them)", ""},
	{FlagMmprojFailed, "a multimodal projector's load failed: its weights and buffers are in no row (listed under failed buffers) and it is not a live model", ""},
	{FlagUnknownBuffer, "buffer lines of a kind gttsplit does not know: listed, in no row (so in not attributed)", ""},
	{FlagMmproj, "a multimodal projector (mmproj/CLIP) is loaded: its weights (on its CLIP backend) and compute buffers are counted and listed under models", ""},
	{FlagRemoteBuffers, "buffers on remote (RPC) devices: another host's memory, listed in the detail and kept out of every row", ""},
	{FlagDeviceOrder, "the log prints no PCI address for its devices: they were matched to the cards by their order, an assumption (see the warnings)", ""},
	{FlagDeviceUnmatched, "a device could not be matched to a sampled card (see the devices): its not attributed is unknown", ""},
	{FlagDeviceOverCard, "the log attributes more to a card's devices than the card's own memory held at its peak (see the device_vs_card check)", ""},
	{FlagControl, "this run is a control (offload off): judged as one, its not attributed is not flagged", ""},
	{FlagControlOffloaded, "this run is named a control but holds model buffers in GTT: it was not run with offload off (-ngl 0)", ""},
	{FlagComputeMismatch, "llama.cpp reports a compute buffer that does not match its reservation", ""},
	{FlagOutputRealloc, "the output buffer was reallocated after the context was built", ""},
	{FlagNoTrace, "no host-weight trace line: the packed row is unknown, not 0 (run with GGML_HRX_HOST_WEIGHT_TRACE=1)", "no host-weight trace line seen yet (the run is still open): the packed row is unknown so far, not 0"},
	{FlagNoSamples, "no fdinfo samples: the peak is unknown", "no fdinfo sample seen yet (the run is still open): the peak is unknown so far"},
	{FlagNoGPUClient, "no amdgpu DRM client in any sample: the peak is unknown", "no amdgpu DRM client seen yet in the samples (the run is still open): the peak is unknown so far"},
	{FlagResidentOnly, "the kernel gave only resident GTT (drm-memory-gtt, or gtt mem before 5.19), not drm-total-gtt", ""},
	{FlagUnattribHigh, "not attributed is above the threshold", ""},
	{FlagUnattribNegative, "the rows add up to MORE than the measured peak", ""},
	{FlagLinesSkipped, "malformed lines were counted and skipped", ""},
	{FlagFDsSkipped, "truncated or malformed fdinfo files or samples lines were counted and skipped", ""},
	{FlagSourceDirty, "the measured source tree was dirty (or its state unknown)", ""},
	{FlagSourceUnknown, "the measured source tree's commit is unknown", ""},
	{FlagIncomplete, "the run did not finish (no run-finished event): a partial split", "the run is still open (its run-finished event has not come): the split so far"},
	{FlagEventsDropped, "the collector dropped events of this run: the split misses data", ""},
	{FlagReplaces, "this split replaces an earlier, incomplete split of the run (written when the run went idle): late events of the run's own host re-opened it; run.replaces says when that split was written and what it lacked",
		"late events of the run's own host re-opened it after an incomplete split was written (when the run went idle): the split the run closes with replaces that one"},
	{FlagStateCapped, "a very long run outgrew the fold's memory: its earliest lines were left out (never the live load's); a figure whose lines were left out is unknown", ""},
}

// FlagWords says in words what flag f means for report r: FlagText, with
// the figures of r where the flag has some (the exit status, the signal),
// and "not seen yet" for absent evidence while r's run is open.
func FlagWords(r Report, f string) string {
	switch {
	case f == FlagChildFailed && r.Run.ExitCode != nil:
		return fmt.Sprintf("the command exited with status %d: a failed run, measured until it ended", *r.Run.ExitCode)
	case f == FlagChildSignalled && r.Run.Signal != "":
		return fmt.Sprintf("the command was stopped by %s: an interrupted run, measured until it stopped", r.Run.Signal)
	case f == FlagReplaces && r.Run.Replaces != nil:
		return replacesWords(r)
	case r.Run.Open && flagOpen[f] != "":
		return flagOpen[f]
	}
	return FlagText[f]
}

// flagOpen are the flags' words while a run is open, where they differ.
var flagOpen = func() map[string]string {
	m := map[string]string{}
	for _, f := range flagTable {
		if f.open != "" {
			m[f.name] = f.open
		}
	}
	return m
}()

// FlagText says in words what each flag means (FlagWords: for one
// report).
var FlagText = func() map[string]string {
	m := make(map[string]string, len(flagTable))
	for _, f := range flagTable {
		m[f.name] = f.text
	}
	return m
}()

// replacesWords says which split r replaces: when it was written, its
// number and what it lacked.
func replacesWords(r Report) string {
	p := r.Run.Replaces
	which := fmt.Sprintf("the incomplete split written at %s (split %d)", p.Written, p.Split)
	if p.Written == "" {
		which = fmt.Sprintf("the incomplete split %d", p.Split)
	}
	if len(p.Missing) > 0 {
		which += ", which lacked " + strings.Join(p.Missing, "; ")
	}
	if r.Run.Open {
		return "late events of the run's own host re-opened it after " + which + ": the split the run closes with replaces that one"
	}
	return "this split replaces " + which + ": late events of the run's own host re-opened the run"
}

// flagRank is each flag's place in flagTable.
var flagRank = func() map[string]int {
	m := make(map[string]int, len(flagTable))
	for i, f := range flagTable {
		m[f.name] = i
	}
	return m
}()

// raise adds flag f to r's flags (once), in flagTable's order.
func (r *Report) raise(f string) {
	if slices.Contains(r.Flags, f) {
		return
	}
	i := 0
	for i < len(r.Flags) && flagRank[r.Flags[i]] < flagRank[f] {
		i++
	}
	// (Clipped: r may share its flags with a copy.)
	r.Flags = slices.Insert(slices.Clip(r.Flags), i, f)
}
