package split

import (
	"encoding/binary"
	"math/bits"
)

// parseScratch is what a fold lends the parser so that a relevant line of
// a shape seen before allocates nothing: the strings earlier lines gave
// (function, buffer and device names, model files: a log repeats a few
// dozen), and a trace line's tensor name, hashed (the fold keeps only
// its hash). Parse without one makes every string afresh; the
// results are equal (FuzzParseLeavesMatchPlain, TestParseScratchSameRecords).
type parseScratch struct {
	strs *[strCacheSize]string // made at the first string
	// name is the nameHash of the tensor name of the trace line just
	// parsed, named false when it has none (a hash, not the bytes: the
	// fold keeps no reference to a line it was given).
	name  uint64
	named bool
	// join is room to join the words of a buffer type.
	join []byte
}

// strCacheSize is how many strings a fold's cache holds: 1 KiB of string
// headers a fold, lookups two-way set associative.
const strCacheSize = 64

// str returns b as a string: the one made before for the same bytes when
// the cache still holds it. sc may be nil.
func (sc *parseScratch) str(b []byte) string {
	if sc == nil {
		return string(b)
	}
	if len(b) == 0 {
		return ""
	}
	if sc.strs == nil {
		sc.strs = new([strCacheSize]string)
	}
	h := uint32(2166136261)
	for _, c := range b {
		h = (h ^ uint32(c)) * 16777619
	}
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

// nameCache remembers the nameHash of the tensor names a log read in bulk
// (LogFeed) gave: a loaded model's names come back with every load, and
// the hash (FNV-1a, a byte at a time, kept as it is because folds persist
// it) costs more than finding it here. Names longer than nameCacheLen are
// hashed each time. A miss costs a look-up more than no cache;
// FuzzNameCacheMatchesHash holds it to nameHash.
type nameCache struct {
	e [nameCacheSize]struct {
		n uint8
		b [nameCacheLen]byte
		h uint64
	}
}

const (
	nameCacheSize = 256
	nameCacheLen  = 55
)

// hash returns nameHash(name).
func (c *nameCache) hash(name []byte) uint64 {
	n := len(name)
	if n < 8 || n > nameCacheLen {
		return nameHash(name)
	}
	x := binary.LittleEndian.Uint64(name) ^ bits.RotateLeft64(binary.LittleEndian.Uint64(name[n-8:]), 29) ^ uint64(n)
	e := &c.e[(x*0x9e3779b97f4a7c15)>>56]
	if int(e.n) == n && string(e.b[:n]) == string(name) {
		return e.h
	}
	e.n, e.h = uint8(n), nameHash(name)
	copy(e.b[:], name)
	return e.h
}
