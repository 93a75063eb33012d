package llamalog

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
)

// Kind is what a relevant llama.cpp or trace line says.
type Kind uint8

// Line kinds. A line of no kind is irrelevant to the split.
const (
	KindNone          Kind = iota
	KindBuffer             // "<func>: <name> <kind> buffer size = N MiB"
	KindEcho               // "~llama_context: <name> compute buffer size is|of ..."
	KindLoad               // "llama_model_loader: loaded meta data with ..."
	KindContext            // "llama_context: constructing llama_context"
	KindBuild              // a build/version line
	KindVerbosity          // "verbosity = N"
	KindDebugMarker        // a line only -v prints (docs/formats.md, "Loads, contexts, build and verbosity")
	KindTrace              // host-weight trace line with resident=
	KindBreakdownHead      // "memory breakdown [MiB]" table header
	KindBreakdownRow       // a row of that table
	KindOutputRealloc      // "output_reserve: reallocating output buffer"
	KindLegacy             // ≤ b1842 totals ("mem required", "VRAM used")
	KindSummary            // KV/RS summary lines ("KV self size", "size = ... cells"): never added
	KindMalformed          // a line that looked relevant but did not parse
	// Kinds added later keep the numbers above stable (persisted states).
	KindRole       // "loading draft model '<file>'": the next load's role (Text), Name the file
	KindRouter     // router: "spawning server instance with name=N on port P" (Text spawn, Int P), "stopping model instance name=N" (stop), "instance name=N exited" (exit)
	KindClip       // mmproj/CLIP: "CLIP using <dev> backend" (Text backend, Name dev), "model size: N MiB" (Text size, MiB)
	KindFitBracket // "fitting params to device memory" (Text start), "fitting params to free memory took" (Text end), "_fit_impl: projected to use" (Text projected)
	KindDevice     // "using device <dev> (<description>) (<id>) - N MiB free": Name dev, Text description, BufKind the id (a PCI address, "" when not printed), MiB the free memory
)

// Record is one parsed relevant line. Fields are set according to Kind.
type Record struct {
	Seq  uint64 `json:"seq"`
	Kind Kind   `json:"k"`
	// Buffer and echo lines.
	Func    string  `json:"fn,omitempty"`
	Name    string  `json:"name,omitempty"`
	BufKind string  `json:"bk,omitempty"` // model KV RS compute output input state, or the unknown word(s)
	MiB     float64 `json:"mib,omitempty"`
	// Echo: the expectation; Match is false for "does not match".
	Expect float64 `json:"exp,omitempty"`
	Match  bool    `json:"match,omitempty"`
	// Build lines: number (0 when unknown) and commit; verbosity: Int.
	Int  int64  `json:"int,omitempty"`
	Text string `json:"text,omitempty"`
	// Breakdown rows: the integers of the row in order.
	Ints []int64 `json:"ints,omitempty"`
	// Port is the llama-server router child's port the line was re-printed
	// under ("[port] " prefix), 0 for a line of no router child.
	Port int `json:"port,omitempty"`
}

// Parser classifies normalised lines. It is safe for concurrent use once
// built; the zero value is not usable, use NewParser.
type Parser struct {
	trace     *regexp.Regexp
	traceName *regexp.Regexp
	// traceAnchor is a literal every trace line contains ("" when the
	// pattern has no literal prefix: then every line is tried).
	traceAnchor []byte
	// traceNeedsMiB is true when the trace pattern is the default one,
	// whose lines always contain "MiB" (so the MiB anchor finds them).
	traceNeedsMiB bool
}

// DefaultTracePattern matches the resident size of the host-weight trace
// (docs/formats.md, "The host-weight trace"). Its one group is the size in MiB.
const DefaultTracePattern = `resident=([0-9]+(?:\.[0-9]+)?) ?MiB`

// DefaultTraceNamePattern matches the packed tensor's name in a trace line.
const DefaultTraceNamePattern = `name=(\S+)`

// NewParser builds a parser with the given host-weight trace patterns (""
// selects the default). Each pattern must compile and have exactly one group.
func NewParser(tracePattern, namePattern string) (*Parser, error) {
	if tracePattern == "" {
		tracePattern = DefaultTracePattern
	}
	if namePattern == "" {
		namePattern = DefaultTraceNamePattern
	}
	tr, err := compileOneGroup("trace_pattern", tracePattern)
	if err != nil {
		return nil, err
	}
	nm, err := compileOneGroup("trace_name_pattern", namePattern)
	if err != nil {
		return nil, err
	}
	lit, _ := tr.LiteralPrefix()
	return &Parser{trace: tr, traceName: nm, traceAnchor: []byte(lit), traceNeedsMiB: tracePattern == DefaultTracePattern}, nil
}

func compileOneGroup(key, p string) (*regexp.Regexp, error) {
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, &PatternError{Key: key, Pattern: p, Err: err}
	}
	if re.NumSubexp() != 1 {
		return nil, &PatternError{Key: key, Pattern: p, Err: errOneGroup}
	}
	return re, nil
}

// MustParser is NewParser with the default patterns.
func MustParser() *Parser {
	p, err := NewParser("", "")
	if err != nil {
		panic(err) // the defaults compile; a test guards this
	}
	return p
}

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
	aFitProjected = []byte("_fit_impl: projected to use")
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
	scanAnchors = [][]byte{aMiB, aLoadScan, aCtxScan, aDraft, aSpawn, aInstance, aClip, aClipCPU, aClipParam, aModelSize, aFit, aWarmup, aVRAMUsed, aMemReq}
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

// Parse classifies one normalised line (see Payload). It returns false for
// lines irrelevant to the split.
func (p *Parser) Parse(seq uint64, s []byte) (Record, bool) { return p.parse(seq, s, nil) }

// ParseWith is Parse with a Scratch (nil: none): with one, the strings of
// the record come from its cache, and a trace line's tensor name is left
// for sc.TakeTraceName instead of r.Name.
func (p *Parser) ParseWith(seq uint64, s []byte, sc *Scratch) (Record, bool) {
	return p.parse(seq, s, sc)
}

func (p *Parser) parse(seq uint64, s []byte, sc *Scratch) (Record, bool) {
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
		v, err := parseDecimal(m[1])
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
	return p.parseRest(r, s, sc)
}

// parseRest is parse past the trace check.
func (p *Parser) parseRest(r Record, s []byte, sc *Scratch) (Record, bool) {
	if i := bytes.Index(s, aBufferSize); i >= 0 {
		return parseBuffer(r, s, i, sc)
	}
	// Every other kind is told by the literals the line holds, found in
	// one pass (parsePlain in the tests searches for each in turn).
	m := literals(s)
	if m == 0 {
		return r, false
	}
	switch {
	case m.has(litBreakdown):
		return parseBreakdown(r, s, sc)
	case m.has(litLoad):
		r.Kind = KindLoad
		r.Func, r.Text = loadFile(s, sc)
		return r, true
	case m.has(litCtx):
		r.Kind = KindContext
		return r, true
	case m.has(litRealloc):
		r.Kind = KindOutputRealloc
		if m := reRealloc.FindSubmatch(s); m != nil {
			r.Expect, _ = parseDecimal(m[1])
			r.MiB, _ = parseDecimal(m[2])
		}
		return r, true
	case m.has(litDevice):
		if r, ok := parseDevice(r, s, sc); ok {
			return r, true
		}
	}
	if r, ok := parseMarker(r, s, m); ok {
		return r, true
	}
	if m.has(litBuild) || m.has(litVersion) {
		if b, ok := parseBuild(s); ok {
			r.Kind, r.Int, r.Text = KindBuild, b.number, b.text
			return r, true
		}
	}
	if m.has(litVerbosity) {
		i := bytes.Index(s, aVerbosity)
		v, err := strconv.ParseInt(string(leadingDigits(s[i+len(aVerbosity):])), 10, 64)
		if err == nil {
			r.Kind, r.Int = KindVerbosity, v
			return r, true
		}
	}
	if m.has(litMemReq) || m.has(litVRAMUsed) || m.has(litComputeTotal) {
		r.Kind = KindLegacy
		return r, true
	}
	if m.has(litKVSelf) || m.has(litCells) && m.has(litSizeEq) {
		r.Kind = KindSummary
		return r, true
	}
	if m&debugLits != 0 {
		r.Kind = KindDebugMarker
		return r, true
	}
	return r, false
}

// defaultTrace is DefaultTracePattern, `resident=([0-9]+(?:\.[0-9]+)?) ?MiB`,
// by hand: the leftmost match wins. FuzzDefaultTraceMatchesRegexp holds it
// to the regexp.
func defaultTrace(s []byte) (float64, bool) {
	for off := 0; ; {
		i := bytes.Index(s[off:], aResident)
		if i < 0 {
			return 0, false
		}
		b := s[off+i+len(aResident):]
		off += i + 1
		j := 0
		for j < len(b) && isDigit(b[j]) {
			j++
		}
		if j == 0 {
			continue
		}
		if j+1 < len(b) && b[j] == '.' && isDigit(b[j+1]) {
			j++
			for j < len(b) && isDigit(b[j]) {
				j++
			}
		}
		num := b[:j]
		rest := b[j:]
		if len(rest) > 0 && rest[0] == ' ' {
			rest = rest[1:]
		}
		if !bytes.HasPrefix(rest, aMiB) {
			continue
		}
		v, err := parseDecimal(num)
		if err != nil {
			continue // out of range: no figure
		}
		return v, true
	}
}

// traceNameTo returns a trace line's tensor name as r.Name: as a string
// without a scratch; with one, "" and the name left in sc.name (no string
// made).
func traceNameTo(sc *Scratch, name []byte) string {
	if sc == nil {
		return string(name)
	}
	if len(name) > 0 {
		sc.name = name
	}
	return ""
}

// traceName is DefaultTraceNamePattern, `name=(\S+)`, by hand (RE2's \s is
// [\t\n\f\r ]): the group, nil without a match.
func traceName(s []byte) []byte {
	for off := 0; ; {
		i := bytes.Index(s[off:], []byte("name="))
		if i < 0 {
			return nil
		}
		v := s[off+i+5:]
		off += i + 1
		j := 0
		for j < len(v) && v[j] != ' ' && v[j] != '\t' && v[j] != '\n' && v[j] != '\r' && v[j] != '\f' {
			j++
		}
		if j > 0 {
			return v[:j]
		}
	}
}

var reRealloc = regexp.MustCompile(`from size +([0-9.]+) MiB to +([0-9.]+) MiB`)

func leadingDigits(b []byte) []byte {
	i := 0
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return b[:i]
}

// parseBuffer parses "<func>: <name> <kind words> buffer size = N MiB" and
// the ~llama_context echo; i is the index of "buffer size". It allocates
// nothing for a line whose strings sc holds (parseBufferPlain is the
// plain form FuzzParseLeavesMatchPlain holds it to).
func parseBuffer(r Record, s []byte, i int, sc *Scratch) (Record, bool) {
	// The last ": " before "buffer size" ends the function name, so a
	// wrapper's own prefix ("Mar 12 07:01:05 host python[433748]: ",
	// "llama-cpp  | ") stays out of the buffer type.
	c := lastColonBlank(s[:i])
	if c <= 0 {
		r.Kind = KindMalformed
		return r, true
	}
	r.Func = funcName(s[:c], sc)
	name, kind, ok := bufferWords(s[c+2:i], sc)
	rest := s[i+len(aBufferSize):]
	if !ok {
		r.Kind = KindMalformed
		return r, true
	}
	r.Name, r.BufKind = name, kind
	if r.Name == "params" && r.BufKind == "backend" {
		// Old CLIP loaders: "clip_model_load: params backend buffer size
		// = 595.49 MB (377 tensors)", the mmproj weights (MB is MiB).
		v, ok := mibOrMB(bytes.TrimLeft(bytes.TrimLeft(rest, " ="), " "))
		if !ok {
			r.Kind = KindMalformed
			return r, true
		}
		r.Kind, r.Text, r.MiB, r.Name, r.BufKind = KindClip, "size", v, "", ""
		return r, true
	}
	rest = bytes.TrimLeft(rest, " ")
	switch {
	case bytes.HasPrefix(rest, []byte("= ")) || bytes.HasPrefix(rest, []byte("=")):
		v, ok := mibValue(bytes.TrimLeft(rest[1:], " "))
		if !ok {
			r.Kind = KindMalformed
			return r, true
		}
		r.Kind, r.MiB = KindBuffer, v
		if r.BufKind == "" {
			// ≤ b3989 "llm_load_tensors: CUDA0 buffer size": a model buffer.
			r.BufKind = "model"
		}
		return r, true
	case bytes.HasPrefix(rest, []byte("is ")) || bytes.HasPrefix(rest, []byte("of ")):
		a, e, match, ok := echoFigures(rest)
		if !ok {
			r.Kind = KindMalformed
			return r, true
		}
		av, err1 := parseDecimal(a)
		ev, err2 := parseDecimal(e)
		if err1 != nil || err2 != nil {
			r.Kind = KindMalformed
			return r, true
		}
		r.Kind, r.MiB, r.Expect, r.Match = KindEcho, av, ev, match
		return r, true
	}
	r.Kind = KindMalformed
	return r, true
}

// bufferWords splits the words before "buffer size" as strings.Fields
// would: the first is the name, the others joined by one blank the buffer
// type. ok is false when there is no word.
func bufferWords(b []byte, sc *Scratch) (name, kind string, ok bool) {
	if !isASCII(b) {
		// Unicode blanks: strings.Fields itself.
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return "", "", false
		}
		return f[0], strings.Join(f[1:], " "), true
	}
	i, j := nextField(b, 0)
	if i == j {
		return "", "", false
	}
	name = sc.str(b[i:j])
	from, to, n := 0, 0, 0 // the span of the other words, and their count
	single := true         // each separated from the next by one blank
	for k := j; ; {
		a, e := nextField(b, k)
		if a == e {
			break
		}
		if n == 0 {
			from = a
		} else if a != to+1 || b[to] != ' ' {
			single = false
		}
		to, k = e, e
		n++
	}
	switch {
	case n == 0:
	case single:
		kind = sc.str(b[from:to])
	default:
		var buf []byte
		if sc != nil {
			buf = sc.join[:0]
		}
		for k := from; ; {
			a, e := nextField(b, k)
			if a == e {
				break
			}
			if len(buf) > 0 {
				buf = append(buf, ' ')
			}
			buf = append(buf, b[a:e]...)
			k = e
		}
		if sc != nil {
			sc.join = buf
		}
		kind = sc.str(buf)
	}
	return name, kind, true
}

// echoFigures parses the rest of an echo line by hand, as the regexp
// `^(?:is|of) +([0-9.]+) MiB, (does not )?match(?:es)? expectation of
// +([0-9.]+) MiB` would (FuzzParseLeavesMatchPlain): the actual and the
// expected figure, and whether they match.
func echoFigures(b []byte) (actual, expect []byte, match, ok bool) {
	if len(b) < 2 || !(b[0] == 'i' && b[1] == 's' || b[0] == 'o' && b[1] == 'f') {
		return nil, nil, false, false
	}
	b = b[2:]
	figure := func() []byte {
		i := 0
		for i < len(b) && b[i] == ' ' {
			i++
		}
		if i == 0 {
			return nil
		}
		j := i
		for j < len(b) && (isDigit(b[j]) || b[j] == '.') {
			j++
		}
		if j == i || !bytes.HasPrefix(b[j:], []byte(" MiB")) {
			return nil
		}
		f := b[i:j]
		b = b[j+len(" MiB"):]
		return f
	}
	if actual = figure(); actual == nil || !bytes.HasPrefix(b, []byte(", ")) {
		return nil, nil, false, false
	}
	b = b[2:]
	match = !bytes.HasPrefix(b, []byte("does not "))
	if !match {
		b = b[len("does not "):]
	}
	if !bytes.HasPrefix(b, []byte("match")) {
		return nil, nil, false, false
	}
	b = b[len("match"):]
	if bytes.HasPrefix(b, []byte("es")) {
		b = b[2:]
	}
	if !bytes.HasPrefix(b, []byte(" expectation of")) {
		return nil, nil, false, false
	}
	b = b[len(" expectation of"):]
	if expect = figure(); expect == nil {
		return nil, nil, false, false
	}
	return actual, expect, match, true
}

// mibValue parses "N MiB" at the start of b.
func mibValue(b []byte) (float64, bool) {
	j := 0
	for j < len(b) && (isDigit(b[j]) || b[j] == '.') {
		j++
	}
	if j == 0 || !bytes.HasPrefix(bytes.TrimLeft(b[j:], " "), aMiB) {
		return 0, false
	}
	v, err := parseDecimal(b[:j])
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

type buildInfo struct {
	number int64
	text   string
}

var buildRes = []*regexp.Regexp{
	// version: 0.1.2-dev (build 10524, commit 9ee9fc04c)
	regexp.MustCompile(`version: (\S+) \(build (\d+), commit ([0-9a-f]+)\)`),
	// build: 4615 (bfcce4d6) with ... / print_info: build 9890 (74976e1ae) / main: build = 1500 (a30b324) / version: 4615 (bfcce4d6)
	regexp.MustCompile(`(?:^|[\s:])(?:build|version)(?::| =)? (\d+) \(([0-9a-f]+)\)`),
	// build_info: b7000-abc1234 / build      : b7000-abc1234
	regexp.MustCompile(`build(?:_info| +)?: b(\d+)-([0-9a-f]+)`),
	// old server JSON and ik_llama text
	regexp.MustCompile(`"build":(\d+),"commit":"([^"]*)"`),
	regexp.MustCompile(`build=(\d+) commit="([^"]*)"`),
}

// buildNeeds are literals each of buildRes needs in a line it matches: a
// line without them is not tried (most lines holding "build" are paths).
var buildNeeds = [][][]byte{
	{[]byte("version: "), []byte(" (build "), []byte(", commit ")},
	{[]byte(" ("), []byte(")")},
	{[]byte(": b"), []byte("-")},
	{[]byte(`"build":`), []byte(`,"commit":"`)},
	{[]byte("build="), []byte(` commit="`)},
}

func parseBuild(s []byte) (buildInfo, bool) {
next:
	for k, re := range buildRes {
		for _, lit := range buildNeeds[k] {
			if !bytes.Contains(s, lit) {
				continue next
			}
		}
		var m [][]byte
		if k == 1 {
			// The common form, by hand (buildNumber).
			if num, commit, ok := buildNumber(s); ok {
				m = [][]byte{nil, num, commit}
			}
		} else {
			m = re.FindSubmatch(s)
		}
		if m == nil {
			continue
		}
		if k == 0 {
			n, _ := strconv.ParseInt(string(m[2]), 10, 64)
			return buildInfo{n, "b" + string(m[2]) + " (" + string(m[3]) + ", " + string(m[1]) + ")"}, true
		}
		n, _ := strconv.ParseInt(string(m[1]), 10, 64)
		return buildInfo{n, "b" + string(m[1]) + " (" + string(m[2]) + ")"}, true
	}
	return buildInfo{}, false
}

// buildNumber is buildRes[1], `(?:^|[\s:])(?:build|version)(?::| =)?
// (\d+) \(([0-9a-f]+)\)`, by hand: the number and the commit of the
// leftmost match. FuzzParseLeavesMatchPlain holds it to the regexp.
func buildNumber(s []byte) (num, commit []byte, ok bool) {
	for i := 0; i < len(s); i++ {
		var j int
		switch {
		case s[i] == 'b' && bytes.HasPrefix(s[i:], aBuild):
			j = i + len(aBuild)
		case s[i] == 'v' && bytes.HasPrefix(s[i:], []byte("version")):
			j = i + len("version")
		default:
			continue
		}
		// What comes before: the start, a blank (RE2's \s) or a colon.
		if i > 0 {
			switch s[i-1] {
			case ' ', '\t', '\n', '\f', '\r', ':':
			default:
				continue
			}
		}
		// At most one of ":", " =" and nothing can be followed by " N".
		if j < len(s) && s[j] == ':' {
			j++
		} else if j+1 < len(s) && s[j] == ' ' && s[j+1] == '=' {
			j += 2
		}
		if j >= len(s) || s[j] != ' ' {
			continue
		}
		j++
		d := j
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j == d || j+1 >= len(s) || s[j] != ' ' || s[j+1] != '(' {
			continue
		}
		n := s[d:j]
		j += 2
		h := j
		for j < len(s) && (isDigit(s[j]) || s[j] >= 'a' && s[j] <= 'f') {
			j++
		}
		if j == h || j >= len(s) || s[j] != ')' {
			continue
		}
		return n, s[h:j], true
	}
	return nil, nil, false
}

// isBreakdownHead reports whether a normalised line is a memory-breakdown
// table's header.
func isBreakdownHead(s []byte) bool { return bytes.Contains(s, []byte("memory breakdown [MiB]")) }

// parseBreakdown parses a memory-breakdown table line (docs/formats.md, "The memory breakdown table").
// It allocates only the row's integers for a line whose strings sc holds
// (parseBreakdownPlain is the plain form FuzzParseLeavesMatchPlain holds
// it to).
func parseBreakdown(r Record, s []byte, sc *Scratch) (Record, bool) {
	if isBreakdownHead(s) {
		r.Kind = KindBreakdownHead
		return r, true
	}
	// "<func>: |   - <label> | a = b + (c = d + e + f) + g |": the second
	// and third of the |-separated parts, and at least four parts, counted
	// from the printer's name (a wrapper's prefix, "llama-1  | ", may hold
	// a '|' of its own).
	var part [3][]byte
	rest := fromBreakdown(s)
	for k := range part {
		i := bytes.IndexByte(rest, '|')
		if i < 0 {
			return r, false // not a table row: breakdown rows are never counted as skipped
		}
		part[k], rest = rest[:i], rest[i+1:]
	}
	label, cells := part[1], part[2]
	if isASCII(label) {
		label = trimASCIISpace(label)
		if len(label) > 0 && label[0] == '-' {
			label = trimASCIISpace(label[1:])
		}
		if i, j := nextField(label, 0); i < j {
			r.Name = sc.str(label[i:j])
		}
	} else {
		l := strings.TrimSpace(string(label))
		l = strings.TrimSpace(strings.TrimPrefix(l, "-"))
		if f := strings.Fields(l); len(f) > 0 {
			r.Name = f[0]
		}
	}
	// The integers: runs of '-' and digits (every other byte separates,
	// as every other rune does).
	var ints [7]int64
	n := 0
	for i := 0; i < len(cells); {
		if !isIntByte(cells[i]) {
			i++
			continue
		}
		j := i
		for j < len(cells) && isIntByte(cells[j]) {
			j++
		}
		v, ok := parseIntRun(cells[i:j])
		if !ok || n == len(ints) {
			return r, false
		}
		ints[n] = v
		n++
		i = j
	}
	if r.Name == "" || (n != 7 && n != 4) {
		return r, false // not a table row: breakdown rows are never counted as skipped
	}
	r.Ints = append([]int64(nil), ints[:n]...)
	r.Kind = KindBreakdownRow
	return r, true
}

// fromBreakdown is a breakdown line from its printer's name on (the whole
// line when it has none).
func fromBreakdown(s []byte) []byte {
	if i := bytes.Index(s, aBreakdown); i > 0 {
		return s[i:]
	}
	return s
}

func isIntByte(c byte) bool { return c == '-' || isDigit(c) }

// parseIntRun is strconv.ParseInt(string(b), 10, 64) for a run of '-' and
// digits, without the string: an optional '-' and up to 18 digits (which
// cannot overflow) by hand, anything longer by ParseInt.
func parseIntRun(b []byte) (int64, bool) {
	d := b
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 18 {
		v, err := strconv.ParseInt(string(b), 10, 64)
		return v, err == nil
	}
	var v int64
	for _, c := range d {
		if c == '-' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if len(d) < len(b) {
		v = -v
	}
	return v, true
}

// trimASCIISpace is strings.TrimSpace for ASCII bytes.
func trimASCIISpace(b []byte) []byte {
	for len(b) > 0 && asciiSpace[b[0]] {
		b = b[1:]
	}
	for len(b) > 0 && asciiSpace[b[len(b)-1]] {
		b = b[:len(b)-1]
	}
	return b
}

// funcName is the last blank-separated word of what precedes a line's
// first ": " (the C function; a wrapper's prefix goes).
func funcName(b []byte, sc *Scratch) string {
	e := len(b)
	for e > 0 && b[e-1] == ' ' {
		e--
	}
	j := e
	for j > 0 && b[j-1] != ' ' && b[j-1] != '\t' {
		j--
	}
	return sc.str(b[j:e])
}

// lastColonBlank is bytes.LastIndex(b, []byte(": ")) by a loop back from
// the end (the library's is a Rabin-Karp search for a two-byte separator).
func lastColonBlank(b []byte) int {
	for i := len(b) - 2; i >= 0; i-- {
		if b[i] == ':' && b[i+1] == ' ' {
			return i
		}
	}
	return -1
}

// mibOrMB parses "N MiB" or "N MB" at the start of b.
func mibOrMB(b []byte) (float64, bool) {
	j := 0
	for j < len(b) && (isDigit(b[j]) || b[j] == '.') {
		j++
	}
	rest := bytes.TrimLeft(b[j:], " ")
	if j == 0 || !(bytes.HasPrefix(rest, aMiB) || bytes.HasPrefix(rest, []byte("MB"))) {
		return 0, false
	}
	v, err := parseDecimal(b[:j])
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

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

// parseMarker classifies the lines that say which loads are live: a draft
// model's announcement, the router's spawn and stop lines, the mmproj/CLIP
// backend and weight size, and the --fit bracket. m is the literals s
// holds.
func parseMarker(r Record, s []byte, m litMask) (Record, bool) {
	switch {
	case m.has(litDraft):
		if m := reDraft.FindSubmatch(s); m != nil {
			r.Kind, r.Text, r.Name = KindRole, "draft", string(m[1])
			return r, true
		}
	case m.has(litSpawn):
		if m := reSpawn.FindSubmatch(s); m != nil {
			p, err := strconv.ParseInt(string(m[2]), 10, 32)
			if err == nil {
				r.Kind, r.Text, r.Name, r.Int = KindRouter, "spawn", string(m[1]), p
				return r, true
			}
		}
	case m.has(litInstance):
		if m := reStop.FindSubmatch(s); m != nil {
			r.Kind, r.Text, r.Name = KindRouter, "stop", string(m[1])
			return r, true
		}
		if m := reExited.FindSubmatch(s); m != nil {
			r.Kind, r.Text, r.Name = KindRouter, "exit", string(m[1])
			return r, true
		}
	case m.has(litClip):
		if m := reClipDev.FindSubmatch(s); m != nil {
			r.Kind, r.Text, r.Name = KindClip, "backend", string(m[1])
			return r, true
		}
	case m.has(litClipCPU):
		// "clip_model_load: Main model doesn't offload, fallback to CPU backend"
		r.Kind, r.Text, r.Name = KindClip, "backend", "CPU"
		return r, true
	case m.has(litModelSize):
		if m := reClipMiB.FindSubmatch(s); m != nil {
			v, err := parseDecimal(m[2])
			if err == nil {
				r.Kind, r.Text, r.Func, r.MiB = KindClip, "size", string(m[1]), v
				return r, true
			}
		}
	case m.has(litFit):
		switch {
		case bytes.Contains(s, []byte("fitting params to device memory")):
			r.Kind, r.Text = KindFitBracket, "start"
			return r, true
		case bytes.Contains(s, []byte("fitting params to free memory took")):
			r.Kind, r.Text = KindFitBracket, "end"
			return r, true
		}
	case m.has(litFitProjected):
		// The fit's projection follows its dry runs; where no bracket
		// start was printed, it closes one around them (package split's
		// reader).
		r.Kind, r.Text = KindFitBracket, "projected"
		return r, true
	case m.has(litWarmup):
		// At the default verbosity the bracket's end line is not printed;
		// the warm-up runs after the real load and context, so it ends an
		// open bracket too.
		r.Kind, r.Text = KindFitBracket, "end"
		return r, true
	}
	return r, false
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
