package split

import (
	"cmp"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// IsHostBuffer reports whether a buffer-type name is plain host memory, not
// GTT: CPU, CPU_Mapped, CPU_REPACK, CPU_AARCH64, any CPU_*, AMX. Pinned host
// types (CUDA_Host, ROCm_Host, Vulkan_Host ...) are GTT and return false.
func IsHostBuffer(name string) bool {
	return name == "CPU" || strings.HasPrefix(name, "CPU_") || name == "AMX" || strings.HasPrefix(name, "AMX_")
}

// IsPinnedHostBuffer reports whether a buffer-type name is pinned host
// memory mapped for the GPU (CUDA_Host, ROCm_Host, Vulkan_Host ...): GTT,
// but a host buffer type to llama.cpp, whose memory breakdown puts it in
// the Host row, not in a device's row.
func IsPinnedHostBuffer(name string) bool { return strings.HasSuffix(name, "_Host") }

// pinnedMiB sums the pinned host buffers among the counted model and
// compute lines (output buffers are in no column of llama.cpp's table).
func pinnedMiB(lines []BufferLine) (model, compute float64) {
	for _, l := range lines {
		if !IsPinnedHostBuffer(l.Name) {
			continue
		}
		switch {
		case l.Row == "model":
			model += float64(l.MiB)
		case l.Row == "compute" && l.Kind == "compute":
			compute += float64(l.MiB)
		}
	}
	return model, compute
}

type ctxAcc struct {
	seq uint64 // the line that opened it
	// buffersLost says the fold's cap may have dropped some of its KV,
	// recurrent-state or output lines, reservationLost its last
	// reservation (see markLost).
	buffersLost, reservationLost bool
	kv, rs                       float64
	other                        float64 // state buffers outside the KV/RS rule
	hostKV                       float64
	reservations                 [][]llamalog.Record
	cur                          []llamalog.Record
	// started says the current reservation began at its start line
	// (sched_reserve: reserving ...): it holds every compute line up to
	// the next start line.
	started    bool
	output     float64
	hostOutput float64
	lines      []BufferLine
	// failed is the line that said the context's creation failed (nil:
	// it did not): its buffers were freed with it.
	failed *llamalog.Record
}

// reserve starts a reservation at its start line (b7746+).
func (c *ctxAcc) reserve() {
	if len(c.cur) > 0 {
		c.reservations = append(c.reservations, c.cur)
	}
	c.cur, c.started = nil, true
}

// compute adds a compute line to the current reservation. A reservation
// is what llama.cpp prints from its start line to the next (b7746+); in
// builds that print no start line a context reserves once, in its
// constructor, so its compute lines are one reservation; there, and in an
// excerpt that starts after a start line, a buffer type the current
// reservation already has starts the next one (llama.cpp prints one line
// per buffer type per reservation): the start line was lost.
func (c *ctxAcc) compute(r llamalog.Record) {
	if !c.started && sameName(c.cur, r.Name) {
		if len(c.cur) > 0 {
			c.reservations = append(c.reservations, c.cur)
		}
		c.cur = nil
	}
	c.cur = append(c.cur, r)
}

func (c *ctxAcc) lastReservation() []llamalog.Record {
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

func sameName(rs []llamalog.Record, name string) bool {
	for _, r := range rs {
		if r.Name == name {
			return true
		}
	}
	return false
}

type table struct {
	port int
	seq  uint64
	next uint64 // the line a next row must be on
	rows []llamalog.Record
}

// Report computes the split from everything applied so far. It does not
// change the fold.
func (f *Fold) Report() Report {
	r, _ := f.report()
	return r
}

// report is Report with its computation (the tests read the device table
// from it whether the report shows it or not).
func (f *Fold) report() (Report, *computation) {
	recs := f.st.sortedRecords()
	c := &computation{thr: f.thr, st: &f.st, linesRead: f.linesRead()}
	c.logRows(recs)
	c.samples(&f.st.Ticks)
	c.deviceCards(&f.st.Ticks)
	c.finish()
	c.r.Timeline = f.st.timeline()
	return c.r, c
}

type computation struct {
	thr       float64
	linesRead uint64
	st        *state
	r         Report
	flags     map[string]bool
	warn      []string

	model, packed, stateMiB, compute *float64
	rowsLost                         bool // the cap left KV + state or compute unknown
	peak, final                      *float64
	peakTick                         *tick
	devs                             []*devRow // the device table (devices.go), shown or not
	// discrete says every GPU device is matched to a card whose own
	// memory is VRAM: the process GTT does not hold their buffers.
	discrete bool
}

func (c *computation) flag(f string) {
	if c.flags == nil {
		c.flags = map[string]bool{}
	}
	c.flags[f] = true
}

func mib(v float64) *MiB { m := MiB(v); return &m }

// bufferRow maps a buffer line to its row: model, kv, rs, compute, output,
// mmproj, or "unknown".
func bufferRow(r llamalog.Record) string {
	fn := strings.TrimPrefix(r.Func, "~")
	switch k := r.BufKind; {
	case k == "model":
		return "model"
	case k == "KV" || strings.HasSuffix(k, " KV"):
		// (" KV": DeepSeek-V4's "DeepSeek4 compressed KV" cache is a KV
		// cache of its own name)
		if strings.Contains(fn, "recurrent") {
			return "rs" // ≤ b5855 recurrent state is printed with the KV word
		}
		return "kv"
	case k == "RS":
		return "rs"
	case strings.HasSuffix(k, " state"):
		// A cache's state buffer of a kind outside the KV/RS rule (the
		// DSV4 caches of b10xxx): state, named apart.
		return "state"
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

func (c *computation) breakdownChecks(t *table, main *figures) {
	if t == nil {
		return
	}
	var model, ctx, comp int64
	var n int
	for _, r := range t.rows {
		if len(r.Ints) != 7 || IsHostBuffer(r.Name) || r.Name == "Host" || IsRemoteBuffer(r.Name) {
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
	// The table truncates to whole MiB, per buffer type.
	near := func(ours float64, theirs int64) bool {
		diff := ours - float64(theirs)
		return diff >= -1 && diff <= float64(n)+1
	}
	var computeOnly *float64
	if c.r.Detail.ComputeOnlyMiB != nil {
		v := float64(*c.r.Detail.ComputeOnlyMiB)
		computeOnly = &v
	}
	// The table's device rows hold no pinned host buffer (ROCm_Host,
	// CUDA_Host ...): llama.cpp folds every host buffer type into its Host
	// row, so they are left out of ours here.
	pinned := func(lines []BufferLine, model, compute *float64) (m, co *float64, pm, pc float64) {
		pm, pc = pinnedMiB(lines)
		if model != nil {
			v := *model - pm
			m = &v
		}
		if compute != nil {
			v := *compute - pc
			co = &v
		}
		return m, co, pm, pc
	}
	om, oc, pm, pc := pinned(c.r.Detail.Buffers, c.model, computeOnly)
	ours := [3]*float64{om, c.stateMiB, oc}
	scope := ""
	// With several live models the table speaks of one context (the
	// main model's): compare with the main load when the sums differ.
	if main != nil && om != nil && !near(*om, model) {
		mm, mc, mpm, mpc := pinned(main.lines, &main.model, &main.comp)
		if near(*mm, model) {
			s := main.kv + main.rs + main.other
			ours = [3]*float64{mm, &s, mc}
			if main.buffersLost {
				ours[1] = nil
			}
			if main.reservationLost {
				ours[2] = nil
			}
			pm, pc = mpm, mpc
			scope = "the table covers the main model's context; compared with the main load"
		}
	}
	cmp := func(name, what string, theirs int64, ours *float64, pin float64) {
		if ours == nil {
			c.r.Checks = append(c.r.Checks, Check{Name: name, Status: StatusWarn,
				Detail: fmt.Sprintf("llama.cpp's breakdown (line %d) says %s %d MiB; no buffer lines to compare", t.seq, what, theirs)})
			return
		}
		st := StatusOK
		if !near(*ours, theirs) {
			st = StatusWarn
		}
		var notes []string
		if pin != 0 {
			notes = append(notes, fmt.Sprintf("without %.2f MiB of pinned host buffers, which the table counts under Host", pin))
		}
		if scope != "" {
			notes = append(notes, scope)
		}
		note := ""
		if len(notes) > 0 {
			note = " (" + strings.Join(notes, "; ") + ")"
		}
		c.r.Checks = append(c.r.Checks, Check{Name: name, Status: st,
			Detail: fmt.Sprintf("llama.cpp's memory breakdown: %s %d MiB; buffer lines: %.2f MiB%s", what, theirs, *ours, note)})
	}
	cmp("breakdown_model", "model", model, ours[0], pm)
	cmp("breakdown_context", "context", ctx, ours[1], 0)
	cmp("breakdown_compute", "compute", comp, ours[2], pc)
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
	if ts.MemSkipped > 0 {
		c.flag(FlagFDsSkipped)
		c.warn = append(c.warn, fmt.Sprintf("%d region figures of fdinfo files did not parse and were left out of the memory per card", ts.MemSkipped))
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

// finish completes the report: the run and its provenance, the rows'
// shares and the checks between them, the flags in order, the warnings
// and the expected line.
func (c *computation) finish() {
	r := &c.r
	r.Schema = Schema
	c.runMeta()
	c.provenance()
	// What the log attributes: the sum of the parts (Rows of kind
	// RowPart) that are known.
	attributed := 0.0
	for _, row := range RowsOf(RowPart) {
		if v := row.Of(*r); v != nil {
			attributed += float64(*v)
		}
	}
	if c.packed != nil && c.model != nil && *c.model > 0 {
		r.DuplicatePct = mib(*c.packed / *c.model * 100)
	}
	// A control (offload off) is judged as one: its weights stay in host
	// memory, so its small peak is mostly the runtime's own GTT. One that
	// holds model buffers in GTT was not run with offload off.
	control := c.isControl()
	switch {
	case control:
		c.flag(FlagControl)
		// Nothing of its weights is in GTT to be packed: no trace is
		// expected of it.
		delete(c.flags, FlagNoTrace)
	case c.st.Run.ControlOf != "":
		c.flag(FlagControlOffloaded)
	}
	c.traceCheck(control)
	if c.peak != nil && c.model == nil {
		what := "the log has no model load"
		if r.Run.Open {
			what = "no model load seen yet (the run is still open)"
		}
		r.Checks = append(r.Checks, Check{Name: "attributed_vs_peak", Status: StatusWarn,
			Detail: fmt.Sprintf("not checked: the peak is %.1f MiB but %s, so nothing is attributed", *c.peak, what)})
	}
	if c.peak != nil && c.model != nil {
		c.unattributed(attributed, control)
		c.steadyCheck()
	}
	sort.SliceStable(r.Checks, func(i, j int) bool { return checkRank(r.Checks[i].Name) < checkRank(r.Checks[j].Name) })
	for _, f := range flagTable {
		if c.flags[f.name] {
			r.Flags = append(r.Flags, f.name)
		}
	}
	if r.Flags == nil {
		r.Flags = []string{}
	}
	if r.Checks == nil {
		r.Checks = []Check{}
	}
	r.Detail.Warnings = append(r.Detail.Warnings, c.warn...)
	switch {
	case control:
		r.Expected = expectedControl(r)
	case c.discrete:
		r.Expected = expectedDiscrete(r, c.thr)
	default:
		r.Expected = expected(r, c.thr)
	}
}

// runMeta fills the report's run: who ran it, when, how it ended, whether
// the fold holds all of it, and how the collector sampled.
func (c *computation) runMeta() {
	r, st := &c.r, c.st
	run := st.Run
	r.Run = RunMeta{ID: run.ID, Host: run.Host, Lane: run.Lane, Command: run.Command, Issue: run.Issue, ControlOf: run.ControlOf}
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
	r.Run.Open = st.open()
	r.Detail.Missing = missing
	if (st.HaveRun || st.HaveFinish) && !r.Run.Complete {
		c.flag(FlagIncomplete)
	}
	c.childFlags()
	c.logPresence()
	if s := st.Finish.Sent; s != nil && s.Sampling != nil {
		ms := func(d time.Duration) MiB { return MiB(float64(d) / float64(time.Millisecond)) }
		r.Detail.Sampling = &SamplingDetail{IntervalMs: ms(s.Sampling.Interval), Samples: s.Samples,
			Triggered: s.Sampling.Triggered, LargestGapMs: ms(s.Sampling.LargestGap)}
	}
	if st.Finish.DroppedEvents > 0 {
		c.flag(FlagEventsDropped)
		r.Detail.Warnings = append(r.Detail.Warnings, fmt.Sprintf("the collector dropped %d events of this run (its spool was full)", st.Finish.DroppedEvents))
	}
}

// provenance fills what was measured (rule 13) and flags a source tree
// that is dirty or unknown.
func (c *computation) provenance() {
	r, st := &c.r, c.st
	run := st.Run
	r.Provenance.SourceCommit = run.SourceCommit
	r.Provenance.SourceDirty = run.SourceDirty
	if !run.SourceCommitTime.IsZero() {
		r.Provenance.SourceCommitTime = run.SourceCommitTime.UTC().Format(time.RFC3339)
	}
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
}

// unattributed fills not attributed, the peak minus the rows (rule 10),
// and checks it against the threshold: a control's is expected, a run on
// discrete cards is judged per card.
func (c *computation) unattributed(attributed float64, control bool) {
	r, peak := &c.r, *c.peak
	u := peak - attributed
	r.UnattributedMiB = mib(u)
	r.UnattributedPct = mib(pct(u, peak))
	st, detail := StatusOK, ""
	switch {
	case c.discrete:
		st = StatusWarn
		detail = fmt.Sprintf("not judged here: this run's devices keep their buffers in the VRAM of discrete cards (see devices and cards, where not attributed is judged per card), not in the process GTT (peak %.1f MiB: the runtime's own, pinned host buffers and spill); peak − rows is %.1f MiB", peak, u)
	case u < 0:
		c.flag(FlagUnattribNegative)
		st = StatusFail
		detail = fmt.Sprintf("the log attributes %.1f MiB, %.1f MiB MORE than the fdinfo peak %.1f MiB: the sampler missed the peak, or a row counts memory that was never resident at once", attributed, -u, peak)
	case pct(u, peak) > c.thr && control:
		detail = fmt.Sprintf("the log attributes %.1f of %.1f MiB; %.1f MiB (%.1f %%) is not attributed: this run is a control (offload off), whose peak is the runtime's own GTT, so that is expected and not flagged; its difference with run %s is what counts", attributed, peak, u, pct(u, peak), c.st.Run.ControlOf)
	case pct(u, peak) > c.thr:
		c.flag(FlagUnattribHigh)
		st = StatusWarn
		detail = fmt.Sprintf("the log attributes %.1f of %.1f MiB; %.1f MiB (%.1f %%) is not attributed, above the %g %% threshold", attributed, peak, u, pct(u, peak), c.thr)
	default:
		detail = fmt.Sprintf("the log attributes %.1f of %.1f MiB; %.1f MiB (%.1f %%) is not attributed, within the %g %% threshold", attributed, peak, u, pct(u, peak), c.thr)
	}
	if c.packed == nil && !control {
		detail += "; the packed copy is unknown (no trace), so any duplicate is inside the unattributed rest"
	}
	if c.rowsLost {
		detail += "; a row is unknown (state_capped), so its bytes are inside the unattributed rest"
	}
	r.Checks = append(r.Checks, Check{Name: "attributed_vs_peak", Status: st, Detail: detail})
}

// expectedDiscrete is the Expected line of a run whose devices are all on
// discrete cards: judged per card, against its VRAM.
func expectedDiscrete(r *Report, thr float64) string {
	s := fmt.Sprintf("Healthy: the weights are resident once, KV + state and compute match the -c/-b settings, and on each card not attributed is a few %% of its VRAM peak (the runtime's pools, code objects; flagged above %g %% of the process peak on an APU, judged per card here: this run's devices keep their buffers in the VRAM of discrete cards, not in the process GTT).", thr)
	var this []string
	for _, k := range r.Cards {
		if k.NotAttributedPct != nil && len(k.Devices) > 0 {
			this = append(this, fmt.Sprintf("%s (%s) %.1f %% of its VRAM peak not attributed", strings.Join(k.Devices, ", "), k.PDev, float64(*k.NotAttributedPct)))
		}
	}
	if len(this) > 0 {
		s += " This run: " + strings.Join(this, "; ") + "."
	}
	return s
}

// childFlags flags a command that failed (a non-zero exit status) or was
// stopped by a signal: its split is of a run that did not end well.
func (c *computation) childFlags() {
	st := c.st
	if !st.HaveFinish {
		return
	}
	switch {
	case st.Finish.Signal != "":
		c.flag(FlagChildSignalled)
	case st.Finish.ExitCode != nil && *st.Finish.ExitCode != 0:
		c.flag(FlagChildFailed)
	}
}

// logPresence says when the run has no log, or a log with no llama.cpp
// line in it: the rows are then unknown for that reason, not because the
// log is not verbose or not a model load.
func (c *computation) logPresence() {
	st := c.st
	switch {
	case st.Run.NoLog && c.linesRead == 0:
		c.flag(FlagNoLog)
		delete(c.flags, FlagNotVerbose)
		delete(c.flags, FlagNotModelLoad)
	case c.linesRead > 0 && !st.llamaSeen():
		cmd := "the command"
		if st.Run.Command != "" {
			cmd = "`" + st.Run.Command + "`"
		}
		c.warn = append(c.warn, fmt.Sprintf("none of the %d log lines is a llama.cpp line (no build, model load, buffer, breakdown or -v line): %s does not look like a llama.cpp run, so every log row is unknown", c.linesRead, cmd))
	}
}

// isControl reports whether the run is judged as a control: it was named
// the control of another run (collector run --control-of) and holds no
// model buffer in GTT.
func (c *computation) isControl() bool {
	return c.st.Run.ControlOf != "" && !(c.model != nil && *c.model > 0)
}

// expectedControl is the Expected line of a control run (collector run
// --control-of): what a healthy control looks like, and this one's
// figures.
func expectedControl(r *Report) string {
	id := r.Run.ControlOf
	s := fmt.Sprintf("Control of run %s (the same command with offload off, -ngl 0): healthy when the loader's model buffer in GTT is 0 (the weights stay in host memory, the CPU model buffer row) and the peak is the runtime's own GTT (pools, code objects, compute buffers), so not attributed is most of a small peak by design; run %s's peak minus this one is the weights' residency (aggregator compare %s %s).",
		id, id, id, cmp.Or(r.Run.ID, "THIS-RUN"))
	var this []string
	if r.ModelGTTMiB != nil {
		this = append(this, fmt.Sprintf("model buffer in GTT %.1f MiB", float64(*r.ModelGTTMiB)))
	}
	if r.ModelHostMiB != nil {
		this = append(this, fmt.Sprintf("CPU model buffer %.1f MiB", float64(*r.ModelHostMiB)))
	}
	if r.PeakGTTMiB != nil {
		this = append(this, fmt.Sprintf("peak %.1f MiB", float64(*r.PeakGTTMiB)))
	}
	if len(this) > 0 {
		s += " This run: " + strings.Join(this, "; ") + "."
	}
	return s
}

var checkNames = []string{"trace_vs_model", "attributed_vs_peak", "process_vs_card", "steady_state",
	"device_vs_card", "breakdown_model", "breakdown_context", "breakdown_compute", "compute_echo"}

func checkRank(n string) int {
	for i, x := range checkNames {
		if x == n {
			return i
		}
	}
	return len(checkNames)
}

// traceCheck compares the packed copy with the loader's model buffer. A
// control (offload off) has no weights in GTT to pack; an open run's trace
// may still come.
func (c *computation) traceCheck(control bool) {
	switch {
	case c.packed == nil && control:
		c.r.Checks = append(c.r.Checks, Check{Name: "trace_vs_model", Status: StatusOK,
			Detail: "not checked: this run is a control (offload off), whose weights stay in host memory: nothing in GTT to pack, no trace expected; the packed row is unknown, not 0"})
	case c.packed == nil && c.r.Run.Open:
		c.r.Checks = append(c.r.Checks, Check{Name: "trace_vs_model", Status: StatusWarn,
			Detail: "not checked yet: no host-weight trace line seen yet (the run is still open); the packed row is unknown so far, not 0"})
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
