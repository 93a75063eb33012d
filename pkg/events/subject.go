package events

import (
	"fmt"
	"hash/fnv"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
)

// Kind is the second token of a subject: what the events on it are about.
type Kind string

// Subject kinds.
const (
	KindRun    Kind = "run"    // run started and run finished
	KindLog    Kind = "log"    // log lines
	KindFDInfo Kind = "fdinfo" // fdinfo samples
	KindSplit  Kind = "split"  // splits published by the aggregator
	KindDLQ    Kind = "dlq"    // events a consumer gave up on
)

// SubjectRoot is the first token of every subject, and StreamSubjects the
// subject filter of the JetStream stream that holds them all.
const (
	SubjectRoot    = "gttsplit"
	StreamSubjects = SubjectRoot + ".>"
)

// MaxTokenBytes is the longest token Token returns.
const MaxTokenBytes = 64

// Subject returns gttsplit.<kind>.<host>.<lane>.<runid>, each of host, lane
// and runID passed through Token.
func Subject(kind Kind, host, lane, runID string) string {
	return SubjectRoot + "." + string(kind) + "." + Token(host) + "." + Token(lane) + "." + Token(runID)
}

// KindOf returns the subject kind of an event type.
func KindOf(typ string) (Kind, error) {
	switch typ {
	case TypeRunStarted, TypeRunFinished:
		return KindRun, nil
	case TypeLogLines:
		return KindLog, nil
	case TypeFDInfoSample:
		return KindFDInfo, nil
	case TypeSplit:
		return KindSplit, nil
	}
	return "", unknownType(typ)
}

// SubjectOf returns the subject ev is published on, from its type and its
// host, lane and runid attributes.
func SubjectOf(ev event.Event) (string, error) {
	kind, err := KindOf(ev.Type())
	if err != nil {
		return "", err
	}
	o, err := origin(ev)
	if err != nil {
		return "", err
	}
	if c := lastSubject.Load(); c != nil && c.kind == kind && c.o == o {
		return c.s, nil
	}
	s := Subject(kind, o.Host, o.Lane, o.RunID)
	lastSubject.Store(&subjectText{kind: kind, o: o, s: s})
	return s, nil
}

// lastSubject is the subject SubjectOf gave last, with its kind and
// origin: the events of a run share theirs, and Subject builds the string
// anew each time (an allocation an event).
var lastSubject atomic.Pointer[subjectText]

type subjectText struct {
	kind Kind
	o    Origin
	s    string
}

// plainToken says whether s is its own token: short enough, printable
// ASCII without a space or '.', '*', '>'.
func plainToken(s string) bool {
	if len(s) > MaxTokenBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '.' || c == '*' || c == '>' {
			return false
		}
	}
	return true
}

// Filter returns a subscription filter for the given kind, host, lane and
// run; an empty argument matches anything ("*"), and trailing wildcards fold
// into ">". Filter("", "h1", "", "") is "gttsplit.*.h1.>",
// Filter(KindLog, "", "gpu0", "") is "gttsplit.log.*.gpu0.>".
func Filter(kind Kind, host, lane, runID string) string {
	toks := []string{SubjectRoot, "*", "*", "*", "*"}
	if kind != "" {
		toks[1] = string(kind)
	}
	for i, v := range []string{host, lane, runID} {
		if v != "" {
			toks[2+i] = Token(v)
		}
	}
	n := len(toks)
	for n > 1 && toks[n-1] == "*" {
		n--
	}
	if n == len(toks) {
		return strings.Join(toks, ".")
	}
	return strings.Join(toks[:n], ".") + ".>"
}

// Token makes s usable as one NATS subject token. It replaces every ".",
// "*", ">", whitespace, control character and invalid UTF-8 byte with "_",
// returns "_" for an empty s, and shortens a token longer than
// MaxTokenBytes to a prefix, "~" and 8 hex digits of a hash of s. Distinct
// inputs may share a token (both "a.b" and "a_b" give "a_b"); subjects route,
// the attributes identify.
func Token(s string) string {
	if s == "" {
		return "_"
	}
	if plainToken(s) {
		return s
	}
	return token(s)
}

// token is Token written out in full (plainToken strings are their own).
func token(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1,
			r == '.', r == '*', r == '>',
			unicode.IsSpace(r), unicode.IsControl(r):
			b.WriteByte('_')
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	t := b.String()
	if len(t) <= MaxTokenBytes {
		return t
	}
	h := fnv.New32a()
	h.Write([]byte(s))
	suffix := fmt.Sprintf("~%08x", h.Sum32())
	cut := MaxTokenBytes - len(suffix)
	for cut > 0 && !utf8.RuneStart(t[cut]) {
		cut--
	}
	return t[:cut] + suffix
}
