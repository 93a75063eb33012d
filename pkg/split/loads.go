package split

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// loadAcc is one model load: its model buffer lines and the contexts
// created after it (docs/accounting.md rule 3).
type loadAcc struct {
	seq         uint64
	file        string
	role        string
	port        int
	marker      bool               // opened by a "loaded meta data" line
	models      []*llamalog.Record // into the report's records (not copies: 160 bytes each)
	modelClosed bool
	ctxs        []*ctxAcc
	unknown     []BufferLine
	// mmproj/CLIP: the backend it runs on and its weights' size line.
	mmproj   bool
	clipDev  string
	clipSize *llamalog.Record
	ended    string // why it is no longer live ("" while live)
	// failed is the line that said the mmproj's load failed (nil: it
	// did not): what it had allocated was freed.
	failed *llamalog.Record
	// devices are the devices its "using device" lines name.
	devices []string
}

func (l *loadAcc) probe() bool {
	if l.mmproj || len(l.models) == 0 {
		return false
	}
	for _, m := range l.models {
		if m.MiB != 0 {
			return false
		}
	}
	return true
}

// real reports whether the load allocated something: model buffers that
// are not all 0.00 MiB, or (mmproj) a weight size or compute buffer lines.
func (l *loadAcc) real() bool {
	if l.mmproj {
		return l.clipSize != nil || len(l.ctxs) > 0
	}
	return len(l.models) > 0 && !l.probe()
}

// IsRemoteBuffer reports whether a buffer-type name is a remote (RPC)
// device: another host's memory, never this host's GTT.
func IsRemoteBuffer(name string) bool { return strings.HasPrefix(name, "RPC") }

// bracket is a --fit bracket: from "fitting params to device memory" to
// "fitting params to free memory took" (end 0 while open).
type bracket struct {
	port       int
	start, end uint64
}

func (b bracket) holds(port int, seq uint64) bool {
	return b.port == port && seq >= b.start && (b.end == 0 || seq <= b.end)
}

// figures is what one load (or the loads summed) holds.
type figures struct {
	model, host                 float64
	haveModel, haveHost         bool
	kv, rs, other, comp, output float64
	hostKV, hostComp            float64
	ctxs, reservations          int
	haveCtx                     bool
	lines                       []BufferLine
	remote                      []BufferLine
	// failed are the buffer lines of the contexts and projectors whose
	// creation failed: freed with them, in no row.
	failed []BufferLine
	// buffersLost and reservationLost say the fold's cap may have dropped
	// a context's KV, recurrent-state or output lines, or its last
	// reservation: the figures they feed are unknown.
	buffersLost, reservationLost bool
}

func (f *figures) add(g figures) {
	f.model += g.model
	f.host += g.host
	f.haveModel = f.haveModel || g.haveModel
	f.haveHost = f.haveHost || g.haveHost
	f.kv += g.kv
	f.rs += g.rs
	f.other += g.other
	f.comp += g.comp
	f.output += g.output
	f.hostKV += g.hostKV
	f.hostComp += g.hostComp
	f.ctxs += g.ctxs
	f.reservations += g.reservations
	f.haveCtx = f.haveCtx || g.haveCtx
	f.lines = append(f.lines, g.lines...)
	f.remote = append(f.remote, g.remote...)
	f.failed = append(f.failed, g.failed...)
	f.buffersLost = f.buffersLost || g.buffersLost
	f.reservationLost = f.reservationLost || g.reservationLost
}

func bufLine(r llamalog.Record, row string) BufferLine {
	return BufferLine{Line: r.Seq, Func: r.Func, Name: r.Name, Kind: r.BufKind, MiB: MiB(r.MiB), Row: row}
}

// addModel counts a model buffer line in the row its device (r.Name)
// gives: remote devices in none, host memory apart, the rest in GTT.
func (f *figures) addModel(r llamalog.Record) {
	switch {
	case IsRemoteBuffer(r.Name):
		// Nor does a load on remote devices only: 0 here, not unknown.
		f.remote = append(f.remote, bufLine(r, "remote"))
		f.haveModel = true
	case IsHostBuffer(r.Name):
		// A load with host buffers only put 0 MiB in GTT: 0, not unknown.
		f.host += r.MiB
		f.haveHost, f.haveModel = true, true
		f.lines = append(f.lines, bufLine(r, "model_host"))
	default:
		f.model += r.MiB
		f.haveModel = true
		f.lines = append(f.lines, bufLine(r, "model"))
	}
}

// failedLines are the buffer lines of a context whose creation failed (or
// of a failed projector's context), as listed apart: KV, output and
// compute lines.
func failedLines(x *ctxAcc) []BufferLine {
	var out []BufferLine
	for _, bl := range x.lines {
		bl.Row = "failed"
		out = append(out, bl)
	}
	for _, rs := range append(slices.Clone(x.reservations), x.cur) {
		for _, r := range rs {
			out = append(out, bufLine(r, "failed"))
		}
	}
	return out
}

// loadFigures sums a load's model buffers and its contexts' buffers. The
// buffers of a context whose creation failed, and all of a projector
// whose load failed, are listed apart (failed), in no row.
func loadFigures(l *loadAcc) figures {
	var g figures
	for _, m := range l.models {
		g.addModel(*m)
	}
	if l.clipSize != nil {
		// The mmproj weights live on the CLIP backend.
		r := *l.clipSize
		r.Name = l.clipDev
		r.BufKind = "mmproj model"
		switch {
		case l.failed != nil:
			g.failed = append(g.failed, bufLine(r, "failed"))
		case l.clipDev == "":
			// No "CLIP using ... backend" line: where the weights
			// live is not known; listed, not counted.
			g.lines = append(g.lines, bufLine(r, "unknown"))
		default:
			g.addModel(r)
		}
	}
	for _, x := range l.ctxs {
		if x.failed != nil || l.failed != nil {
			g.failed = append(g.failed, failedLines(x)...)
			continue
		}
		g.haveCtx = true
		g.buffersLost = g.buffersLost || x.buffersLost
		g.reservationLost = g.reservationLost || x.reservationLost
		if !l.mmproj {
			g.ctxs++
		}
		g.kv += x.kv
		g.rs += x.rs
		g.other += x.other
		g.output += x.output
		g.hostComp += x.hostOutput
		g.hostKV += x.hostKV
		g.reservations += x.nReservations()
		for _, bl := range x.lines {
			if bl.Row == "remote" {
				g.remote = append(g.remote, bl)
			} else {
				g.lines = append(g.lines, bl)
			}
		}
		for _, r := range x.lastReservation() {
			switch {
			case IsRemoteBuffer(r.Name):
				g.remote = append(g.remote, bufLine(r, "remote"))
			case IsHostBuffer(r.Name):
				g.hostComp += r.MiB
				g.lines = append(g.lines, bufLine(r, "host"))
			default:
				g.comp += r.MiB
				g.lines = append(g.lines, bufLine(r, "compute"))
			}
		}
	}
	return g
}

// endFailed ends a projector whose load failed: what it had allocated
// was freed with it (its weights, when their allocation is what failed,
// never existed).
func (rd *logReader) endFailed() {
	for _, l := range rd.loads {
		if l.failed != nil && l.ended == "" {
			l.ended = fmt.Sprintf("its load failed (line %d)", l.failed.Seq)
		}
	}
}

// endReloaded ends a load that a later real load of the same file in the
// same process replaces (a reload).
func (rd *logReader) endReloaded() {
	for i, l := range rd.loads {
		if !l.real() || l.file == "" || l.ended != "" {
			continue
		}
		for _, m := range rd.loads[i+1:] {
			if m.real() && m.file == l.file && m.port == l.port && m.mmproj == l.mmproj {
				l.ended = fmt.Sprintf("replaced by the reload of the same file at line %d", m.seq)
				break
			}
		}
	}
}

// markLost marks the contexts the fold's cap may have taken lines from
// (see capFrontier): a context that starts before the kept KV, recurrent-
// state and output lines may miss some of them; one that starts before
// the kept reservations and holds fewer than two may miss its last one. A
// context that holds two reservations holds its last one whole: the
// dropped lines are all before the kept ones.
func (rd *logReader) markLost(fr *capFrontier) {
	mark := func(l *loadAcc) {
		for _, x := range l.ctxs {
			x.buffersLost = !l.mmproj && fr.beforeSeq(1, x.seq)
			x.reservationLost = fr.beforeSeq(0, x.seq) && x.nReservations() < 2
		}
	}
	for _, l := range rd.loads {
		mark(l)
	}
	for _, l := range rd.pseudo {
		mark(l)
	}
}

// endUnmarkedFirst is for a capped fold, which may have dropped the first
// load's marker: a load with no marker that opens its process's kept lines
// cannot be told from an earlier load of a file reloaded later, so it is
// not counted.
func (rd *logReader) endUnmarkedFirst() {
	first := map[int]bool{}
	for _, l := range rd.loads {
		if !first[l.port] && !l.marker && !l.mmproj && l.ended == "" {
			l.ended = "its load line was dropped by the fold's cap (state_capped): which load it is is not known"
		}
		first[l.port] = true
	}
}

// passProbeRoles gives a role announced before a probe of the model
// (llama-server sizes a draft with a dry-run load first, b9180+) to the
// real load of the same file that follows it.
func (rd *logReader) passProbeRoles() {
	for i, l := range rd.loads {
		if l.role == "" || !l.probe() {
			continue
		}
		for _, m := range rd.loads[i+1:] {
			if m.port != l.port || m.file != l.file || m.mmproj || m.probe() {
				continue
			}
			if m.real() && m.role == "" {
				m.role = l.role
			}
			break
		}
	}
}

// pseudoPorts lists the ports with buffer lines before any load, in order.
func (rd *logReader) pseudoPorts() []int {
	ports := make([]int, 0, len(rd.pseudo))
	for p := range rd.pseudo {
		ports = append(ports, p)
	}
	sort.Ints(ports)
	return ports
}

// probeTable reports whether a memory-breakdown table is a probe's: inside
// a --fit bracket, or after a probe load and before the next real one.
func (rd *logReader) probeTable(t *table) bool {
	for _, b := range rd.brackets {
		if b.holds(t.port, t.seq) {
			return true
		}
	}
	var before *loadAcc
	for _, l := range rd.loads {
		if l.port == t.port && l.seq < t.seq && !l.mmproj {
			before = l
		}
	}
	return before != nil && before.probe()
}

// tableProbes counts the brackets that hold a table and no probe load: a
// probe the log shows without -v.
func (rd *logReader) tableProbes() int {
	n := 0
	for _, b := range rd.brackets {
		hasProbe, hasTable := false, false
		for _, l := range rd.loads {
			if l.probe() && b.holds(l.port, l.seq) {
				hasProbe = true
			}
		}
		for _, t := range rd.tables {
			if b.holds(t.port, t.seq) {
				hasTable = true
			}
		}
		if hasTable && !hasProbe {
			n++
		}
	}
	return n
}

// lastTable is the memory-breakdown table the rows are checked against:
// the last one after the last real load that is not a probe's (nil: none).
func (rd *logReader) lastTable(lastReal *loadAcc) *table {
	var tbl *table
	for _, t := range rd.tables {
		if rd.probeTable(t) {
			continue
		}
		if lastReal == nil || t.seq > lastReal.seq {
			tbl = t
		}
	}
	return tbl
}
