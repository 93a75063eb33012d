package llamalog

import (
	"regexp"
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
	KindReserve    // "sched_reserve: reserving ...": a compute reservation of the current context starts
	KindFailure    // something failed (see readFailure): BufKind what (context, mmproj, tensors, compute), Name the buffer type when printed, Func the function, Text the message
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

// Parse classifies one normalised line (see Payload). It returns false for
// lines irrelevant to the split.
func (p *Parser) Parse(seq uint64, s []byte) (Record, bool) { return p.parse(seq, s, nil) }

// ParseWith is Parse with a Scratch (nil: none): with one, the strings of
// the record come from its cache, and a trace line's tensor name is left
// for sc.TakeTraceName instead of r.Name.
func (p *Parser) ParseWith(seq uint64, s []byte, sc *Scratch) (Record, bool) {
	return p.parse(seq, s, sc)
}

// parse is the grammar's loop: the steps a message is classified by, in
// order, each calling the one method that reads a record of its kind.
//
//  1. A host-weight trace line (readTrace), by the trace pattern.
//  2. A buffer line or its echo (parseBuffer), by "buffer size".
//  3. Every other kind by the literals the message holds, found in one
//     pass (literals; parsePlain in the tests searches for each in
//     turn), through the rules of grammar; the -v markers' literals only
//     when the rules before theirs read nothing.
func (p *Parser) parse(seq uint64, s []byte, sc *Scratch) (Record, bool) {
	r := Record{Seq: seq}
	if sc != nil {
		sc.name = nil
	}
	if p.readTrace(&r, s, sc) {
		return r, true
	}
	if i := indexBufferSize(s); i >= 0 {
		return parseBuffer(r, s, i, sc)
	}
	m := litTab.find(s)
	debug := false // m holds the -v markers' literals
	for c := range grammar {
		if !debug && grammarLits[c]&debugLits != 0 {
			m, debug = m|debugLitTab.find(s), true
		}
		if m&grammarLits[c] == 0 {
			continue
		}
		for k := range grammar[c] {
			u := &grammar[c][k]
			if !u.applies(m) {
				continue
			}
			if r, ok := u.read(r, s, sc); ok || u.final {
				return r, ok
			}
			break // one rule of a class reads a message: on to the next class
		}
	}
	return r, false
}

// A rule is one row of the grammar: a message it applies to (one holding
// any of the literals anyOf, and all of allOf) is read by read into a
// record of one kind. A message read reports false (its shape is not the
// kind's) goes on to the next class of rules, or, for a final rule, is
// irrelevant.
type rule struct {
	anyOf, allOf litMask
	read         func(r Record, s []byte, sc *Scratch) (Record, bool)
	final        bool
}

func (u rule) applies(m litMask) bool {
	return (u.anyOf == 0 || m&u.anyOf != 0) && m&u.allOf == u.allOf
}

// lit is the mask of the literals ids.
func lit(ids ...int) litMask {
	var m litMask
	for _, id := range ids {
		m |= 1 << id
	}
	return m
}

// grammar is every kind of line told by its literals, as classes of rules
// tried in order; of a class, only the first rule that applies reads the
// message. A new kind of line is a rule here (its literal in literals.go,
// its read method in the file of its kind).
var grammar = [...][]rule{
	// Told at once by their literal (breakdown.go, markers.go).
	{
		{anyOf: lit(litBreakdown), read: parseBreakdown, final: true},
		{anyOf: lit(litLoad), read: readLoad},
		{anyOf: lit(litCtx), read: readContext},
		{anyOf: lit(litRealloc), read: readRealloc},
		{anyOf: lit(litDevice), read: parseDevice},
		{anyOf: lit(litReserve), read: readReserve},
	},
	// What failed: a context's creation, an mmproj's load, a buffer's
	// allocation (failure.go).
	{{anyOf: lit(litFailed, litFailedCap, litAssertBuffer), read: readFailure}},
	// Which loads are live: a draft model, the router's instances,
	// mmproj/CLIP and the --fit bracket (markers.go).
	{
		{anyOf: lit(litDraft), read: readDraft},
		{anyOf: lit(litSpawn), read: readSpawn},
		{anyOf: lit(litInstance), read: readInstance},
		{anyOf: lit(litClip), read: readClipBackend},
		{anyOf: lit(litClipCPU), read: readClipCPU},
		{anyOf: lit(litModelSize), read: readClipSize},
		{anyOf: lit(litFit, litFitData), read: readFit},
		{anyOf: lit(litFitProjected, litFitInitial), read: readFitProjected},
		{anyOf: lit(litWarmup), read: readWarmup},
	},
	// The build and the verbosity (build.go).
	{{anyOf: lit(litBuild, litVersion), read: readBuild}},
	{{anyOf: lit(litVerbosity), read: readVerbosity}},
	// Counted, never added: the pre-b1843 totals and the KV/RS summaries.
	{{anyOf: lit(litMemReq, litVRAMUsed, litComputeTotal), read: readLegacy}},
	{
		{anyOf: lit(litKVSelf), read: readSummary},
		{allOf: lit(litCells, litSizeEq), read: readSummary},
	},
	// A line only -v prints.
	{{anyOf: debugLits, read: readDebugMarker}},
}

// grammarLits are the literals each class of grammar looks at: a message
// holding none of them skips the class.
var grammarLits = func() (lits [len(grammar)]litMask) {
	for c, class := range grammar {
		for _, u := range class {
			lits[c] |= u.anyOf | u.allOf
		}
	}
	return lits
}()

func leadingDigits(b []byte) []byte {
	i := 0
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return b[:i]
}
