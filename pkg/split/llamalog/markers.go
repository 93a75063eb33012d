package llamalog

import (
	"bytes"
	"regexp"
	"strconv"
)

// loadFile returns the function and the file of a "loaded meta data with N
// key-value pairs and M tensors from FILE (version ...)" line.
func loadFile(s []byte, sc *Scratch) (fn, file string) {
	if c := lastColonBlank(s[:bytes.Index(s, aLoad)]); c > 0 {
		fn = funcName(s[:c], sc)
	}
	i := bytes.Index(s, []byte(" tensors from "))
	if i < 0 {
		return fn, ""
	}
	f := s[i+len(" tensors from "):]
	if j := bytes.LastIndex(f, []byte(" (version ")); j >= 0 {
		f = f[:j]
	}
	return fn, sc.str(bytes.TrimSpace(f))
}

var (
	reDraft   = regexp.MustCompile(`loading draft model '([^']*)'`)
	reSpawn   = regexp.MustCompile(`spawning server instance with name=(\S+) on port (\d+)`)
	reStop    = regexp.MustCompile(`stopping model instance name=(\S+)`)
	reExited  = regexp.MustCompile(`instance name=(\S+) exited`)
	reClipDev = regexp.MustCompile(`CLIP using (\S+) backend`)
	// The function is a word of its own anywhere in the message: a
	// supervisor's prefix (journald, docker compose) may precede it.
	reClipMiB = regexp.MustCompile(`(?:^|\W)(load_hparams|clip_model_load|clip_model_loader|clip_ctx): +model size: +([0-9]+(?:\.[0-9]+)?) (?:MiB|MB)\b`)
)

// The kinds told by their literal alone, and the lines that say which
// loads are live: a draft model's announcement, the router's spawn and
// stop lines, the mmproj/CLIP backend and weight size, and the --fit
// bracket. Each is a rule of grammar (parse.go).

func readLoad(r Record, s []byte, sc *Scratch) (Record, bool) {
	r.Kind = KindLoad
	r.Func, r.Text = loadFile(s, sc)
	return r, true
}

func readContext(r Record, _ []byte, _ *Scratch) (Record, bool) {
	r.Kind = KindContext
	return r, true
}

var reRealloc = regexp.MustCompile(`from size +([0-9.]+) MiB to +([0-9.]+) MiB`)

func readRealloc(r Record, s []byte, _ *Scratch) (Record, bool) {
	r.Kind = KindOutputRealloc
	if m := reRealloc.FindSubmatch(s); m != nil {
		r.Expect, _ = parseDecimal(m[1])
		r.MiB, _ = parseDecimal(m[2])
	}
	return r, true
}

func readLegacy(r Record, _ []byte, _ *Scratch) (Record, bool) {
	r.Kind = KindLegacy
	return r, true
}

func readSummary(r Record, _ []byte, _ *Scratch) (Record, bool) {
	r.Kind = KindSummary
	return r, true
}

func readDebugMarker(r Record, _ []byte, _ *Scratch) (Record, bool) {
	r.Kind = KindDebugMarker
	return r, true
}

func readDraft(r Record, s []byte, _ *Scratch) (Record, bool) {
	if m := reDraft.FindSubmatch(s); m != nil {
		r.Kind, r.Text, r.Name = KindRole, "draft", string(m[1])
		return r, true
	}
	return r, false
}

func readSpawn(r Record, s []byte, _ *Scratch) (Record, bool) {
	if m := reSpawn.FindSubmatch(s); m != nil {
		p, err := strconv.ParseInt(string(m[2]), 10, 32)
		if err == nil {
			r.Kind, r.Text, r.Name, r.Int = KindRouter, "spawn", string(m[1]), p
			return r, true
		}
	}
	return r, false
}

// readInstance reads the router's "stopping model instance name=N" and
// "instance name=N exited".
func readInstance(r Record, s []byte, _ *Scratch) (Record, bool) {
	if m := reStop.FindSubmatch(s); m != nil {
		r.Kind, r.Text, r.Name = KindRouter, "stop", string(m[1])
		return r, true
	}
	if m := reExited.FindSubmatch(s); m != nil {
		r.Kind, r.Text, r.Name = KindRouter, "exit", string(m[1])
		return r, true
	}
	return r, false
}

func readClipBackend(r Record, s []byte, _ *Scratch) (Record, bool) {
	if m := reClipDev.FindSubmatch(s); m != nil {
		r.Kind, r.Text, r.Name = KindClip, "backend", string(m[1])
		return r, true
	}
	return r, false
}

// readClipCPU reads "clip_model_load: Main model doesn't offload, fallback
// to CPU backend".
func readClipCPU(r Record, _ []byte, _ *Scratch) (Record, bool) {
	r.Kind, r.Text, r.Name = KindClip, "backend", "CPU"
	return r, true
}

func readClipSize(r Record, s []byte, _ *Scratch) (Record, bool) {
	if m := reClipMiB.FindSubmatch(s); m != nil {
		v, err := parseDecimal(m[2])
		if err == nil {
			r.Kind, r.Text, r.Func, r.MiB = KindClip, "size", string(m[1]), v
			return r, true
		}
	}
	return r, false
}

// readFit reads the start of the fit's dry runs ("fitting params to
// device memory", or "getting device memory data for initial parameters"
// where that is not printed) and their end.
func readFit(r Record, s []byte, _ *Scratch) (Record, bool) {
	switch {
	case bytes.Contains(s, []byte("fitting params to device memory")), bytes.Contains(s, []byte("getting device memory data for initial parameters")):
		r.Kind, r.Text = KindFitBracket, "start"
		return r, true
	case bytes.Contains(s, []byte("fitting params to free memory took")):
		r.Kind, r.Text = KindFitBracket, "end"
		return r, true
	}
	return r, false
}

// readFitProjected reads the fit's projection, which follows its dry runs
// (where no bracket start was printed, it closes one around them: package
// split's reader): "projected to use N MiB of device memory vs. ..." or,
// with several devices, "projected memory use with initial parameters
// [MiB]:" before it, printed by the fit's function (llama_params_fit,
// llama_params_fit_impl, common_params_fit_impl).
func readFitProjected(r Record, s []byte, _ *Scratch) (Record, bool) {
	i := bytes.Index(s, aFitProjected)
	if j := bytes.Index(s, aFitInitial); j >= 0 && (i < 0 || j < i) {
		i = j
	}
	if c := lastColonBlank(s[:i]); c < 0 || !bytes.Contains(s[:c], []byte("_fit")) {
		return r, false
	}
	r.Kind, r.Text = KindFitBracket, "projected"
	return r, true
}

// readReserve reads "sched_reserve: reserving ...", the start of a compute
// reservation (b7746+).
func readReserve(r Record, s []byte, sc *Scratch) (Record, bool) {
	c := lastColonBlank(s[:bytes.Index(s, aReserve)])
	if c < 0 {
		return r, false
	}
	r.Kind, r.Func = KindReserve, funcName(s[:c], sc)
	return r, true
}

// readWarmup reads the warm-up line: at the default verbosity the
// bracket's end line is not printed; the warm-up runs after the real load
// and context, so it ends an open bracket too.
func readWarmup(r Record, _ []byte, _ *Scratch) (Record, bool) {
	r.Kind, r.Text = KindFitBracket, "end"
	return r, true
}

// parseDevice parses "<func>: using device <dev> (<description>) (<id>) -
// <N> MiB free", the device a model load uses (b3933+; the id, a PCI
// address or "unknown id", from b6451). The description may hold
// parentheses of its own ("AMD Radeon Graphics (RADV GFX1151)"): the groups
// are read as balanced parentheses from the end. It returns false for a
// line of another shape ("using device 0 (...) as main device").
func parseDevice(r Record, s []byte, sc *Scratch) (Record, bool) {
	i := bytes.Index(s, aDevice)
	if c := lastColonBlank(s[:i]); c > 0 {
		r.Func = funcName(s[:c], sc)
	}
	rest := s[i+len(aDevice):]
	j := bytes.IndexByte(rest, ' ')
	if j <= 0 {
		return r, false
	}
	name := rest[:j]
	k := bytes.LastIndex(rest, []byte(" - "))
	if k < j {
		return r, false
	}
	free := rest[k+3:]
	n := leadingDigits(free)
	if len(n) == 0 || !bytes.HasPrefix(free[len(n):], []byte(" MiB free")) {
		return r, false
	}
	v, err := parseDecimal(n)
	if err != nil {
		return r, false
	}
	groups := bytes.TrimSpace(rest[j:k])
	last, before, ok := lastGroup(groups)
	if !ok {
		return r, false
	}
	desc, id := last, []byte(nil)
	if prev, more, ok := lastGroup(bytes.TrimSpace(before)); ok && len(prev) > 0 && len(bytes.TrimSpace(more)) == 0 {
		desc, id = prev, last
	}
	if string(id) == "unknown id" {
		id = nil
	}
	r.Kind, r.Name, r.Text, r.BufKind, r.MiB = KindDevice, sc.str(name), sc.str(desc), sc.str(id), v
	return r, true
}

// lastGroup splits "… (x (y))" into the inside of its last balanced
// parenthesised group, "x (y)", and what precedes the group. An empty b is
// no group (ok, all empty); a b that does not end in a balanced group is
// not ok.
func lastGroup(b []byte) (inside, before []byte, ok bool) {
	if len(b) == 0 {
		return nil, nil, true
	}
	if b[len(b)-1] != ')' {
		return nil, nil, false
	}
	depth := 0
	for i := len(b) - 1; i >= 0; i-- {
		switch b[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				return b[i+1 : len(b)-1], b[:i], true
			}
		}
	}
	return nil, nil, false
}
