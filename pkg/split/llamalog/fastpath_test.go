package llamalog

import (
	"bytes"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gttsplit/gttsplit/internal/perftest"
)

// The plain forms of the allocation-free parsing and folding steps: what
// they replaced, kept here as the reference the fuzz targets below hold
// them to.

// bufferWordsPlain is bufferWords with strings.Fields.
func bufferWordsPlain(b []byte) (name, kind string, ok bool) {
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "", "", false
	}
	return f[0], strings.Join(f[1:], " "), true
}

var reEcho = regexp.MustCompile(`^(?:is|of) +([0-9.]+) MiB, (does not )?match(?:es)? expectation of +([0-9.]+) MiB`)

// parseBreakdownPlain is parseBreakdown with bytes.Split, strings.Fields
// and strings.FieldsFunc.
func parseBreakdownPlain(r Record, s []byte) (Record, bool) {
	if isBreakdownHead(s) {
		r.Kind = KindBreakdownHead
		return r, true
	}
	if i := bytes.Index(s, aBreakdown); i >= 0 {
		s = s[i:]
	}
	parts := bytes.Split(s, []byte("|"))
	if len(parts) < 4 {
		return r, false
	}
	label := strings.TrimSpace(string(parts[1]))
	label = strings.TrimSpace(strings.TrimPrefix(label, "-"))
	if f := strings.Fields(label); len(f) > 0 {
		r.Name = f[0]
	}
	for _, f := range strings.FieldsFunc(string(parts[2]), func(c rune) bool { return !(c == '-' || c >= '0' && c <= '9') }) {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return r, false
		}
		r.Ints = append(r.Ints, v)
	}
	if r.Name == "" || (len(r.Ints) != 7 && len(r.Ints) != 4) {
		return r, false
	}
	r.Kind = KindBreakdownRow
	return r, true
}

// FuzzParseLeavesMatchPlain holds the allocation-free parsing steps to
// their plain forms on any line: the buffer words, the echo figures, the
// breakdown rows, the literals a build pattern needs, the literals the
// chain of kinds is told by and "buffer size" (and parse to parsePlain);
// and a parse with a fold's scratch (its string cache shared by every
// input, so entries are replaced and hit across lines) to a parse without
// one.
func FuzzParseLeavesMatchPlain(f *testing.F) {
	addLineSeeds(f)
	for _, s := range []string{
		"f: CPU  KV\tbuffer size = 1 MiB", "f: a  b   c buffer size = 1 MiB", "f:  \u00a0x\u2003y buffer size = 2 MiB",
		"~llama_context: CPU compute buffer size of 1.5 MiB, does not matches expectation of 2. MiB",
		"~llama_context: CPU compute buffer size is  1.5 MiB, match expectation of   ..9 MiB tail",
		"breakdown_print: |   - \u00a0X (Y) | 1 = 2 + (3 = 4 + 5 + 6) + -7 |",
		"breakdown_print: | - - Host | 1 = 2 + 3 + 4 | |", "breakdown_print: |\v-\tA|1\u20032 3 4|",
		"breakdown_print: | - A | 99999999999999999999 = 1 + 2 + 3 |",
		"sched_reserve: reserving ...", "llama_context: reserving a graph for ubatch with n_tokens = 512",
		"llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers",
		"alloc_tensor_range: failed to allocate ROCm0 buffer of size 851222528", "GGML_ASSERT(buffer) failed",
		"llama_model_load: error loading model: Failed to allocate  buffer",
		"llama_params_fit: projected to use 1234 MiB of device memory vs. a total of 5678 MiB",
		"llama_params_fit_impl: projected memory use with initial parameters [MiB]:",
		"llama_params_fit_impl: getting device memory data for initial parameters:",
		"llama_kv_cache: AMD Radeon RX 5600 XT KV buffer size = 1.00 MiB",
		"load_tensors: AMD Radeon RX 5600 XT model buffer size = 2.00 MiB", "f: Intel(R) Arc(TM) A770 Graphics compute buffer size = 3 MiB",
		"load_tensors:        ROCm0 model buffer size =     1.50 GiB", "f: CPU KV buffer size = .5 kB", "f: the buffer size is chosen", "f: x buffer size =",
	} {
		f.Add([]byte(s))
	}
	for i, a := range lits {
		b := lits[(i+1)%len(lits)]
		f.Add([]byte("f: x " + string(a) + " " + string(b[:len(b)/2]) + string(a[1:]) + string(b)))
	}
	p := MustParser()
	sc := &Scratch{}
	f.Fuzz(func(t *testing.T, line []byte) {
		var scratch []byte
		s := Payload(line, &scratch)

		if i := bytes.Index(s, aBufferSize); i >= 0 {
			if c := bytes.LastIndex(s[:i], []byte(": ")); c > 0 {
				n, k, ok := bufferWords(s[c+2:i], sc)
				pn, pk, pok := bufferWordsPlain(s[c+2 : i])
				if n != pn || k != pk || ok != pok {
					t.Fatalf("%q: words %q %q %v, plain %q %q %v", s, n, k, ok, pn, pk, pok)
				}
			}
		}
		for i := 0; i <= len(s); i++ {
			// The echo's rest starts with "is" or "of": try each such
			// start, and the line's.
			if i > 0 && !bytes.HasPrefix(s[i:], []byte("is")) && !bytes.HasPrefix(s[i:], []byte("of")) {
				continue
			}
			a, e, match, ok := echoFigures(s[i:])
			m := reEcho.FindSubmatch(s[i:])
			if ok != (m != nil) || ok && (!bytes.Equal(a, m[1]) || !bytes.Equal(e, m[3]) || match != (len(m[2]) == 0)) {
				t.Fatalf("%q: echo %q %q %v %v, regexp %q", s[i:], a, e, match, ok, m)
			}
		}
		for k, re := range buildRes {
			if re.Match(s) {
				requireBuildNeeds(t, k, s)
			}
		}
		for _, b := range [][]byte{s, line} {
			n, c, ok := buildNumber(b)
			m := buildRes[1].FindSubmatch(b)
			if ok != (m != nil) || ok && (!bytes.Equal(n, m[1]) || !bytes.Equal(c, m[2])) {
				t.Fatalf("%q: build %q %q %v, regexp %q", b, n, c, ok, m)
			}
		}
		r, ok := parseBreakdown(Record{Seq: 3}, s, sc)
		pr, pok := parseBreakdownPlain(Record{Seq: 3}, s)
		if ok != pok || ok && !reflect.DeepEqual(r, pr) {
			t.Fatalf("%q: breakdown %+v %v, plain %+v %v", s, r, ok, pr, pok)
		}

		// The literals found in one pass are those a search for each
		// finds, and the chain told by them gives what the chain of
		// searches gives, on the message and on the raw line.
		for _, b := range [][]byte{s, line} {
			var want litMask
			for id, a := range lits {
				if bytes.Contains(b, a) {
					want |= 1 << id
				}
			}
			if got := literals(b); got != want {
				t.Fatalf("%q: literals %b, searched %b", b, got, want)
			}
			if got, want := indexBufferSize(b), bytes.Index(b, aBufferSize); got != want {
				t.Fatalf("%q: buffer size at %d, searched %d", b, got, want)
			}
			r, ok := p.parse(7, b, nil)
			pr, pok := p.parsePlain(7, b, nil)
			if ok != pok || ok && !reflect.DeepEqual(r, pr) {
				t.Fatalf("%q: parse %+v %v, plain %+v %v", b, r, ok, pr, pok)
			}
		}

		r, ok = p.ParseWith(7, s, sc)
		name := sc.TakeTraceName()
		pr, pok = p.parse(7, s, nil)
		if ok && r.Kind == KindTrace {
			if r.Name != "" || string(name) != pr.Name {
				t.Fatalf("%q: trace name %q (record %q), plain %q", s, name, r.Name, pr.Name)
			}
			r.Name = pr.Name
		} else if name != nil {
			t.Fatalf("%q: a trace name %q left by a %v line", s, name, r.Kind)
		}
		if ok != pok || ok && !reflect.DeepEqual(r, pr) {
			t.Fatalf("%q: with scratch %+v %v, without %+v %v", s, r, ok, pr, pok)
		}
	})
}

// TestParseScratchSameRecords: folding the fixtures with the fold's
// scratch gives the records a parse without one gives, line by line.
func TestParseScratchSameRecords(t *testing.T) {
	p := MustParser()
	sc := &Scratch{}
	n := 0
	for _, glob := range []string{"runs/*/split.log", "logs/*.log"} {
		for _, l := range perftest.FixtureLines(t, glob, 1<<20) {
			var scratch []byte
			s := Payload([]byte(l), &scratch)
			r, ok := p.ParseWith(1, s, sc)
			name := sc.TakeTraceName()
			want, wok := p.Parse(1, s)
			if ok && r.Kind == KindTrace {
				if string(name) != want.Name {
					t.Fatalf("%q: trace name %q, want %q", l, name, want.Name)
				}
				r.Name = want.Name
			}
			if ok != wok || !reflect.DeepEqual(r, want) {
				t.Fatalf("%q: %+v %v, want %+v %v", l, r, ok, want, wok)
			}
			if ok {
				n++
			}
		}
	}
	if n < 500 {
		t.Fatalf("only %d relevant fixture lines", n)
	}
}

// stripANSIPlain is stripANSI byte by byte.
func stripANSIPlain(dst, src []byte) []byte {
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c != 0x1b {
			dst = append(dst, c)
			continue
		}
		if i+1 < len(src) && src[i+1] == '[' {
			j := i + 2
			for j < len(src) && (src[j] < 0x40 || src[j] > 0x7e) {
				j++
			}
			i = j // skip the final byte too
			continue
		}
		i++ // ESC + one byte
	}
	return dst
}

// FuzzStripANSIMatchesPlain holds the run-at-a-time stripANSI to the byte
// by byte form.
func FuzzStripANSIMatchesPlain(f *testing.F) {
	for _, l := range perftest.FixtureLines(f, "runs/4b/split.log", 200) {
		f.Add([]byte(l))
	}
	for _, s := range []string{"\x1b", "a\x1b", "a\x1b[", "a\x1b[1", "\x1b[0m\x1b[1;33mx\x1bqy\x1b\x1b[m", "\x1b[\x7fz"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		got := stripANSI([]byte("pre"), line)
		want := stripANSIPlain([]byte("pre"), line)
		if !bytes.Equal(got, want) {
			t.Fatalf("%q: %q, plain %q", line, got, want)
		}
	})
}

// TestBuildNeedsAreNeeded: a line each build pattern matches holds the
// literals parseBuild looks for before trying it (so skipping a line
// without them loses nothing). FuzzParseLeavesMatchPlain checks the same
// on every input.
func TestBuildNeedsAreNeeded(t *testing.T) {
	for _, s := range []string{
		"version: 0.1.2-dev (build 10524, commit 9ee9fc04c)", "build: 4615 (bfcce4d6) with cc", "print_info: build 9890 (74976e1ae)",
		"main: build = 1500 (a30b324)", "version: 4615 (bfcce4d6)", "build_info: b7000-abc1234", "build      : b7000-abc1234",
		`{"build":1,"commit":"x"}`, `build=3 commit="y"`,
	} {
		matched := false
		for k, re := range buildRes {
			if re.MatchString(s) {
				matched = true
				requireBuildNeeds(t, k, []byte(s))
			}
		}
		if !matched {
			t.Fatalf("%q: no build pattern matches", s)
		}
		if _, ok := parseBuild([]byte(s)); !ok {
			t.Fatalf("%q: not parsed", s)
		}
	}
}

func requireBuildNeeds(t *testing.T, k int, s []byte) {
	t.Helper()
	for _, lit := range buildNeeds[k] {
		if !bytes.Contains(s, lit) {
			t.Fatalf("%q matches build pattern %d but lacks %q", s, k, lit)
		}
	}
}

// parsePlain is parse as it was before the literals were found in one
// pass: a substring search for each, in the order of the chain.
func (p *Parser) parsePlain(seq uint64, s []byte, sc *Scratch) (Record, bool) {
	r := Record{Seq: seq}
	if sc != nil {
		sc.name = nil
	}
	if p.traceNeedsMiB {
		if v, ok := defaultTrace(s); ok {
			r.Kind, r.MiB = KindTrace, v
			r.Name = traceNameTo(sc, traceName(s))
			return r, true
		}
	} else if len(p.traceAnchor) > 0 && !bytes.Contains(s, p.traceAnchor) {
		// not a trace line: skip the regexp
	} else if m := p.trace.FindSubmatch(s); m != nil {
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil || v < 0 {
			r.Kind = KindMalformed
			return r, true
		}
		r.Kind, r.MiB = KindTrace, v
		if n := p.traceName.FindSubmatch(s); n != nil {
			r.Name = traceNameTo(sc, n[1])
		}
		return r, true
	}
	if i := bytes.Index(s, aBufferSize); i >= 0 {
		return parseBuffer(r, s, i, sc)
	}
	switch {
	case bytes.Contains(s, aBreakdown):
		return parseBreakdown(r, s, sc)
	case bytes.Contains(s, aLoad):
		r.Kind = KindLoad
		r.Func, r.Text = loadFile(s, sc)
		return r, true
	case bytes.Contains(s, aCtx):
		r.Kind = KindContext
		return r, true
	case bytes.Contains(s, []byte("output_reserve: reallocating output buffer")):
		r.Kind = KindOutputRealloc
		if m := reRealloc.FindSubmatch(s); m != nil {
			r.Expect, _ = strconv.ParseFloat(string(m[1]), 64)
			r.MiB, _ = strconv.ParseFloat(string(m[2]), 64)
		}
		return r, true
	case bytes.Contains(s, aDevice):
		if r, ok := parseDevice(r, s, sc); ok {
			return r, true
		}
	case bytes.Contains(s, aReserve):
		if r, ok := readReserve(r, s, sc); ok {
			return r, true
		}
	}
	if bytes.Contains(s, aFailed) || bytes.Contains(s, aFailedCap) || bytes.Contains(s, aAssertBuffer) {
		if r, ok := readFailure(r, s, sc); ok {
			return r, true
		}
	}
	if r, ok := parseMarkerPlain(r, s); ok {
		return r, true
	}
	if bytes.Contains(s, aBuild) || bytes.Contains(s, aVersion) {
		if b, ok := parseBuild(s); ok {
			r.Kind, r.Int, r.Text = KindBuild, b.number, b.text
			return r, true
		}
	}
	if i := bytes.Index(s, aVerbosity); i >= 0 {
		v, err := strconv.ParseInt(string(leadingDigits(s[i+len(aVerbosity):])), 10, 64)
		if err == nil {
			r.Kind, r.Int = KindVerbosity, v
			return r, true
		}
	}
	if bytes.Contains(s, aMemReq) || bytes.Contains(s, aVRAMUsed) ||
		bytes.Contains(s, []byte("compute buffer total size")) {
		r.Kind = KindLegacy
		return r, true
	}
	if bytes.Contains(s, []byte("KV self size")) || bytes.Contains(s, []byte(" cells")) && bytes.Contains(s, []byte("size = ")) {
		r.Kind = KindSummary
		return r, true
	}
	if isDebugMarker(s) {
		r.Kind = KindDebugMarker
		return r, true
	}
	return r, false
}

// parseMarkerPlain is the grammar's class of markers (readDraft ...
// readWarmup) as a substring search for each marker:
// it classifies the lines that say which loads are live: a draft
// model's announcement, the router's spawn and stop lines, the mmproj/CLIP
// backend and weight size, and the --fit bracket.
func parseMarkerPlain(r Record, s []byte) (Record, bool) {
	switch {
	case bytes.Contains(s, aDraft):
		if m := reDraft.FindSubmatch(s); m != nil {
			r.Kind, r.Text, r.Name = KindRole, "draft", string(m[1])
			return r, true
		}
	case bytes.Contains(s, aSpawn):
		if m := reSpawn.FindSubmatch(s); m != nil {
			p, err := strconv.ParseInt(string(m[2]), 10, 32)
			if err == nil {
				r.Kind, r.Text, r.Name, r.Int = KindRouter, "spawn", string(m[1]), p
				return r, true
			}
		}
	case bytes.Contains(s, aInstance):
		if m := reStop.FindSubmatch(s); m != nil {
			r.Kind, r.Text, r.Name = KindRouter, "stop", string(m[1])
			return r, true
		}
		if m := reExited.FindSubmatch(s); m != nil {
			r.Kind, r.Text, r.Name = KindRouter, "exit", string(m[1])
			return r, true
		}
	case bytes.Contains(s, aClip):
		if m := reClipDev.FindSubmatch(s); m != nil {
			r.Kind, r.Text, r.Name = KindClip, "backend", string(m[1])
			return r, true
		}
	case bytes.Contains(s, aClipCPU):
		// "clip_model_load: Main model doesn't offload, fallback to CPU backend"
		r.Kind, r.Text, r.Name = KindClip, "backend", "CPU"
		return r, true
	case bytes.Contains(s, aModelSize):
		if m := reClipMiB.FindSubmatch(s); m != nil {
			v, err := strconv.ParseFloat(string(m[2]), 64)
			if err == nil {
				r.Kind, r.Text, r.Func, r.MiB = KindClip, "size", string(m[1]), v
				return r, true
			}
		}
	case bytes.Contains(s, aFit) || bytes.Contains(s, aFitData):
		switch {
		case bytes.Contains(s, []byte("fitting params to device memory")), bytes.Contains(s, []byte("getting device memory data for initial parameters")):
			r.Kind, r.Text = KindFitBracket, "start"
			return r, true
		case bytes.Contains(s, []byte("fitting params to free memory took")):
			r.Kind, r.Text = KindFitBracket, "end"
			return r, true
		}
	case bytes.Contains(s, aFitProjected) || bytes.Contains(s, aFitInitial):
		return readFitProjected(r, s, nil)
	case bytes.Contains(s, aWarmup):
		// At the default verbosity the bracket's end line is not printed;
		// the warm-up runs after the real load and context, so it ends an
		// open bracket too.
		r.Kind, r.Text = KindFitBracket, "end"
		return r, true
	}
	return r, false
}

// FuzzParseDecimalMatches holds parseDecimal to strconv.ParseFloat: the
// same value, and an error for the same inputs.
func FuzzParseDecimalMatches(f *testing.F) {
	for _, s := range []string{"0", "304.4", "0.00", "1.", ".5", "1.2.3", "999999999999999", "9999999999999999",
		"123456789.123456", "0.000000000000001", "1e5", "-1", "+2", "inf", "0x1p3", "1_0", "", "."} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseDecimal(b)
		w, werr := strconv.ParseFloat(string(b), 64)
		// Bit for bit: NaN (which ParseFloat takes as it stands) equals
		// itself, and a zero keeps its sign.
		if (err == nil) != (werr == nil) || err == nil && math.Float64bits(v) != math.Float64bits(w) {
			t.Fatalf("%q: %v %v, ParseFloat %v %v", b, v, err, w, werr)
		}
	})
}

// FuzzParseIntRunMatches holds parseIntRun to strconv.ParseInt on the
// runs of '-' and digits it is given: the same value, and a failure for
// the same runs.
func FuzzParseIntRunMatches(f *testing.F) {
	for _, s := range []string{"0", "-0", "98304", "-1", "--1", "1-", "-", "1-2", "999999999999999999", "9223372036854775807",
		"9223372036854775808", "-9223372036854775808", "-9223372036854775809", "0000000000000000000001", "-000"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range b {
			if !isIntByte(c) {
				t.Skip("parseIntRun is given runs of '-' and digits")
			}
		}
		if len(b) == 0 {
			t.Skip()
		}
		v, ok := parseIntRun(b)
		w, err := strconv.ParseInt(string(b), 10, 64)
		if ok != (err == nil) || ok && v != w {
			t.Fatalf("%q: %d %v, ParseInt %d %v", b, v, ok, w, err)
		}
	})
}

// funcNamePlain is funcName with bytes.TrimRight, bytes.LastIndexAny and
// a regexp.
func funcNamePlain(b []byte) string {
	b = bytes.TrimRight(b, " ")
	if j := bytes.LastIndexAny(b, " \t"); j >= 0 {
		b = b[j+1:]
	}
	if m := reFuncIdent.Find(b); m != nil {
		return string(m)
	}
	return string(b)
}

var reFuncIdent = regexp.MustCompile(`~?[A-Za-z_][A-Za-z0-9_]*$`)

// FuzzEnvelopeStepsMatchPlain holds the hand-written steps of the envelope
// and of the buffer lines to their library forms: the tag, the function
// name, the last ": ".
func FuzzEnvelopeStepsMatchPlain(f *testing.F) {
	addLineSeeds(f)
	for _, s := range []string{"cmn  f: x", "srv x: ", "slot  a b: c", "que   q: r", "c", "sl", "f: a: b", " \tx  ", ": "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := trimTag(b), trimKnownTag(b); !bytes.Equal(got, want) || len(got) != len(want) {
			t.Fatalf("%q: tag %q, plain %q", b, got, want)
		}
		if got, want := funcName(b, nil), funcNamePlain(b); got != want {
			t.Fatalf("%q: func %q, plain %q", b, got, want)
		}
		if got, want := lastColonBlank(b), bytes.LastIndex(b, []byte(": ")); got != want {
			t.Fatalf("%q: last %d, plain %d", b, got, want)
		}
	})
}

// literals returns which of the grammar's literals s holds (both tables).
func literals(s []byte) litMask { return litTab.find(s) | debugLitTab.find(s) }

// FuzzPayloadMatchesPlain holds Payload, which reads llama.cpp's coloured
// prefix in place, to payloadPlain, which removes every colour code first.
func FuzzPayloadMatchesPlain(f *testing.F) {
	addLineSeeds(f)
	for _, s := range []string{
		"\x1b[34m0.00.035.322\x1b[0m \x1b[32mI \x1b[0mllama_context: x",
		"\x1b[0m\x1b[34m0.00.035.322\x1b[0m \x1b[33mD hrx: a\r\n",
		"\x1b[34m0.00.035.322\x1b[0m \x1b[32mI \x1b[0m\r",
		"\x1b[34m0.00.035.322\x1b[0m \x1b[32mI \x1b[0m[0m x",
		"\x1b[34m0.00.035.322\x1b[0m \x1b[32mI \x1b[0m\x1b[1mx\x1b[0m",
		"\x1b[34m0.00.035.322\x1b[0m \x1b[32mI ", "\x1b[34m0.00.035.322 X x", "\x1b[3", "\x1bq0.00.035.322 I x",
		"\x1b[34m0.00.035.322\x1b[0m \x1b[32mI \x1b[0m0.00.035.323 W [ 8080] cmn  f: m",
		"...\x1b[34m0.00.670.828\x1b[0m \x1b[33mD hrx: a", "..\x1b[0m.hrx: a", ".\x1b[0m\xef\xbb\xbf[ 8080] x",
		"..\x1b[0m  .. 0.00.035.322 I x", ".\x1b[0m[1234567890] 0.00.035.322 I x", "...\x1b[0m", ".",
		"\x1b[34m12345678901.00.035.322\x1b[0m \x1b[32mI \x1b[0mx", "\x1b[34m1234567890.00.035.322\x1b[0m \x1b[32mI \x1b[0mx",
		"\x1b[34m0.00.035.322\x1b[0m \x1b[32mI\x1b[0m x", "\x1b[34m0.00.035.322 \x1b[32mW \x1b[0m", "\x1b[34m0.00.035.322\x1b[0m\x1b[1m \x1b[32mE \x1b[0m[0mx",
		"\x1b[34m0.00.035.32\x1b[0m \x1b[32mI \x1b[0mx", "\x1b[34m0.00.035.322\x1b[0m \x1b[32mX \x1b[0mx", "\x1b[34m0.00.035.322\x1b[0m  \x1b[32mI \x1b[0mx",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var a, b []byte
		got := Payload(line, &a)
		want := payloadPlain(line, &b)
		if !bytes.Equal(got, want) || len(got) != len(want) {
			t.Fatalf("%q: %q, plain %q", line, got, want)
		}
	})
}
