package split

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Flag names (docs/accounting.md rule 12). They appear in a report in this order.
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
)

var flagOrder = []string{
	FlagNotModelLoad, FlagNotVerbose, FlagPreB3761, FlagLegacyFormat, FlagFitProbe,
	FlagMultipleModels, FlagMultipleContexts, FlagNoContext, FlagUnknownBuffer, FlagMmproj,
	FlagComputeMismatch, FlagOutputRealloc, FlagNoTrace, FlagNoSamples, FlagNoGPUClient,
	FlagResidentOnly, FlagUnattribHigh, FlagUnattribNegative, FlagLinesSkipped, FlagFDsSkipped,
	FlagSourceDirty, FlagSourceUnknown, FlagIncomplete, FlagEventsDropped, FlagStateCapped,
}

// IsHostBuffer reports whether a buffer-type name is plain host memory, not
// GTT: CPU, CPU_Mapped, CPU_REPACK, CPU_AARCH64, any CPU_*, AMX. Pinned host
// types (CUDA_Host, ROCm_Host, Vulkan_Host ...) are GTT and return false.
func IsHostBuffer(name string) bool {
	return name == "CPU" || strings.HasPrefix(name, "CPU_") || name == "AMX" || strings.HasPrefix(name, "AMX_")
}

type ctxAcc struct {
	seq          uint64
	kv, rs       float64
	hostKV       float64
	reservations [][]Record
	cur          []Record
	output       float64
	hostOutput   float64
	lines        []BufferLine
}

func (c *ctxAcc) compute(r Record) {
	// A compute line for a buffer type the current reservation already
	// has starts the next reservation (llama.cpp prints one line per
	// buffer type per reservation).
	if sameName(c.cur, r.Name) {
		if len(c.cur) > 0 {
			c.reservations = append(c.reservations, c.cur)
		}
		c.cur = nil
	}
	c.cur = append(c.cur, r)
}

func (c *ctxAcc) lastReservation() []Record {
	if len(c.cur) > 0 {
		return c.cur
	}
	if n := len(c.reservations); n > 0 {
		return c.reservations[n-1]
	}
	return nil
}

func (c *ctxAcc) nReservations() int {
	n := len(c.reservations)
	if len(c.cur) > 0 {
		n++
	}
	return n
}

func sameName(rs []Record, name string) bool {
	for _, r := range rs {
		if r.Name == name {
			return true
		}
	}
	return false
}

type loadAcc struct {
	seq         uint64
	models      []Record
	modelClosed bool
	ctxs        []*ctxAcc
	unknown     []BufferLine
}

func (l *loadAcc) probe() bool {
	if len(l.models) == 0 {
		return false
	}
	for _, m := range l.models {
		if m.MiB != 0 {
			return false
		}
	}
	return true
}

func (l *loadAcc) real() bool { return len(l.models) > 0 && !l.probe() }

type table struct {
	seq  uint64
	next uint64 // the line a next row must be on
	rows []Record
}

// Report computes the split from everything applied so far. It does not
// change the fold.
func (f *Fold) Report() Report {
	recs := f.st.sortedRecords()
	c := &computation{thr: f.thr, st: &f.st, linesRead: f.linesRead()}
	c.logRows(recs)
	c.samples(&f.st.Ticks)
	c.finish()
	return c.r
}

type computation struct {
	thr       float64
	linesRead uint64
	st        *state
	r         Report
	flags     map[string]bool
	warn      []string

	model, packed, stateMiB, compute *float64
	peak, final                      *float64
	peakTick                         *tick
}

func (c *computation) flag(f string) {
	if c.flags == nil {
		c.flags = map[string]bool{}
	}
	c.flags[f] = true
}

func mib(v float64) *MiB { m := MiB(v); return &m }

func (c *computation) logRows(recs []Record) {
	var (
		loads     []*loadAcc
		cur       *loadAcc
		pseudo    = &loadAcc{}
		owner     *loadAcc // the latest load with model lines
		tables    []*table
		haveLoad  bool
		verbose   bool
		verbosity int64 = -1
		build     *Record
		legacy    bool
		skipped   int
		echoes    []Record
		realloc   bool
	)
	ctxOf := func() *ctxAcc {
		l := owner
		if l == nil {
			l = pseudo
		}
		if len(l.ctxs) == 0 {
			l.ctxs = append(l.ctxs, &ctxAcc{})
		}
		if cur != nil {
			cur.modelClosed = true
		}
		return l.ctxs[len(l.ctxs)-1]
	}
	for i := range recs {
		r := recs[i]
		switch r.Kind {
		case KindLoad:
			haveLoad = true
			cur = &loadAcc{seq: r.Seq}
			loads = append(loads, cur)
		case KindContext:
			l := owner
			if l == nil {
				l = pseudo
			}
			if cur != nil {
				cur.modelClosed = true
			}
			l.ctxs = append(l.ctxs, &ctxAcc{seq: r.Seq})
		case KindBuffer:
			bl := BufferLine{Line: r.Seq, Func: r.Func, Name: r.Name, Kind: r.BufKind, MiB: MiB(r.MiB)}
			host := IsHostBuffer(r.Name)
			switch kind := bufferRow(r); kind {
			case "model":
				if cur == nil || cur.modelClosed {
					cur = &loadAcc{seq: r.Seq}
					loads = append(loads, cur)
				}
				cur.models = append(cur.models, r)
				owner = cur
			case "kv", "rs":
				x := ctxOf()
				switch {
				case host:
					x.hostKV += r.MiB
					bl.Row = "host"
				case kind == "kv":
					x.kv += r.MiB
					bl.Row = "state"
				default:
					x.rs += r.MiB
					bl.Row = "state"
				}
				x.lines = append(x.lines, bl)
			case "compute":
				x := ctxOf()
				x.compute(r)
			case "output":
				x := ctxOf()
				if host {
					x.hostOutput += r.MiB
					bl.Row = "host"
				} else {
					x.output += r.MiB
					bl.Row = "compute"
				}
				x.lines = append(x.lines, bl)
			default: // unknown kind, or mmproj
				bl.Row = kind
				l := owner
				if l == nil {
					l = pseudo
				}
				l.unknown = append(l.unknown, bl)
			}
		case KindEcho:
			echoes = append(echoes, r)
		case KindBreakdownHead:
			tables = append(tables, &table{seq: r.Seq, next: r.Seq + 1})
		case KindBreakdownRow:
			// A row belongs to the table whose header or last row is
			// the line just before it; a stray row is ignored.
			if n := len(tables); n > 0 && tables[n-1].next == r.Seq {
				tables[n-1].rows = append(tables[n-1].rows, r)
				tables[n-1].next++
			}
		case KindBuild:
			if build == nil {
				build = &recs[i]
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
	skipped = c.st.Malformed

	d := &c.r.Detail
	d.LinesRead = c.linesRead
	d.LinesSkipped = skipped
	if skipped > 0 {
		c.flag(FlagLinesSkipped)
	}
	if build != nil {
		c.r.Provenance.LlamaBuild = build.Text
		if build.Int > 0 && build.Int < 3761 {
			c.flag(FlagPreB3761)
		}
	}
	if legacy {
		c.flag(FlagLegacyFormat)
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

	// Loads: the last real one is measured; probes and their contexts are not.
	var last *loadAcc
	for _, l := range loads {
		switch {
		case l.probe():
			d.ProbeLoads++
		case l.real():
			d.ModelLoads++
			last = l
		}
	}
	if !haveLoad && len(loads) == 0 {
		c.flag(FlagNotModelLoad)
	}
	if d.ProbeLoads > 0 {
		c.flag(FlagFitProbe)
	}
	if d.ModelLoads > 1 {
		c.flag(FlagMultipleModels)
	}
	measured := last
	if measured == nil {
		measured = pseudo
	}
	if last != nil {
		var gtt, host float64
		var haveHost bool
		for _, m := range last.models {
			bl := BufferLine{Line: m.Seq, Func: m.Func, Name: m.Name, Kind: m.BufKind, MiB: MiB(m.MiB)}
			if IsHostBuffer(m.Name) {
				host += m.MiB
				haveHost = true
				bl.Row = "model_host"
			} else {
				gtt += m.MiB
				bl.Row = "model"
			}
			d.Buffers = append(d.Buffers, bl)
		}
		c.model = &gtt
		c.r.ModelGTTMiB = mib(gtt)
		if haveHost {
			c.r.ModelHostMiB = mib(host)
		}
	}
	for _, l := range loads {
		if !l.probe() {
			d.Unknown = append(d.Unknown, l.unknown...)
		}
	}
	d.Unknown = append(d.Unknown, pseudo.unknown...)
	sort.Slice(d.Unknown, func(i, j int) bool { return d.Unknown[i].Line < d.Unknown[j].Line })
	for _, u := range d.Unknown {
		if u.Row == "mmproj" {
			c.flag(FlagMmproj)
		} else {
			c.flag(FlagUnknownBuffer)
		}
	}

	// Contexts of the measured load.
	d.LiveContexts = len(measured.ctxs)
	switch {
	case len(measured.ctxs) > 1:
		c.flag(FlagMultipleContexts)
	case len(measured.ctxs) == 0 && last != nil:
		c.flag(FlagNoContext)
	}
	if len(measured.ctxs) > 0 {
		var kv, rs, comp, out, hostComp float64
		for _, x := range measured.ctxs {
			kv += x.kv
			rs += x.rs
			out += x.output
			hostComp += x.hostOutput
			d.HostKVMiB += MiB(x.hostKV)
			d.Reservations += x.nReservations()
			d.Buffers = append(d.Buffers, x.lines...)
			for _, r := range x.lastReservation() {
				bl := BufferLine{Line: r.Seq, Func: r.Func, Name: r.Name, Kind: r.BufKind, MiB: MiB(r.MiB)}
				if IsHostBuffer(r.Name) {
					hostComp += r.MiB
					bl.Row = "host"
				} else {
					comp += r.MiB
					bl.Row = "compute"
				}
				d.Buffers = append(d.Buffers, bl)
			}
		}
		d.HostComputeMiB = MiB(hostComp)
		d.KVMiB, d.RSMiB, d.ComputeOnlyMiB, d.OutputMiB = mib(kv), mib(rs), mib(comp), mib(out)
		s, co := kv+rs, comp+out
		c.stateMiB, c.compute = &s, &co
		c.r.StateMiB, c.r.ComputeMiB = mib(s), mib(co)
	}
	sort.SliceStable(d.Buffers, func(i, j int) bool { return d.Buffers[i].Line < d.Buffers[j].Line })

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

	// The packed copy: the largest resident= wins; evictions never lower it.
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

	// llama.cpp's own memory breakdown, the last table after the measured load.
	var tbl *table
	for _, t := range tables {
		if last == nil || t.seq > last.seq {
			tbl = t
		}
	}
	c.breakdownChecks(tbl)
}

// bufferRow maps a buffer line to its row: model, kv, rs, compute, output,
// mmproj, or "unknown".
func bufferRow(r Record) string {
	fn := strings.TrimPrefix(r.Func, "~")
	switch k := r.BufKind; {
	case k == "model":
		return "model"
	case k == "KV":
		if strings.Contains(fn, "recurrent") {
			return "rs" // ≤ b5855 recurrent state is printed with the KV word
		}
		return "kv"
	case k == "RS" || strings.HasSuffix(k, " state"):
		return "rs"
	case k == "compute":
		// (a suffix: generated text can be glued in front of a line)
		if strings.HasSuffix(fn, "alloc_compute_meta") || strings.HasPrefix(fn, "clip") {
			return "mmproj"
		}
		return "compute"
	case k == "output" || k == "input":
		return "output"
	}
	return "unknown"
}

func (c *computation) breakdownChecks(t *table) {
	if t == nil {
		return
	}
	var model, ctx, comp int64
	var n int
	for _, r := range t.rows {
		if len(r.Ints) != 7 || IsHostBuffer(r.Name) || r.Name == "Host" {
			continue
		}
		// total = free + (self = model + context + compute) + unaccounted
		model += r.Ints[3]
		ctx += r.Ints[4]
		comp += r.Ints[5]
		n++
	}
	if n == 0 {
		return
	}
	cmp := func(name, what string, theirs int64, ours *float64) {
		if ours == nil {
			c.r.Checks = append(c.r.Checks, Check{Name: name, Status: StatusWarn,
				Detail: fmt.Sprintf("llama.cpp's breakdown says %s %d MiB; no buffer lines to compare", what, theirs)})
			return
		}
		diff := *ours - float64(theirs)
		st := StatusOK
		// The table truncates to whole MiB, per buffer type.
		if diff < -1 || diff > float64(n)+1 {
			st = StatusWarn
		}
		c.r.Checks = append(c.r.Checks, Check{Name: name, Status: st,
			Detail: fmt.Sprintf("llama.cpp's memory breakdown: %s %d MiB; buffer lines: %.2f MiB", what, theirs, *ours)})
	}
	cmp("breakdown_model", "model", model, c.model)
	cmp("breakdown_context", "context", ctx, c.stateMiB)
	var computeOnly *float64
	if c.r.Detail.ComputeOnlyMiB != nil {
		v := float64(*c.r.Detail.ComputeOnlyMiB)
		computeOnly = &v
	}
	cmp("breakdown_compute", "compute", comp, computeOnly)
}

const bytesPerMiB = 1 << 20

func (c *computation) samples(ts *tickState) {
	d := &c.r.Detail
	d.Samples = int(ts.Seen.count())
	if d.Samples == 0 {
		c.flag(FlagNoSamples)
		return
	}
	d.FDsSkipped = ts.FDsSkipped
	if d.FDsSkipped > 0 {
		c.flag(FlagFDsSkipped)
	}
	if ts.Peak == nil {
		c.flag(FlagNoGPUClient)
		return
	}
	c.peakTick = ts.Peak
	d.PeakKey = "drm-total-gtt"
	if ts.Resident {
		c.flag(FlagResidentOnly)
		d.PeakKey = ""
		for _, cl := range ts.Peak.Clients {
			if cl.Key != "drm-total-gtt" {
				d.PeakKey = cl.Key
			}
		}
	}
	p := float64(ts.Peak.sum()) / bytesPerMiB
	c.peak = &p
	c.r.PeakGTTMiB = mib(p)
	fv := float64(ts.Final.sum()) / bytesPerMiB
	c.final = &fv
	c.r.FinalGTTMiB = mib(fv)
	d.GPUClients = len(ts.Peak.Clients)
	if !ts.Peak.Time.IsZero() {
		d.PeakAt = ts.Peak.Time.UTC().Format(time.RFC3339Nano)
	}
	if !ts.Final.Time.IsZero() {
		d.FinalAt = ts.Final.Time.UTC().Format(time.RFC3339Nano)
	}

	if len(c.peakTick.Cards) > 0 {
		var used int64
		for _, cd := range c.peakTick.Cards {
			used += cd.UsedBytes
		}
		u := float64(used) / bytesPerMiB
		d.CardGTTUsedMiB = mib(u)
		st, what := StatusOK, "within"
		if p > u {
			st, what = StatusFail, "ABOVE"
		}
		c.r.Checks = append(c.r.Checks, Check{Name: "process_vs_card", Status: st,
			Detail: fmt.Sprintf("process peak %.1f MiB is %s the card's device-wide GTT use %.1f MiB at the same tick (%.1f %%)", p, what, u, pct(p, u))})
	}
}

func pct(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b * 100
}

func (c *computation) finish() {
	r := &c.r
	r.Schema = Schema
	st := c.st
	run := st.Run
	r.Run = RunMeta{ID: run.ID, Host: run.Host, Lane: run.Lane, Command: run.Command, Issue: run.Issue}
	if !run.Started.IsZero() {
		r.Run.Started = run.Started.UTC().Format(time.RFC3339Nano)
	}
	if st.HaveFinish {
		r.Run.ExitCode = st.Finish.ExitCode
		r.Run.Signal = st.Finish.Signal
		if !st.Finish.Finished.IsZero() {
			r.Run.Finished = st.Finish.Finished.UTC().Format(time.RFC3339Nano)
		}
	}
	missing := st.missing()
	r.Run.Complete = (st.HaveRun || st.HaveFinish) && len(missing) == 0
	r.Detail.Missing = missing
	if (st.HaveRun || st.HaveFinish) && !r.Run.Complete {
		c.flag(FlagIncomplete)
	}
	if st.Finish.DroppedEvents > 0 {
		c.flag(FlagEventsDropped)
		r.Detail.Warnings = append(r.Detail.Warnings, fmt.Sprintf("the collector dropped %d events of this run (its spool was full)", st.Finish.DroppedEvents))
	}
	r.Provenance.SourceCommit = run.SourceCommit
	r.Provenance.SourceDirty = run.SourceDirty
	r.Provenance.CollectorVersion = run.CollectorVersion
	switch {
	case run.SourceCommit == "":
		c.flag(FlagSourceUnknown)
	case run.SourceDirty == nil || *run.SourceDirty:
		c.flag(FlagSourceDirty)
	}
	if st.SampleLinesSkipped > 0 {
		r.Detail.Warnings = append(r.Detail.Warnings, fmt.Sprintf("%d samples-file lines could not be used and were skipped", st.SampleLinesSkipped))
		c.flag(FlagFDsSkipped)
	}

	attributed := 0.0
	for _, v := range []*float64{c.model, c.packed, c.stateMiB, c.compute} {
		if v != nil {
			attributed += *v
		}
	}
	if c.packed != nil && c.model != nil && *c.model > 0 {
		r.DuplicatePct = mib(*c.packed / *c.model * 100)
	}
	c.traceCheck()
	if c.peak != nil && c.model == nil {
		r.Checks = append(r.Checks, Check{Name: "attributed_vs_peak", Status: StatusWarn,
			Detail: fmt.Sprintf("not checked: the peak is %.1f MiB but the log has no model load, so nothing is attributed", *c.peak)})
	}
	if c.peak != nil && c.model != nil {
		u := *c.peak - attributed
		r.UnattributedMiB = mib(u)
		r.UnattributedPct = mib(pct(u, *c.peak))
		st, detail := StatusOK, ""
		switch {
		case u < 0:
			c.flag(FlagUnattribNegative)
			st = StatusFail
			detail = fmt.Sprintf("the log attributes %.1f MiB, %.1f MiB MORE than the fdinfo peak %.1f MiB: the sampler missed the peak, or a row counts memory that was never resident at once", attributed, -u, *c.peak)
		case pct(u, *c.peak) > c.thr:
			c.flag(FlagUnattribHigh)
			st = StatusWarn
			detail = fmt.Sprintf("the log attributes %.1f of %.1f MiB; %.1f MiB (%.1f %%) is not attributed, above the %g %% threshold", attributed, *c.peak, u, pct(u, *c.peak), c.thr)
		default:
			detail = fmt.Sprintf("the log attributes %.1f of %.1f MiB; %.1f MiB (%.1f %%) is not attributed, within the %g %% threshold", attributed, *c.peak, u, pct(u, *c.peak), c.thr)
		}
		if c.packed == nil {
			detail += "; the packed copy is unknown (no trace), so any duplicate is inside the unattributed rest"
		}
		r.Checks = append(r.Checks, Check{Name: "attributed_vs_peak", Status: st, Detail: detail})
		c.steadyCheck()
	}
	sort.SliceStable(r.Checks, func(i, j int) bool { return checkRank(r.Checks[i].Name) < checkRank(r.Checks[j].Name) })
	for _, f := range flagOrder {
		if c.flags[f] {
			r.Flags = append(r.Flags, f)
		}
	}
	if r.Flags == nil {
		r.Flags = []string{}
	}
	if r.Checks == nil {
		r.Checks = []Check{}
	}
	r.Detail.Warnings = append(r.Detail.Warnings, c.warn...)
	r.Expected = expected(r, c.thr)
}

var checkNames = []string{"trace_vs_model", "attributed_vs_peak", "process_vs_card", "steady_state",
	"breakdown_model", "breakdown_context", "breakdown_compute", "compute_echo"}

func checkRank(n string) int {
	for i, x := range checkNames {
		if x == n {
			return i
		}
	}
	return len(checkNames)
}

func (c *computation) traceCheck() {
	switch {
	case c.packed == nil:
		c.r.Checks = append(c.r.Checks, Check{Name: "trace_vs_model", Status: StatusWarn,
			Detail: "not checked: no host-weight trace line (run with GGML_HRX_HOST_WEIGHT_TRACE=1); the packed row is unknown, not 0"})
	case c.model == nil:
		c.r.Checks = append(c.r.Checks, Check{Name: "trace_vs_model", Status: StatusWarn,
			Detail: fmt.Sprintf("not checked: the trace says %.1f MiB packed but the log has no model load to compare with", *c.packed)})
	case *c.packed > *c.model:
		c.r.Checks = append(c.r.Checks, Check{Name: "trace_vs_model", Status: StatusFail,
			Detail: fmt.Sprintf("the trace's packed copy %.1f MiB is larger than the loader's model buffer %.1f MiB: the two sources disagree about the same weights", *c.packed, *c.model)})
	default:
		c.r.Checks = append(c.r.Checks, Check{Name: "trace_vs_model", Status: StatusOK,
			Detail: fmt.Sprintf("the packed copy (%.1f MiB, from the trace) is %.1f %% of the loader's model buffer (%.1f MiB, from the log)", *c.packed, pct(*c.packed, *c.model), *c.model)})
	}
}

// steadyCheck tells "resident twice" from "briefly twice" (docs/accounting.md rule 9).
func (c *computation) steadyCheck() {
	if c.final == nil || c.peak == nil {
		return
	}
	drop := *c.peak - *c.final
	d := fmt.Sprintf("final sample %.1f MiB, %.1f MiB below the peak %.1f MiB", *c.final, drop, *c.peak)
	st := StatusOK
	if c.packed != nil && *c.packed > 0 {
		if drop < *c.packed {
			d += fmt.Sprintf("; less than the packed copy (%.1f MiB), so the duplicate is still resident at the end (resident twice, not briefly twice)", *c.packed)
		} else {
			st = StatusWarn
			d += fmt.Sprintf("; at least the packed copy (%.1f MiB) was released after the peak (briefly twice)", *c.packed)
		}
	}
	c.r.Checks = append(c.r.Checks, Check{Name: "steady_state", Status: st, Detail: d})
}

func expected(r *Report, thr float64) string {
	s := fmt.Sprintf("Healthy: the weights are resident once (packed ≈ 0, duplicate ≈ 0 %%), KV + state and compute match the -c/-b settings, and not attributed is a few %% of the peak (runtime pools, code objects, staging; flagged above %g %%); final ≈ peak.", thr)
	var this []string
	if r.DuplicatePct != nil && float64(*r.DuplicatePct) >= 1 {
		this = append(this, fmt.Sprintf("the packed copy is %.1f %% of the model buffer, resident next to it", float64(*r.DuplicatePct)))
	}
	if r.UnattributedPct != nil {
		this = append(this, fmt.Sprintf("not attributed is %.1f %% of the peak", float64(*r.UnattributedPct)))
	}
	if len(this) > 0 {
		s += " This run: " + strings.Join(this, "; ") + "."
	}
	return s
}
