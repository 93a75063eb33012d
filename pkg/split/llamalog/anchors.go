package llamalog

import (
	"bytes"
)

var (
	aMiB       = []byte("MiB")
	aBreakdown = []byte("breakdown_print")
	// The scanner searches for rare parts of the marker lines (a rarer
	// first byte makes the vectorised search several times faster); Parse
	// then checks the whole marker.
	aLoadScan   = []byte("-value pairs") // "loaded meta data with %d key-value pairs"
	aLoad       = []byte("loaded meta data")
	aCtxScan    = []byte("ucting llama_context")
	aCtx        = []byte("constructing llama_context")
	aBuild      = []byte("build")
	aVersion    = []byte("version: ")
	aVerbosity  = []byte("verbosity = ")
	aBufferSize = []byte("buffer size")
	aResident   = []byte("resident=")
	// Markers of which loads are live (docs/accounting.md rule 3) and of
	// the pre-b1843 totals; each has a rare enough first byte.
	aDraft     = []byte("draft model")
	aSpawn     = []byte("spawning server")
	aInstance  = []byte("instance name=")
	aClip      = []byte("CLIP using")
	aClipCPU   = []byte("fallback to CPU backend")
	aClipParam = []byte("params backend")
	aWarmup    = []byte("warming up the model")
	aModelSize = []byte("model size:")
	aFit       = []byte("fitting params")
	// "<...>_fit_impl: projected to use N MiB of device memory vs. M MiB
	// of free device memory": the fit's dry runs are over (a MiB line,
	// found by the MiB anchor).
	aFitProjected = []byte("projected to use")
	// "<fit function>: projected memory use with initial parameters
	// [MiB]:" (several devices: a line per device follows, then "projected
	// to use"): the projection of the fit's first dry run (a MiB line).
	aFitInitial = []byte("projected memory use with initial parameters")
	// "<...>_fit_impl: getting device memory data for initial
	// parameters:": the fit's dry runs start (printed where a build or a
	// verbosity prints no "fitting params to device memory").
	aFitData = []byte("getting device memory data")
	// "sched_reserve: reserving ...": a context's compute reservation
	// starts (b7746+; earlier builds reserve once, in the context's
	// constructor, and print no start line).
	aReserve = []byte("reserving ...")
	// A line that says something failed: "failed to allocate",
	// "failed to initialize the context", "failed to create context",
	// "Failed to load CLIP model" (read by readFailure; the others are
	// not relevant), and the assertion of a buffer that was not
	// allocated.
	aFailed       = []byte("failed to ")
	aFailedCap    = []byte("Failed to ")
	aAssertBuffer = []byte("GGML_ASSERT(buffer)")
	aVRAMUsed     = []byte("VRAM used")
	aMemReq       = []byte("mem required")
	// "<func>: using device CUDA0 (NVIDIA ...) (0000:01:00.0) - 11245 MiB
	// free": a device a model load uses (a MiB line, found by the MiB
	// anchor).
	aDevice = []byte("using device ")
)

// debugMarkers are substrings of lines llama.cpp prints only at DEBUG level,
// that is with -v (docs/formats.md, "Loads, contexts, build and verbosity").
var debugMarkers = [][]byte{
	[]byte("create_tensor: loading tensor"),
	[]byte("assigned to device"),
	[]byte("for async uploads"),
	[]byte("using async uploads for device"),
	[]byte("does not support async"),
	[]byte("n_embd_k_gqa ="),
	[]byte("enumerating backends"),
	[]byte("graph_reserve: reserving a graph"),
	[]byte(": dev = "),
	[]byte("does not have KV cache"),
	[]byte("cannot be used with preferred buffer type"),
	[]byte("backend_ptrs.size()"),
	[]byte("max_nodes = "),
}

// Anchors. A relevant line contains one of scanAnchors (searched in every
// block), or one of onceAnchors (searched only until the fold has the first
// build and verbosity lines: only the first of each is used), or is a
// memory-breakdown row (read on from its table's header line), or a
// debug-only line (searched until the fold has one), or matches a custom
// trace pattern.
var (
	// aBufferSize: a buffer line is found by its "MiB", and by its
	// "buffer size" too, so that one whose size is in another unit is read
	// (and counted malformed) rather than passed over.
	scanAnchors = [][]byte{aMiB, aBufferSize, aLoadScan, aCtxScan, aDraft, aSpawn, aInstance, aClip, aClipCPU, aClipParam, aModelSize, aFit, aWarmup, aVRAMUsed, aMemReq,
		aFitData, aReserve, aFailed, aFailedCap, aAssertBuffer}
	onceAnchors = [][]byte{aBuild, aVersion, aVerbosity}
)

// MemoryLine reports whether a raw log line marks a change of the
// process's memory: a buffer line, a host-weight trace line, a model load
// or a context. The collector samples at once when one arrives. It is a
// few substring searches, cheap enough for every line.
func MemoryLine(line []byte) bool {
	return bytes.Contains(line, aBufferSize) || bytes.Contains(line, aResident) ||
		bytes.Contains(line, aLoadScan) || bytes.Contains(line, aCtxScan)
}

// Relevant reports whether a raw line can matter to the split; lines for
// which it is false are never parsed. It selects what the block scanner
// selects. With debug false, lines that matter only as -v markers are not
// looked for (the caller already has one).
func (p *Parser) Relevant(line []byte, debug bool) bool {
	if usePairScan {
		// The pair scan of the line: every anchor (and -v marker) at
		// once (relevantPlain is the search for each in turn).
		ps := mainPairs
		if debug {
			ps = debugPairs
		}
		return ps.any(line) || !p.traceNeedsMiB && (len(p.traceAnchor) == 0 || bytes.Contains(line, p.traceAnchor)) && p.trace.Match(line)
	}
	return p.relevantPlain(line, debug)
}

// relevantPlain is Relevant by a search for each anchor in turn.
func (p *Parser) relevantPlain(line []byte, debug bool) bool {
	for _, a := range scanAnchors {
		if bytes.Contains(line, a) {
			return true
		}
	}
	for _, a := range onceAnchors {
		if bytes.Contains(line, a) {
			return true
		}
	}
	if bytes.Contains(line, aBreakdown) {
		return true
	}
	if !p.traceNeedsMiB && (len(p.traceAnchor) == 0 || bytes.Contains(line, p.traceAnchor)) && p.trace.Match(line) {
		return true
	}
	return debug && isDebugMarker(line)
}

func isDebugMarker(line []byte) bool {
	for _, m := range debugMarkers {
		if bytes.Contains(line, m) {
			return true
		}
	}
	return false
}
