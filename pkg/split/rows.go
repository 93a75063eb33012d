package split

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// logRows reads the kept records (by position) and fills the report's
// log-derived part: the model, KV + state, compute and packed rows, the
// models list, the detail's buffers, the format's flags, the warnings of
// the lines, and the checks against the teardown echoes and llama.cpp's
// memory breakdown (docs/accounting.md rules 2 to 7, 11, 12 and 15).
func (c *computation) logRows(recs []*keyedRecord) {
	fr := c.st.frontier()
	rd := newLogReader()
	for _, kr := range recs {
		if !fr.orphan(kr) {
			rd.read(&kr.Record)
		}
	}
	rd.markLost(&fr)
	c.warn = append(c.warn, rd.warn...)
	c.formatFlags(rd)

	// Which loads are live (rule 3).
	rd.endFailed()
	rd.endReloaded()
	if fr[2].dropped {
		// The cap dropped model-load lines: the first kept load of a
		// process may have lost its marker, and lines before a port's
		// first kept load belong to a load that is gone.
		rd.endUnmarkedFirst()
		clear(rd.pseudo)
	}
	rd.passProbeRoles()

	sum, live, lastReal := c.modelLoads(rd)
	ports := rd.pseudoPorts()
	for _, p := range ports {
		sum.add(loadFigures(rd.pseudo[p]))
	}
	c.modelRows(rd, sum, len(live))
	c.contextRows(sum)
	c.failureRows(rd, sum)
	c.deviceRows(rd, live)
	c.unknownRows(rd, ports)
	c.echoCheck(rd.echoes)
	c.traceRows()

	// llama.cpp's own memory breakdown (rule 11).
	if n := rd.tableProbes(); n > 0 {
		c.r.Detail.ProbeLoads += n
		c.flag(FlagFitProbe)
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
	c.breakdownChecks(rd.lastTable(lastReal), mainFig)
}

// formatFlags says what the log's format limits (rule 12): lines skipped,
// the legacy totals, the build, whether it is verbose, a reallocated
// output buffer.
func (c *computation) formatFlags(rd *logReader) {
	d := &c.r.Detail
	d.LinesRead = c.linesRead
	d.LinesSkipped = c.st.Malformed
	if d.LinesSkipped > 0 {
		c.flag(FlagLinesSkipped)
	}
	if rd.legacy {
		c.flag(FlagLegacyFormat)
	}
	if b := rd.build; b != nil {
		c.r.Provenance.LlamaBuild = b.Text
		// The format is judged by the lines: a fork's own counter below
		// 3761 says nothing when its buffer lines parse.
		if b.Int > 0 && b.Int < 3761 && !rd.haveBuf {
			c.flag(FlagPreB3761)
		}
	}
	if rd.verbosity >= 5 || c.st.DebugSeq != 0 {
		rd.verbose = true
	}
	if !rd.verbose {
		c.flag(FlagNotVerbose)
	}
	if rd.realloc {
		c.flag(FlagOutputRealloc)
	}
}

// modelLoads lists the real loads in the report's models, counts the
// probes, and sums the live loads: their figures, the live loads, and the
// last real load (nil: none).
func (c *computation) modelLoads(rd *logReader) (sum figures, live []*loadAcc, lastReal *loadAcc) {
	d := &c.r.Detail
	mainSeen := map[int]bool{}
	ended := 0
	for _, l := range rd.loads {
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
		c.r.Models = append(c.r.Models, modelLoad(l, g))
		if l.ended != "" {
			ended++
			if ended <= 3 {
				c.warn = append(c.warn, fmt.Sprintf("line %d: the %s load of %s is not counted: %s", l.seq, l.role, orUnknown(l.file), l.ended))
			}
			// A failed projector's buffers are listed apart all the same.
			sum.failed = append(sum.failed, g.failed...)
			continue
		}
		live = append(live, l)
		sum.add(g)
		c.liveLoadFlags(l, g)
		c.lostWarnings(l, g)
	}
	if ended > 3 {
		c.warn = append(c.warn, fmt.Sprintf("%d more loads are not counted (see models)", ended-3))
	}
	if c.r.Models == nil {
		c.r.Models = []ModelLoad{}
	}
	if d.ProbeLoads > 0 {
		c.flag(FlagFitProbe)
	}
	return sum, live, lastReal
}

// modelLoad is a real load's entry in the report's models.
func modelLoad(l *loadAcc, g figures) ModelLoad {
	ml := ModelLoad{Role: l.role, File: l.file, Line: l.seq, RouterPort: l.port, Live: l.ended == "", Ended: l.ended, Contexts: g.ctxs}
	if g.haveModel {
		ml.ModelGTTMiB = mib(g.model)
	}
	if g.haveHost || g.haveModel {
		ml.ModelHostMiB = mib(g.host)
	}
	if g.haveCtx && !g.buffersLost {
		ml.StateMiB = mib(g.kv + g.rs + g.other)
	}
	if g.haveCtx && !g.buffersLost && !g.reservationLost {
		ml.ComputeMiB = mib(g.comp + g.output)
	}
	return ml
}

// lostWarnings says which rows of a live load are unknown because the
// fold's cap dropped some of its lines.
func (c *computation) lostWarnings(l *loadAcc, g figures) {
	for _, row := range []struct {
		lost bool
		name string
	}{{g.buffersLost, "KV + state"}, {g.buffersLost || g.reservationLost, "compute + output"}} {
		if row.lost {
			c.warn = append(c.warn, fmt.Sprintf("line %d: %s is unknown for the %s load of %s, not 0: the fold's cap (state_capped) dropped some of its buffer lines", l.seq, row.name, l.role, orUnknown(l.file)))
		}
	}
}

// liveLoadFlags flags what a live load is: an mmproj, or a llama model
// with several contexts or none (not when one failed: that is said).
func (c *computation) liveLoadFlags(l *loadAcc, g figures) {
	switch {
	case l.mmproj:
		c.flag(FlagMmproj)
	case g.ctxs > 1:
		c.flag(FlagMultipleContexts)
	case g.ctxs == 0 && !slices.ContainsFunc(l.ctxs, func(x *ctxAcc) bool { return x.failed != nil }):
		c.flag(FlagNoContext)
	}
}

// failureRows says what failed (rule 6): each context whose creation
// failed and each projector whose load failed, quoting the line that
// said so, with the buffers they had printed (listed apart in the
// detail's failed_buffers, in no row: freed with them; a sample taken
// before the failure may still hold them); and a context that failed
// before it printed a buffer line.
func (c *computation) failureRows(rd *logReader, sum figures) {
	d := &c.r.Detail
	d.Failed = sum.failed
	sort.SliceStable(d.Failed, func(i, j int) bool { return d.Failed[i].Line < d.Failed[j].Line })
	said := map[*llamalog.Record]bool{}
	words := func(lines []BufferLine) string {
		var parts []string
		total := 0.0
		for _, bl := range lines {
			name := bl.Name
			if name == "" {
				name = "(device not named)"
			}
			parts = append(parts, fmt.Sprintf("%s %s %.2f MiB", name, bl.Kind, float64(bl.MiB)))
			total += float64(bl.MiB)
		}
		return fmt.Sprintf("%s; %.2f MiB in all", strings.Join(parts, ", "), total)
	}
	loads := slices.Clone(rd.loads)
	for _, p := range rd.pseudoPorts() {
		loads = append(loads, rd.pseudo[p])
	}
	for _, l := range loads {
		if l.probe() {
			continue
		}
		if l.failed != nil {
			said[l.failed] = true
			c.flag(FlagMmprojFailed)
			if g := loadFigures(l); len(g.failed) > 0 {
				c.warn = append(c.warn, fmt.Sprintf("line %d: the multimodal projector's load failed (`%s`): its buffers (%s) are in no row: what it had allocated was freed with it, and a buffer whose allocation failed never existed; a sample taken before the failure may still hold them", l.failed.Seq, l.failed.Text, words(g.failed)))
			}
		}
		for _, x := range l.ctxs {
			if x.failed == nil || said[x.failed] {
				continue
			}
			said[x.failed] = true
			c.flag(FlagContextFailed)
			if lines := failedLines(x); len(lines) > 0 {
				c.warn = append(c.warn, fmt.Sprintf("line %d: a context's creation failed (`%s`): its buffers (%s) were freed with it and are in no row; a sample taken before the failure may still hold them", x.failed.Seq, x.failed.Text, words(lines)))
			} else {
				c.warn = append(c.warn, fmt.Sprintf("line %d: a context's creation failed (`%s`) before it printed a buffer line", x.failed.Seq, x.failed.Text))
			}
		}
	}
	for _, f := range rd.failures {
		if f.BufKind == "context" && !said[f] && !sameFailure(rd, f) {
			said[f] = true
			c.flag(FlagContextFailed)
			c.warn = append(c.warn, fmt.Sprintf("line %d: a context's creation failed (`%s`) before it printed a buffer line", f.Seq, f.Text))
		}
	}
}

// sameFailure reports whether a context failure f repeats one already
// read of the same context: a failure line of the same port since the
// last context started (llama.cpp says it twice: the library, then the
// tool, "failed to create context").
func sameFailure(rd *logReader, f *llamalog.Record) bool {
	for _, g := range rd.failures {
		if g == f {
			return false
		}
		if g.BufKind == "context" && g.Port == f.Port && g.Seq < f.Seq && !rd.contextBetween(f.Port, g.Seq, f.Seq) {
			return true
		}
	}
	return false
}

// contextBetween reports whether a context of port starts between two
// lines.
func (rd *logReader) contextBetween(port int, from, to uint64) bool {
	for _, l := range append(slices.Clone(rd.loads), rd.pseudo[port]) {
		if l == nil || l.port != port {
			continue
		}
		for _, x := range l.ctxs {
			if x.seq > from && x.seq < to {
				return true
			}
		}
	}
	return false
}

// modelRows fills the model rows from the live loads' sum (rules 2 and 3),
// and says why the model row is unknown when the log has load markers.
func (c *computation) modelRows(rd *logReader, sum figures, live int) {
	if !rd.haveLoad && c.r.Detail.ModelLoads == 0 && c.r.Detail.ProbeLoads == 0 {
		c.flag(FlagNotModelLoad)
	}
	if live > 1 {
		c.flag(FlagMultipleModels)
	}
	if sum.haveModel {
		v := sum.model
		c.model = &v
		c.r.ModelGTTMiB = mib(v)
	}
	if sum.haveHost || sum.haveModel {
		// Model lines and none on host memory: 0 on the host, as a load
		// on host memory only has 0 in GTT.
		c.r.ModelHostMiB = mib(sum.host)
	}
	if sum.haveModel {
		return
	}
	for _, l := range rd.loads {
		if l.marker && !l.mmproj && len(l.models) == 0 {
			if c.st.open() {
				// Its buffer lines may still come.
				c.warn = append(c.warn, fmt.Sprintf("line %d: a model load of %s: no model buffer line seen yet (the run is still open), so the model row is unknown so far", l.seq, orUnknown(l.file)))
				return
			}
			why := "the load printed no model buffer line (it failed, or it was a vocabulary-only load)"
			if !rd.verbose {
				why = "the log is not verbose: llama.cpp from b9151 prints buffer lines only with -v (or -lv 4), and a failed load prints none"
			}
			c.warn = append(c.warn, fmt.Sprintf("line %d: a model load of %s has no model buffer line, so the model row is unknown: %s", l.seq, orUnknown(l.file), why))
			return
		}
	}
}

// contextRows fills the KV + state and compute rows and the detail's
// buffer lists from the live loads' sum (rules 5 to 7).
func (c *computation) contextRows(sum figures) {
	d := &c.r.Detail
	d.LiveContexts = sum.ctxs
	d.Reservations = sum.reservations
	d.HostKVMiB = MiB(sum.hostKV)
	d.Buffers = sum.lines
	sort.SliceStable(d.Buffers, func(i, j int) bool { return d.Buffers[i].Line < d.Buffers[j].Line })
	d.Remote = sum.remote
	sort.SliceStable(d.Remote, func(i, j int) bool { return d.Remote[i].Line < d.Remote[j].Line })
	if len(d.Remote) > 0 {
		c.flag(FlagRemoteBuffers)
	}
	if !sum.haveCtx {
		return
	}
	d.HostComputeMiB = MiB(sum.hostComp)
	// A figure whose lines the fold's cap may have dropped is unknown.
	c.rowsLost = sum.buffersLost || sum.reservationLost
	if !sum.buffersLost {
		d.KVMiB, d.RSMiB, d.OutputMiB = mib(sum.kv), mib(sum.rs), mib(sum.output)
		if sum.other != 0 {
			d.OtherStateMiB = mib(sum.other)
		}
		s := sum.kv + sum.rs + sum.other
		c.stateMiB, c.r.StateMiB = &s, mib(s)
	}
	if !sum.reservationLost {
		d.ComputeOnlyMiB = mib(sum.comp)
	}
	if !c.rowsLost {
		co := sum.comp + sum.output
		c.compute, c.r.ComputeMiB = &co, mib(co)
	}
}

// unknownRows lists the buffer lines of unknown kinds of every load but
// the probes, and of the pseudo loads of ports (rule 7).
func (c *computation) unknownRows(rd *logReader, ports []int) {
	d := &c.r.Detail
	for _, l := range rd.loads {
		if !l.probe() {
			d.Unknown = append(d.Unknown, l.unknown...)
		}
	}
	for _, p := range ports {
		d.Unknown = append(d.Unknown, rd.pseudo[p].unknown...)
	}
	sort.Slice(d.Unknown, func(i, j int) bool { return d.Unknown[i].Line < d.Unknown[j].Line })
	if len(d.Unknown) > 0 {
		c.flag(FlagUnknownBuffer)
	}
}

// echoCheck turns the teardown echoes that do not match their reservation
// into a warning and a check; echoes are never added (rule 6).
func (c *computation) echoCheck(echoes []llamalog.Record) {
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
