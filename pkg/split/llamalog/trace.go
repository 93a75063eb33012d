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
