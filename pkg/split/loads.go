package split

import (
	"fmt"
	"sort"
	"strings"
)

// loadAcc is one model load: its model buffer lines and the contexts
// created after it (docs/accounting.md rule 3).
type loadAcc struct {
	seq         uint64
	file        string
	role        string
	port        int
	marker      bool      // opened by a "loaded meta data" line
	models      []*Record // into the report's records (not copies: 160 bytes each)
	modelClosed bool
	ctxs        []*ctxAcc
	unknown     []BufferLine
	// mmproj/CLIP: the backend it runs on and its weights' size line.
	mmproj   bool
	clipDev  string
	clipSize *Record
	ended    string // why it is no longer live ("" while live)
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
}

func bufLine(r Record, row string) BufferLine {
	return BufferLine{Line: r.Seq, Func: r.Func, Name: r.Name, Kind: r.BufKind, MiB: MiB(r.MiB), Row: row}
}

// loadFigures sums a load's model buffers and its contexts' buffers.
// addModel counts a model buffer line in the row its device (r.Name)
// gives: remote devices in none, host memory apart, the rest in GTT.
func (g *figures) addModel(r Record) {
	switch {
	case IsRemoteBuffer(r.Name):
		// Nor does a load on remote devices only: 0 here, not unknown.
		g.remote = append(g.remote, bufLine(r, "remote"))
		g.haveModel = true
	case IsHostBuffer(r.Name):
		// A load with host buffers only put 0 MiB in GTT: 0, not unknown.
		g.host += r.MiB
		g.haveHost, g.haveModel = true, true
		g.lines = append(g.lines, bufLine(r, "model_host"))
	default:
		g.model += r.MiB
		g.haveModel = true
		g.lines = append(g.lines, bufLine(r, "model"))
	}
}

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
		if l.clipDev == "" {
			// No "CLIP using ... backend" line: where the weights
			// live is not known; listed, not counted.
			g.lines = append(g.lines, bufLine(r, "unknown"))
		} else {
			g.addModel(r)
		}
	}
	for _, x := range l.ctxs {
		g.haveCtx = true
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

func (c *computation) logRows(recs []*keyedRecord) {
	var (
		loads     []*loadAcc
		cur       = map[int]*loadAcc{} // per router port: the load being read
		owner     = map[int]*loadAcc{} // per port: the latest load with model lines
		pseudo    = map[int]*loadAcc{} // per port: buffer lines before any load
		pending   = map[int]string{}   // per port: the role of the next load
		spawned   = map[string]int{}   // router instance name -> port
		tables    []*table
		brackets  []bracket
		haveLoad  bool
		haveBuf   bool
		verbose   bool
		verbosity int64 = -1
		build     *Record
		legacy    bool
		echoes    []Record
		realloc   bool
	)
	newLoad := func(r Record, marker bool) *loadAcc {
		l := &loadAcc{seq: r.Seq, port: r.Port, marker: marker}
		if p := pending[r.Port]; p != "" {
			l.role = p
			delete(pending, r.Port)
		}
		loads = append(loads, l)
		cur[r.Port] = l
		return l
	}
	ctxOwner := func(port int) *loadAcc {
		if l := owner[port]; l != nil {
			return l
		}
		if pseudo[port] == nil {
			pseudo[port] = &loadAcc{port: port}
		}
		return pseudo[port]
	}
	ctxOf := func(port int) *ctxAcc {
		l := ctxOwner(port)
		if len(l.ctxs) == 0 {
			l.ctxs = append(l.ctxs, &ctxAcc{})
		}
		if cl := cur[port]; cl != nil {
			cl.modelClosed = true
		}
		return l.ctxs[len(l.ctxs)-1]
	}
	// mmprojOf returns the port's current mmproj load, or a new one.
	mmprojOf := func(r Record, fresh func(*loadAcc) bool) *loadAcc {
		if l := cur[r.Port]; l != nil && l.mmproj && fresh(l) {
			return l
		}
		l := newLoad(r, false)
		l.mmproj, l.role = true, "mmproj"
		return l
	}
	for i := range recs {
		r := recs[i].Record
		switch r.Kind {
		case KindLoad:
			haveLoad = true
			l := newLoad(r, true)
			l.file = r.Text
			if strings.HasPrefix(r.Func, "clip") {
				l.mmproj, l.role = true, "mmproj"
			}
		case KindRole:
			pending[r.Port] = r.Text
		case KindClip:
			switch r.Text {
			case "backend":
				// A fallback line after "CLIP using" corrects the device.
				l := mmprojOf(r, func(l *loadAcc) bool { return (l.clipDev == "" || r.Name == "CPU") && len(l.ctxs) == 0 })
				l.clipDev = r.Name
			case "size":
				// Old loaders print the weights twice ("model size:" and
				// "params backend buffer size"): the first one counts.
				l := mmprojOf(r, func(l *loadAcc) bool { return len(l.ctxs) == 0 })
				if l.clipSize == nil {
					rc := r
					l.clipSize = &rc
				}
			}
		case KindRouter:
			switch r.Text {
			case "spawn":
				spawned[r.Name] = int(r.Int)
			case "stop", "exit":
				p, ok := spawned[r.Name]
				if !ok {
					c.warn = append(c.warn, fmt.Sprintf("line %d: the router stopped instance %s, but the log does not say which port it had: its loads still count", r.Seq, r.Name))
					continue
				}
				for _, l := range loads {
					if l.port == p && l.ended == "" {
						l.ended = fmt.Sprintf("unloaded by the router (instance %s, line %d)", r.Name, r.Seq)
					}
				}
				delete(cur, p)
				delete(owner, p)
				delete(pseudo, p)
			}
		case KindFitBracket:
			// The port's latest bracket, and whether it is open.
			last := -1
			for j := len(brackets) - 1; j >= 0; j-- {
				if brackets[j].port == r.Port {
					last = j
					break
				}
			}
			open := last >= 0 && brackets[last].end == 0
			switch r.Text {
			case "start":
				// A second start inside an open bracket is the same fit.
				if !open {
					brackets = append(brackets, bracket{port: r.Port, start: r.Seq})
				}
				continue
			case "projected":
				// The fit's projection with no bracket open (a build or a
				// verbosity that prints no start line): the dry runs were
				// the lines since the last table before it, which is the
				// probe's. Without such a table there is nothing to set
				// apart (a -v probe is told by its 0.00 MiB load).
				if open {
					continue
				}
				from := uint64(0)
				if last >= 0 {
					from = brackets[last].end
				}
				if l := cur[r.Port]; l != nil && l.seq > from {
					from = l.seq
				}
				for j := len(tables) - 1; j >= 0; j-- {
					if t := tables[j]; t.port == r.Port && t.seq > from {
						brackets = append(brackets, bracket{port: r.Port, start: t.seq, end: r.Seq})
						break
					}
				}
				continue
			}
			for j := len(brackets) - 1; j >= 0; j-- {
				if brackets[j].port == r.Port && brackets[j].end == 0 {
					brackets[j].end = r.Seq
					break
				}
			}
		case KindContext:
			l := ctxOwner(r.Port)
			if cl := cur[r.Port]; cl != nil {
				cl.modelClosed = true
			}
			l.ctxs = append(l.ctxs, &ctxAcc{seq: r.Seq})
		case KindBuffer:
			haveBuf = true
			bl := bufLine(r, "")
			host := IsHostBuffer(r.Name)
			remote := IsRemoteBuffer(r.Name)
			switch kind := bufferRow(r); kind {
			case "model":
				l := cur[r.Port]
				if l == nil || l.modelClosed || l.mmproj {
					l = newLoad(r, false)
				}
				l.models = append(l.models, &recs[i].Record)
				owner[r.Port] = l
			case "kv", "rs", "state":
				// A context's caches are created before its compute
				// reservation: a cache line after a reservation is the
				// next context (the only sign of one before b4881, which
				// printed no "constructing llama_context").
				if l := ctxOwner(r.Port); len(l.ctxs) > 0 && l.ctxs[len(l.ctxs)-1].nReservations() > 0 {
					l.ctxs = append(l.ctxs, &ctxAcc{seq: r.Seq})
				}
				x := ctxOf(r.Port)
				switch {
				case remote:
					bl.Row = "remote"
				case host:
					x.hostKV += r.MiB
					bl.Row = "host"
				case kind == "kv":
					x.kv += r.MiB
					bl.Row = "state"
				case kind == "rs":
					x.rs += r.MiB
					bl.Row = "state"
				default:
					x.other += r.MiB
					bl.Row = "state"
					c.warn = append(c.warn, fmt.Sprintf("line %d: %s %s buffer (%.2f MiB) counted in KV + state as a cache kind outside the KV/RS rule (detail.other_state_mib)", r.Seq, r.Name, r.BufKind, r.MiB))
				}
				x.lines = append(x.lines, bl)
			case "compute":
				ctxOf(r.Port).compute(r)
			case "output":
				x := ctxOf(r.Port)
				switch {
				case remote:
					bl.Row = "remote"
				case host:
					x.hostOutput += r.MiB
					bl.Row = "host"
				default:
					x.output += r.MiB
					bl.Row = "compute"
				}
				x.lines = append(x.lines, bl)
			case "mmproj":
				// The mmproj/CLIP compute buffers (alloc_compute_meta).
				l := mmprojOf(r, func(*loadAcc) bool { return true })
				if len(l.ctxs) == 0 {
					l.ctxs = append(l.ctxs, &ctxAcc{seq: r.Seq})
				}
				l.ctxs[0].compute(r)
			default: // a kind gttsplit does not know
				bl.Row = kind
				l := ctxOwner(r.Port)
				l.unknown = append(l.unknown, bl)
			}
		case KindEcho:
			echoes = append(echoes, r)
			if r.Match {
				// The "matches expectation" form is printed at the debug
				// level only: a -v line.
				verbose = true
			}
		case KindBreakdownHead:
			tables = append(tables, &table{seq: r.Seq, next: r.Seq + 1, port: r.Port})
		case KindBreakdownRow:
			// A row belongs to the table whose header or last row is
			// the line just before it; a stray row is ignored.
			if n := len(tables); n > 0 && tables[n-1].next == r.Seq {
				tables[n-1].rows = append(tables[n-1].rows, r)
				tables[n-1].next++
			}
		case KindBuild:
			if build == nil {
				build = &recs[i].Record
			}
		case KindVerbosity:
			if verbosity < 0 {
				verbosity = r.Int // the first statement
			}
		case KindDebugMarker:
			verbose = true
		case KindLegacy:
			legacy = true
		case KindOutputRealloc:
			realloc = true
			c.warn = append(c.warn, fmt.Sprintf("line %d: the output buffer was reallocated from %.2f to %.2f MiB after the reservation", r.Seq, r.Expect, r.MiB))
		}
	}

	d := &c.r.Detail
	d.LinesRead = c.linesRead
	d.LinesSkipped = c.st.Malformed
	if d.LinesSkipped > 0 {
		c.flag(FlagLinesSkipped)
	}
	if legacy {
		c.flag(FlagLegacyFormat)
	}
	if build != nil {
		c.r.Provenance.LlamaBuild = build.Text
		// The format is judged by the lines: a fork's own counter below
		// 3761 says nothing when its buffer lines parse.
		if build.Int > 0 && build.Int < 3761 && !haveBuf {
			c.flag(FlagPreB3761)
		}
	}
	if verbosity >= 5 || c.st.DebugSeq != 0 {
		verbose = true
	}
	if !verbose {
		c.flag(FlagNotVerbose)
	}
	if realloc {
		c.flag(FlagOutputRealloc)
	}

	// A later real load of the same file in the same process replaces the
	// earlier one (a reload).
	for i, l := range loads {
		if !l.real() || l.file == "" || l.ended != "" {
			continue
		}
		for _, m := range loads[i+1:] {
			if m.real() && m.file == l.file && m.port == l.port && m.mmproj == l.mmproj {
				l.ended = fmt.Sprintf("replaced by the reload of the same file at line %d", m.seq)
				break
			}
		}
	}

	// A capped fold may have dropped the first load's marker: a load with
	// no marker that opens its process's kept lines cannot be told from an
	// earlier load of a file reloaded later, so it is not counted.
	if c.st.droppedRecords() > 0 {
		first := map[int]bool{}
		for _, l := range loads {
			if !first[l.port] && !l.marker && !l.mmproj && l.ended == "" {
				l.ended = "its load line was dropped by the fold's cap (state_capped): which load it is is not known"
			}
			first[l.port] = true
		}
	}

	// A role announced before a probe of the model (llama-server sizes a
	// draft with a dry-run load first, b9180+) is the role of the real
	// load of the same file that follows it.
	for i, l := range loads {
		if l.role == "" || !l.probe() {
			continue
		}
		for _, m := range loads[i+1:] {
			if m.port != l.port || m.file != l.file || m.mmproj || m.probe() {
				continue
			}
			if m.real() && m.role == "" {
				m.role = l.role
			}
			break
		}
	}

	// Probes, real loads, and the live ones.
	var (
		sum       figures
		live      []*loadAcc
		lastReal  *loadAcc
		mainSeen  = map[int]bool{}
		liveLlama int
		ended     int
	)
	for _, l := range loads {
		switch {
		case l.probe():
			d.ProbeLoads++
			continue
		case !l.real():
			continue
		}
		d.ModelLoads++
		lastReal = l
		if l.role == "" {
			l.role = "model"
			if !mainSeen[l.port] {
				l.role = "main"
			}
		}
		if !l.mmproj {
			mainSeen[l.port] = true
		}
		g := loadFigures(l)
		ml := ModelLoad{Role: l.role, File: l.file, Line: l.seq, RouterPort: l.port, Live: l.ended == "", Ended: l.ended, Contexts: g.ctxs}
		if g.haveModel {
			ml.ModelGTTMiB = mib(g.model)
		}
		if g.haveHost {
			ml.ModelHostMiB = mib(g.host)
		}
		if g.haveCtx {
			ml.StateMiB = mib(g.kv + g.rs + g.other)
			ml.ComputeMiB = mib(g.comp + g.output)
		}
		c.r.Models = append(c.r.Models, ml)
		if l.ended != "" {
			ended++
			if ended <= 3 {
				c.warn = append(c.warn, fmt.Sprintf("line %d: the %s load of %s is not counted: %s", l.seq, l.role, orUnknown(l.file), l.ended))
			}
			continue
		}
		live = append(live, l)
		sum.add(g)
		if !l.mmproj {
			liveLlama++
			switch {
			case g.ctxs > 1:
				c.flag(FlagMultipleContexts)
			case g.ctxs == 0:
				c.flag(FlagNoContext)
			}
		} else {
			c.flag(FlagMmproj)
		}
	}
	if ended > 3 {
		c.warn = append(c.warn, fmt.Sprintf("%d more loads are not counted (see models)", ended-3))
	}
	if c.r.Models == nil {
		c.r.Models = []ModelLoad{}
	}
	ports := make([]int, 0, len(pseudo))
	for p := range pseudo {
		ports = append(ports, p)
	}
	sort.Ints(ports)
	for _, p := range ports {
		sum.add(loadFigures(pseudo[p]))
	}
	if !haveLoad && d.ModelLoads == 0 && d.ProbeLoads == 0 {
		c.flag(FlagNotModelLoad)
	}
	if len(live) > 1 {
		c.flag(FlagMultipleModels)
	}
	if sum.haveModel {
		v := sum.model
		c.model = &v
		c.r.ModelGTTMiB = mib(v)
	}
	if sum.haveHost {
		c.r.ModelHostMiB = mib(sum.host)
	}
	if !sum.haveModel {
		// Say why the model row is null when the log has load markers.
		for _, l := range loads {
			if l.marker && !l.mmproj && len(l.models) == 0 {
				why := "the load printed no model buffer line (it failed, or it was a vocabulary-only load)"
				if !verbose {
					why = "the log is not verbose: llama.cpp from b9151 prints buffer lines only with -v (or -lv 4), and a failed load prints none"
				}
				c.warn = append(c.warn, fmt.Sprintf("line %d: a model load of %s has no model buffer line, so the model row is unknown: %s", l.seq, orUnknown(l.file), why))
				break
			}
		}
	}
	d.LiveContexts = sum.ctxs
	d.Reservations = sum.reservations
	d.HostKVMiB = MiB(sum.hostKV)
	d.Buffers = sum.lines
	if sum.haveCtx {
		d.HostComputeMiB = MiB(sum.hostComp)
		d.KVMiB, d.RSMiB, d.ComputeOnlyMiB, d.OutputMiB = mib(sum.kv), mib(sum.rs), mib(sum.comp), mib(sum.output)
		if sum.other != 0 {
			d.OtherStateMiB = mib(sum.other)
		}
		s, co := sum.kv+sum.rs+sum.other, sum.comp+sum.output
		c.stateMiB, c.compute = &s, &co
		c.r.StateMiB, c.r.ComputeMiB = mib(s), mib(co)
	}
	sort.SliceStable(d.Buffers, func(i, j int) bool { return d.Buffers[i].Line < d.Buffers[j].Line })
	d.Remote = sum.remote
	sort.SliceStable(d.Remote, func(i, j int) bool { return d.Remote[i].Line < d.Remote[j].Line })
	if len(d.Remote) > 0 {
		c.flag(FlagRemoteBuffers)
	}

	for _, l := range loads {
		if !l.probe() {
			d.Unknown = append(d.Unknown, l.unknown...)
		}
	}
	for _, p := range ports {
		d.Unknown = append(d.Unknown, pseudo[p].unknown...)
	}
	sort.Slice(d.Unknown, func(i, j int) bool { return d.Unknown[i].Line < d.Unknown[j].Line })
	if len(d.Unknown) > 0 {
		c.flag(FlagUnknownBuffer)
	}
	if d.ProbeLoads > 0 {
		c.flag(FlagFitProbe)
	}

	// Echoes are never added; a mismatch is a warning and a check.
	var mismatch []string
	for _, e := range echoes {
		if !e.Match {
			mismatch = append(mismatch, fmt.Sprintf("%s %.2f MiB at teardown, expected %.2f MiB (line %d)", e.Name, e.MiB, e.Expect, e.Seq))
		}
	}
	if len(mismatch) > 0 {
		c.flag(FlagComputeMismatch)
		c.r.Checks = append(c.r.Checks, Check{Name: "compute_echo", Status: StatusWarn,
			Detail: "llama.cpp says a compute buffer does not match its reservation: " + strings.Join(mismatch, "; ")})
	}

	c.traceRows()

	// llama.cpp's own memory breakdown: the last table after the last real
	// load that is not a probe's (inside a --fit bracket, or after a probe
	// load and before the next real one). A bracket with a table and no
	// probe load in it is a probe the log shows without -v.
	probeTable := func(t *table) bool {
		for _, b := range brackets {
			if b.holds(t.port, t.seq) {
				return true
			}
		}
		var before *loadAcc
		for _, l := range loads {
			if l.port == t.port && l.seq < t.seq && !l.mmproj {
				before = l
			}
		}
		return before != nil && before.probe()
	}
	for _, b := range brackets {
		hasProbe, hasTable := false, false
		for _, l := range loads {
			if l.probe() && b.holds(l.port, l.seq) {
				hasProbe = true
			}
		}
		for _, t := range tables {
			if b.holds(t.port, t.seq) {
				hasTable = true
			}
		}
		if hasTable && !hasProbe {
			d.ProbeLoads++
			c.flag(FlagFitProbe)
		}
	}
	var tbl *table
	for _, t := range tables {
		if probeTable(t) {
			continue
		}
		if lastReal == nil || t.seq > lastReal.seq {
			tbl = t
		}
	}
	var mainFig *figures
	if len(live) > 1 {
		// Several live models (a draft, an mmproj): the table speaks of
		// one llama context, the main model's.
		for _, l := range live {
			if !l.mmproj {
				g := loadFigures(l)
				mainFig = &g
				break
			}
		}
	}
	c.breakdownChecks(tbl, mainFig)
}

func orUnknown(s string) string {
	if s == "" {
		return "an unnamed file"
	}
	return s
}

// traceRows folds the host-weight trace into the packed row.
func (c *computation) traceRows() {
	d := &c.r.Detail
	tr := &c.st.Trace
	d.PackedTraceLines = tr.N
	if tr.Max == nil {
		c.flag(FlagNoTrace)
	} else {
		v := tr.Max.MiB
		c.packed = &v
		c.r.PackedMiB = mib(v)
		n, _ := tr.names()
		c.r.PackedWeights = &n
		d.PackedPeakSeq = tr.Max.Seq
		d.PackedLastMiB = mib(tr.Last.MiB)
	}
	if w := c.st.capWarnings(); len(w) > 0 {
		c.flag(FlagStateCapped)
		c.warn = append(c.warn, w...)
	}
}
