package llamalog

import "golang.org/x/sys/cpu"

// usePairScan says the CPU runs the pair scan's kernel.
var usePairScan = cpu.X86.HasAVX2 && cpu.X86.HasPOPCNT

// pairScan looks at b 32 bytes a step, from the start, while 34 bytes are
// left (a step reads two bytes beyond). It returns at the first step with
// a candidate pair: off is the step's start, mask has bit j set when
// b[off+j], b[off+j+1] may start an anchor's pair, and nl counts the
// newlines of b[:off], nlMask has bit j set when b[off+j] is a newline.
// With no candidate, off is where it stopped and mask and nlMask are 0.
//
//go:noescape
func pairScan(b []byte, t *pairTables) (off int, mask uint32, nl int, nlMask uint32)
