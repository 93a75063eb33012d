package split

import (
	"encoding/binary"
	"math/bits"
)

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
