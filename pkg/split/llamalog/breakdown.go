package llamalog

import (
	"bytes"
	"strconv"
	"strings"
)

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
