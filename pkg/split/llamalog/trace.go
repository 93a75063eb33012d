package llamalog

import (
	"bytes"
)

// readTrace reads a host-weight trace line into r by the parser's trace
// pattern; false for a line that is not one.
func (p *Parser) readTrace(r *Record, s []byte, sc *Scratch) bool {
	if p.traceNeedsMiB {
		v, ok := defaultTrace(s)
		if ok {
			r.Kind, r.MiB = KindTrace, v
			r.Name = traceNameTo(sc, traceName(s))
		}
		return ok
	}
	if len(p.traceAnchor) > 0 && !bytes.Contains(s, p.traceAnchor) {
		return false // not a trace line: skip the regexp
	}
	m := p.trace.FindSubmatch(s)
	if m == nil {
		return false
	}
	v, err := parseDecimal(m[1])
	if err != nil || v < 0 {
		r.Kind = KindMalformed
		return true
	}
	r.Kind, r.MiB = KindTrace, v
	if n := p.traceName.FindSubmatch(s); n != nil {
		r.Name = traceNameTo(sc, n[1])
	}
	return true
}

// defaultTrace is DefaultTracePattern, `resident=([0-9]+(?:\.[0-9]+)?) ?MiB`,
// by hand: the leftmost match wins. It looks for "MiB" (a rare 'M') and
// reads back from it: the number right before it (or before one blank),
// digits or digits.digits, and "resident=" right before that. A match
// read forward from "resident=" ends at the "MiB" this reads back from,
// so the first "MiB" that reads back to a figure is the leftmost match.
// FuzzDefaultTraceMatchesRegexp holds it to the regexp.
func defaultTrace(s []byte) (float64, bool) {
	for off := 0; ; {
		i := bytes.IndexByte(s[off:], 'M')
		if i < 0 {
			return 0, false
		}
		e := off + i
		off = e + 1
		if e+3 > len(s) || s[e+1] != 'i' || s[e+2] != 'B' {
			continue
		}
		if e > 0 && s[e-1] == ' ' {
			e--
		}
		j := e
		for j > 0 && isDigit(s[j-1]) {
			j--
		}
		if j == e {
			continue
		}
		if j >= 2 && s[j-1] == '.' && isDigit(s[j-2]) {
			j--
			for j > 0 && isDigit(s[j-1]) {
				j--
			}
		}
		if j < len(aResident) || !bytes.Equal(s[j-len(aResident):j], aResident) {
			continue
		}
		v, err := parseDecimal(s[j:e])
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
// [\t\n\f\r ]): the group, nil without a match. It looks for each '='
// (a trace line's first is most often its name's) and reads "name" back
// from it, rather than searching for every 'n'; the occurrences of
// "name=" come in the same order, so the leftmost with a non-empty value
// wins as with the regexp.
func traceName(s []byte) []byte {
	for off := len(aName); off < len(s); {
		i := bytes.IndexByte(s[off:], '=')
		if i < 0 {
			return nil
		}
		e := off + i
		off = e + 1
		if string(s[e-len(aName):e]) != string(aName) {
			continue
		}
		v := s[e+1:]
		j := 0
		for j < len(v) && !reSpace[v[j]] {
			j++
		}
		if j > 0 {
			return v[:j]
		}
	}
	return nil
}

// aName is what precedes the '=' of a trace line's tensor name.
var aName = []byte("name")

// reSpace is RE2's \s: the bytes that end a trace line's tensor name.
var reSpace = [256]bool{'\t': true, '\n': true, '\f': true, '\r': true, ' ': true}
