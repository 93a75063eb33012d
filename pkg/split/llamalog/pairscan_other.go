//go:build !amd64

package llamalog

// usePairScan is false: the pair scan's kernel is written for amd64 only.
var usePairScan = false

func pairScan(b []byte, t *pairTables) (off int, mask uint32, nl int, nlMask uint32) {
	panic("pairScan without a kernel")
}
