package llamalog

import (
	"encoding/binary"
	"math/bits"
)

// Scratch is what a caller that parses many lines lends the parser
// (Parser.ParseWith) so that a relevant line of a shape seen before
// allocates nothing: the strings earlier lines gave (function, buffer and
// device names, model files: a log repeats a few dozen) are reused, and a
// trace line's tensor name is left for TakeTraceName instead of
// Record.Name. Parse without one makes every string afresh; the records
// are otherwise equal (FuzzParseLeavesMatchPlain,
// TestParseScratchSameRecords). The zero value is ready to use; a Scratch
// serves one goroutine.
type Scratch struct {
	strs *[strCacheSize]string // made at the first string
	// name is the tensor name of the trace line just parsed (nil: none),
	// a slice of that line.
	name []byte
	// join is room to join the words of a buffer type.
	join []byte
}

// TakeTraceName returns the tensor name of the trace line ParseWith
// parsed last (nil when it had none, or was no trace line), a slice of
// that line, and forgets it: the Scratch keeps no reference to a line it
// was given.
func (sc *Scratch) TakeTraceName() []byte {
	n := sc.name
	sc.name = nil
	return n
}

// strCacheSize is how many strings a Scratch's cache holds: 1 KiB of
// string headers, lookups two-way set associative.
const strCacheSize = 64

// str returns b as a string: the one made before for the same bytes when
// the cache still holds it. sc may be nil.
func (sc *Scratch) str(b []byte) string {
	if sc == nil {
		return string(b)
	}
	if len(b) == 0 {
		return ""
	}
	if sc.strs == nil {
		sc.strs = new([strCacheSize]string)
	}
	h := strHash(b)
	i := int(h>>8) % strCacheSize &^ 1
	c := sc.strs
	switch {
	case c[i] == string(b):
		return c[i]
	case c[i+1] == string(b):
		return c[i+1]
	}
	s := string(b)
	switch {
	case c[i] == "":
		c[i] = s
	case c[i+1] == "":
		c[i+1] = s
	default:
		c[i+int(h&1)] = s
	}
	return s
}

// strHash picks str's cache set: from the length and the first and last
// bytes (up to four each) rather than every byte (the bytes are compared
// whole on a hit, so a weak hash costs only misses).
func strHash(b []byte) uint32 {
	n := len(b)
	var x uint32
	if n >= 4 {
		x = binary.LittleEndian.Uint32(b) ^ bits.RotateLeft32(binary.LittleEndian.Uint32(b[n-4:]), 13)
	} else {
		for _, c := range b {
			x = x<<8 | uint32(c)
		}
	}
	return (x ^ uint32(n)) * 0x9e3779b1
}

// asciiSpace is strings.Fields' ASCII whitespace.
var asciiSpace = [256]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// isASCII reports whether b holds only ASCII bytes (then strings.Fields
// and strings.TrimSpace split on asciiSpace alone).
func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// nextField returns the first run of non-asciiSpace bytes of b at or after
// from, as b[i:j] (i == j == len(b) when there is none).
func nextField(b []byte, from int) (i, j int) {
	i = from
	for i < len(b) && asciiSpace[b[i]] {
		i++
	}
	j = i
	for j < len(b) && !asciiSpace[b[j]] {
		j++
	}
	return i, j
}
