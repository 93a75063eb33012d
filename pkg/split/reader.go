package split

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// logReader reads a run's kept records in log order and sorts them into
// model loads and their contexts, --fit brackets, memory-breakdown tables,
// teardown echoes and the format's markers (build, verbosity, -v lines).
// Its loop, read, classifies a record by kind and hands it to one method
// (recordReaders); each method knows one record kind and nothing of the
// others. What the records mean together (which loads are live, the rows)
// is settled once they are all read (rows.go).
type logReader struct {
	loads   []*loadAcc
	cur     map[int]*loadAcc // per router port: the load being read
	owner   map[int]*loadAcc // per port: the latest load with model lines
	pseudo  map[int]*loadAcc // per port: buffer lines before any load
	pending map[int]string   // per port: the role of the next load
	spawned map[string]int   // router instance name -> port
	// devs holds per port the devices named for its next load; devInfo
	// the latest "using device" line of each device name (its description
	// and PCI address).
	devs    map[int][]string
	devInfo map[string]*llamalog.Record

	tables   []*table
	brackets []bracket
	echoes   []llamalog.Record
	// failures are the lines that said something failed, in log order.
	failures []*llamalog.Record

	haveLoad  bool             // a load marker was read
	haveBuf   bool             // a buffer line was read
	verbose   bool             // a line only -v prints was read
	verbosity int64            // the first "verbosity = N" (-1: none)
	build     *llamalog.Record // the first build line
	legacy    bool             // a pre-b1843 totals line was read
	realloc   bool             // the output buffer was reallocated

	// warn holds the warnings of single records, in log order.
	warn []string
}

func newLogReader() *logReader {
	return &logReader{
		cur:       map[int]*loadAcc{},
		owner:     map[int]*loadAcc{},
		pseudo:    map[int]*loadAcc{},
		pending:   map[int]string{},
		spawned:   map[string]int{},
		devs:      map[int][]string{},
		devInfo:   map[string]*llamalog.Record{},
		verbosity: -1,
	}
}

// recordReaders is the grammar of the kept records: the method that reads
// each kind. Trace, malformed and summary lines never reach the reader
// (the fold folds, counts or drops them as they come).
var recordReaders = [...]func(*logReader, *llamalog.Record){
	llamalog.KindLoad:          (*logReader).load,
	llamalog.KindRole:          (*logReader).role,
	llamalog.KindClip:          (*logReader).clip,
	llamalog.KindRouter:        (*logReader).router,
	llamalog.KindFitBracket:    (*logReader).fitBracket,
	llamalog.KindContext:       (*logReader).context,
	llamalog.KindBuffer:        (*logReader).buffer,
	llamalog.KindEcho:          (*logReader).echo,
	llamalog.KindBreakdownHead: (*logReader).tableHead,
	llamalog.KindBreakdownRow:  (*logReader).tableRow,
	llamalog.KindBuild:         (*logReader).buildLine,
	llamalog.KindVerbosity:     (*logReader).verbosityLine,
	llamalog.KindDebugMarker:   (*logReader).debugMarker,
	llamalog.KindLegacy:        (*logReader).legacyLine,
	llamalog.KindOutputRealloc: (*logReader).outputRealloc,
	llamalog.KindDevice:        (*logReader).device,
	llamalog.KindReserve:       (*logReader).reserve,
	llamalog.KindFailure:       (*logReader).failure,
}

// read reads one record. r points into the fold's state: it is kept (a
// model buffer line, the build line) but never changed.
func (rd *logReader) read(r *llamalog.Record) {
	if int(r.Kind) < len(recordReaders) {
		if f := recordReaders[r.Kind]; f != nil {
			f(rd, r)
		}
	}
}

// newLoad opens a load at r on r's port; it takes the role announced for
// the port's next load.
func (rd *logReader) newLoad(r *llamalog.Record, marker bool) *loadAcc {
	l := &loadAcc{seq: r.Seq, port: r.Port, marker: marker}
	if p := rd.pending[r.Port]; p != "" {
		l.role = p
		delete(rd.pending, r.Port)
	}
	rd.loads = append(rd.loads, l)
	rd.cur[r.Port] = l
	return l
}

// ctxOwner is the load a port's contexts belong to: the latest load with
// model lines, else the port's pseudo load (buffer lines before any load).
func (rd *logReader) ctxOwner(port int) *loadAcc {
	if l := rd.owner[port]; l != nil {
		return l
	}
	if rd.pseudo[port] == nil {
		rd.pseudo[port] = &loadAcc{port: port}
	}
	return rd.pseudo[port]
}

// ctxOf is the current context of r's port (r opens one when there is
// none, or when the last one failed: a context whose creation failed gets
// no more lines); a context's line closes the current load's model lines.
func (rd *logReader) ctxOf(r *llamalog.Record) *ctxAcc {
	l := rd.ctxOwner(r.Port)
	if len(l.ctxs) == 0 || l.ctxs[len(l.ctxs)-1].failed != nil {
		l.ctxs = append(l.ctxs, &ctxAcc{seq: r.Seq})
	}
	if cl := rd.cur[r.Port]; cl != nil {
		cl.modelClosed = true
	}
	return l.ctxs[len(l.ctxs)-1]
}

// mmprojOf returns the port's current mmproj load if fresh says it can
// take r, or a new one.
func (rd *logReader) mmprojOf(r *llamalog.Record, fresh func(*loadAcc) bool) *loadAcc {
	if l := rd.cur[r.Port]; l != nil && l.mmproj && fresh(l) {
		return l
	}
	l := rd.newLoad(r, false)
	l.mmproj, l.role = true, "mmproj"
	return l
}

// load reads "loaded meta data with N key-value pairs ... from FILE": a
// new load of FILE (an mmproj when a clip loader prints it).
func (rd *logReader) load(r *llamalog.Record) {
	rd.haveLoad = true
	l := rd.newLoad(r, true)
	rd.takeDevices(l)
	l.file = r.Text
	if strings.HasPrefix(r.Func, "clip") {
		l.mmproj, l.role = true, "mmproj"
	}
}

// role reads "loading draft model '<file>'": the role of the port's next
// load.
func (rd *logReader) role(r *llamalog.Record) { rd.pending[r.Port] = r.Text }

// clip reads the mmproj/CLIP lines: the backend the projector runs on
// ("CLIP using <dev> backend", or the fallback to the CPU) and its
// weights' size ("model size: N MiB").
func (rd *logReader) clip(r *llamalog.Record) {
	switch r.Text {
	case "backend":
		// A fallback line after "CLIP using" corrects the device.
		l := rd.mmprojOf(r, func(l *loadAcc) bool { return (l.clipDev == "" || r.Name == "CPU") && len(l.ctxs) == 0 })
		l.clipDev = r.Name
	case "size":
		// Old loaders print the weights twice ("model size:" and "params
		// backend buffer size"): the first one counts.
		l := rd.mmprojOf(r, func(l *loadAcc) bool { return len(l.ctxs) == 0 })
		if l.clipSize == nil {
			rc := *r
			l.clipSize = &rc
		}
	}
}

// router reads the llama-server router's lines: a child spawned on a port,
// and a child stopped or exited, which ends the loads of its port.
func (rd *logReader) router(r *llamalog.Record) {
	switch r.Text {
	case "spawn":
		rd.spawned[r.Name] = int(r.Int)
	case "stop", "exit":
		p, ok := rd.spawned[r.Name]
		if !ok {
			rd.warn = append(rd.warn, fmt.Sprintf("line %d: the router stopped instance %s, but the log does not say which port it had: its loads still count", r.Seq, r.Name))
			return
		}
		for _, l := range rd.loads {
			if l.port == p && l.ended == "" {
				l.ended = fmt.Sprintf("unloaded by the router (instance %s, line %d)", r.Name, r.Seq)
			}
		}
		delete(rd.cur, p)
		delete(rd.owner, p)
		delete(rd.pseudo, p)
	}
}

// fitBracket reads the lines around a --fit probe: its start, its end (or
// the warm-up after it), and the fit's projection.
func (rd *logReader) fitBracket(r *llamalog.Record) {
	switch r.Text {
	case "start":
		rd.fitStart(r)
	case "projected":
		rd.fitProjected(r)
	default:
		rd.fitEnd(r)
	}
}

// lastBracket is the index of the port's latest bracket (-1: none).
func (rd *logReader) lastBracket(port int) int {
	for j := len(rd.brackets) - 1; j >= 0; j-- {
		if rd.brackets[j].port == port {
			return j
		}
	}
	return -1
}

// fitStart opens a bracket; a second start inside an open bracket is the
// same fit.
func (rd *logReader) fitStart(r *llamalog.Record) {
	if last := rd.lastBracket(r.Port); last >= 0 && rd.brackets[last].end == 0 {
		return
	}
	rd.brackets = append(rd.brackets, bracket{port: r.Port, start: r.Seq})
}

// fitProjected reads the fit's projection with no bracket open (a build or
// a verbosity that prints no start line): the dry runs were the lines
// since the last table before it, which is the probe's. Without such a
// table there is nothing to set apart (a -v probe is told by its 0.00 MiB
// load).
func (rd *logReader) fitProjected(r *llamalog.Record) {
	last := rd.lastBracket(r.Port)
	if last >= 0 && rd.brackets[last].end == 0 {
		return
	}
	from := uint64(0)
	if last >= 0 {
		from = rd.brackets[last].end
	}
	if l := rd.cur[r.Port]; l != nil && l.seq > from {
		from = l.seq
	}
	for j := len(rd.tables) - 1; j >= 0; j-- {
		if t := rd.tables[j]; t.port == r.Port && t.seq > from {
			rd.brackets = append(rd.brackets, bracket{port: r.Port, start: t.seq, end: r.Seq})
			return
		}
	}
}

// fitEnd closes the port's open bracket.
func (rd *logReader) fitEnd(r *llamalog.Record) {
	for j := len(rd.brackets) - 1; j >= 0; j-- {
		if rd.brackets[j].port == r.Port && rd.brackets[j].end == 0 {
			rd.brackets[j].end = r.Seq
			return
		}
	}
}

// device reads "using device <dev> (<description>) (<pci>) - N MiB free",
// which llama.cpp prints for each device of a load before the load's
// "loaded meta data" line: a device of the port's next load, or of the
// current one when its marker came first and it has no model line yet.
func (rd *logReader) device(r *llamalog.Record) {
	rd.devInfo[r.Name] = r
	if l := rd.cur[r.Port]; l != nil && l.marker && len(l.models) == 0 && !l.modelClosed && !l.mmproj {
		if !slices.Contains(l.devices, r.Name) {
			l.devices = append(l.devices, r.Name)
		}
		return
	}
	if !slices.Contains(rd.devs[r.Port], r.Name) {
		rd.devs[r.Port] = append(rd.devs[r.Port], r.Name)
	}
}

// takeDevices gives the devices named for the port's next load to l.
func (rd *logReader) takeDevices(l *loadAcc) {
	if d := rd.devs[l.port]; d != nil {
		l.devices = d
		delete(rd.devs, l.port)
	}
}

// context reads "constructing llama_context": a new context of the port's
// load, which closes the load's model lines.
func (rd *logReader) context(r *llamalog.Record) {
	l := rd.ctxOwner(r.Port)
	if cl := rd.cur[r.Port]; cl != nil {
		cl.modelClosed = true
	}
	l.ctxs = append(l.ctxs, &ctxAcc{seq: r.Seq})
}

// buffer reads a "<name> <kind> buffer size = N MiB" line by the row its
// kind goes to.
func (rd *logReader) buffer(r *llamalog.Record) {
	rd.haveBuf = true
	switch kind := bufferRow(*r); kind {
	case "model":
		rd.modelBuffer(r)
	case "kv", "rs", "state":
		rd.cacheBuffer(r, kind)
	case "compute":
		rd.ctxOf(r).compute(*r)
	case "output":
		rd.outputBuffer(r)
	case "mmproj":
		rd.mmprojCompute(r)
	default:
		rd.unknownBuffer(r, kind)
	}
}

// modelBuffer reads a model buffer line: one of the current load's, or
// the first of a new load (after the current one's contexts, or where the
// log prints no load marker).
func (rd *logReader) modelBuffer(r *llamalog.Record) {
	l := rd.cur[r.Port]
	if l == nil || l.modelClosed || l.mmproj {
		l = rd.newLoad(r, false)
		rd.takeDevices(l)
	}
	l.models = append(l.models, r)
	rd.owner[r.Port] = l
}

// cacheBuffer reads a KV, recurrent-state or other state buffer line of
// the port's current context. A context's caches are created before its
// compute reservation: a cache line after a reservation is the next
// context (the only sign of one before b4881, which printed no
// "constructing llama_context").
func (rd *logReader) cacheBuffer(r *llamalog.Record, kind string) {
	if l := rd.ctxOwner(r.Port); len(l.ctxs) > 0 && l.ctxs[len(l.ctxs)-1].nReservations() > 0 {
		l.ctxs = append(l.ctxs, &ctxAcc{seq: r.Seq})
	}
	// (after a context that failed, ctxOf opens the next)
	x := rd.ctxOf(r)
	bl := bufLine(*r, offGTT(r, &x.hostKV))
	if bl.Row == "" {
		bl.Row = "state"
		switch kind {
		case "kv":
			x.kv += r.MiB
		case "rs":
			x.rs += r.MiB
		default:
			x.other += r.MiB
			rd.warn = append(rd.warn, fmt.Sprintf("line %d: %s %s buffer (%.2f MiB) counted in KV + state as a cache kind outside the KV/RS rule (detail.other_state_mib)", r.Seq, r.Name, r.BufKind, r.MiB))
		}
	}
	x.lines = append(x.lines, bl)
}

// outputBuffer reads an output (or input) buffer line of the port's
// current context.
func (rd *logReader) outputBuffer(r *llamalog.Record) {
	x := rd.ctxOf(r)
	bl := bufLine(*r, offGTT(r, &x.hostOutput))
	if bl.Row == "" {
		x.output += r.MiB
		bl.Row = "compute"
	}
	x.lines = append(x.lines, bl)
}

// offGTT is the row of a context's buffer line that is not this host's
// GTT: "remote" for a remote device's (in no row), "host" for host
// memory's (added to *host); "" for GTT.
func offGTT(r *llamalog.Record, host *float64) string {
	switch {
	case IsRemoteBuffer(r.Name):
		return "remote"
	case IsHostBuffer(r.Name):
		*host += r.MiB
		return "host"
	}
	return ""
}

// mmprojCompute reads a compute buffer line of the mmproj/CLIP model
// (alloc_compute_meta).
func (rd *logReader) mmprojCompute(r *llamalog.Record) {
	l := rd.mmprojOf(r, func(*loadAcc) bool { return true })
	if len(l.ctxs) == 0 {
		l.ctxs = append(l.ctxs, &ctxAcc{seq: r.Seq})
	}
	l.ctxs[0].compute(*r)
}

// unknownBuffer keeps a buffer line of a kind gttsplit does not know with
// the port's load: listed, in no row.
func (rd *logReader) unknownBuffer(r *llamalog.Record, kind string) {
	bl := bufLine(*r, kind)
	l := rd.ctxOwner(r.Port)
	l.unknown = append(l.unknown, bl)
}

// reserve reads "sched_reserve: reserving ...": a compute reservation of
// the port's current context starts (b7746+).
func (rd *logReader) reserve(r *llamalog.Record) { rd.ctxOf(r).reserve() }

// failure reads a line that says something failed. A context whose
// creation failed (llama_init_from_model: failed to initialize the
// context, failed to create context, and before b4881 the constructor's
// failed to allocate compute buffers) is the port's context under
// construction: the latest one, if it has printed no compute line (its
// compute lines are the last it prints, once every allocation held); one
// that printed no line at all has nothing to set apart. An mmproj whose
// load failed (Failed to load CLIP model, failed to load multimodal
// model), or whose weights' allocation failed while it loaded them (a
// buffer of tensors not allocated after its weight size and before its
// compute buffers), is the port's current mmproj load. A compute
// reservation that failed printed no compute line: it says nothing more.
func (rd *logReader) failure(r *llamalog.Record) {
	rd.failures = append(rd.failures, r)
	switch r.BufKind {
	case "context":
		l := rd.ctxOwner(r.Port)
		if n := len(l.ctxs); n > 0 && l.ctxs[n-1].failed == nil && l.ctxs[n-1].nReservations() == 0 {
			l.ctxs[n-1].failed = r
		}
	case "mmproj", "tensors":
		l := rd.cur[r.Port]
		if l == nil || !l.mmproj || l.failed != nil || r.BufKind == "tensors" && (l.clipSize == nil || len(l.ctxs) > 0) {
			return
		}
		l.failed = r
	}
}

// echo reads a teardown echo of a compute buffer; its "matches
// expectation" form is printed at the debug level only: a -v line.
func (rd *logReader) echo(r *llamalog.Record) {
	rd.echoes = append(rd.echoes, *r)
	if r.Match {
		rd.verbose = true
	}
}

// tableHead opens a memory-breakdown table.
func (rd *logReader) tableHead(r *llamalog.Record) {
	rd.tables = append(rd.tables, &table{seq: r.Seq, next: r.Seq + 1, port: r.Port})
}

// tableRow reads a row of a memory-breakdown table: it belongs to the
// table whose header or last row is the line just before it; a stray row
// is ignored.
func (rd *logReader) tableRow(r *llamalog.Record) {
	if n := len(rd.tables); n > 0 && rd.tables[n-1].next == r.Seq {
		rd.tables[n-1].rows = append(rd.tables[n-1].rows, *r)
		rd.tables[n-1].next++
	}
}

// buildLine keeps the first build line.
func (rd *logReader) buildLine(r *llamalog.Record) {
	if rd.build == nil {
		rd.build = r
	}
}

// verbosityLine keeps the first "verbosity = N".
func (rd *logReader) verbosityLine(r *llamalog.Record) {
	if rd.verbosity < 0 {
		rd.verbosity = r.Int
	}
}

// debugMarker reads a line only -v prints.
func (rd *logReader) debugMarker(*llamalog.Record) { rd.verbose = true }

// legacyLine reads a pre-b1843 totals line.
func (rd *logReader) legacyLine(*llamalog.Record) { rd.legacy = true }

// outputRealloc reads "output_reserve: reallocating output buffer": a
// warning, never added.
func (rd *logReader) outputRealloc(r *llamalog.Record) {
	rd.realloc = true
	rd.warn = append(rd.warn, fmt.Sprintf("line %d: the output buffer was reallocated from %.2f to %.2f MiB after the reservation", r.Seq, r.Expect, r.MiB))
}
