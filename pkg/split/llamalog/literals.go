package llamalog

import (
	"bytes"
	"math/bits"
)

// The literals Parser.parse tells a line's kind by, after the trace and
// buffer checks: one pass over the message finds which of them it holds
// (literals), so that the chain of checks is bit tests instead of a
// substring search for each (parsePlain, in the tests, is the chain of
// searches; FuzzParseMatchesPlain holds the two equal).
const (
	litBreakdown = iota
	litLoad
	litCtx
	litRealloc
	litDraft
	litSpawn
	litInstance
	litClip
	litClipCPU
	litModelSize
	litFit
	litWarmup
	litBuild
	litVersion
	litVerbosity
	litMemReq
	litVRAMUsed
	litComputeTotal
	litKVSelf
	litCells
	litSizeEq
	litFitProjected
	litDevice
	litFitInitial
	litFitData
	litReserve
	litFailed
	litFailedCap
	litAssertBuffer
	litDebug // the first of debugMarkers, in their order
)

// lits are the literals by id (the -v markers last).
var lits = append([][]byte{
	litBreakdown:    aBreakdown,
	litLoad:         aLoad,
	litCtx:          aCtx,
	litRealloc:      []byte("output_reserve: reallocating output buffer"),
	litDraft:        aDraft,
	litSpawn:        aSpawn,
	litInstance:     aInstance,
	litClip:         aClip,
	litClipCPU:      aClipCPU,
	litModelSize:    aModelSize,
	litFit:          aFit,
	litWarmup:       aWarmup,
	litBuild:        aBuild,
	litVersion:      aVersion,
	litVerbosity:    aVerbosity,
	litMemReq:       aMemReq,
	litVRAMUsed:     aVRAMUsed,
	litComputeTotal: []byte("compute buffer total size"),
	litKVSelf:       []byte("KV self size"),
	litCells:        []byte(" cells"),
	litSizeEq:       []byte("size = "),
	litFitProjected: aFitProjected,
	litDevice:       aDevice,
	litFitInitial:   aFitInitial,
	litFitData:      aFitData,
	litReserve:      aReserve,
	litFailed:       aFailed,
	litFailedCap:    aFailedCap,
	litAssertBuffer: aAssertBuffer,
}, debugMarkers...)

// litMask has bit i set when a message holds lits[i].
type litMask uint64

// debugLits are the bits of the -v markers.
var debugLits = litMask(1<<len(lits)-1) &^ (1<<litDebug - 1)

// litPair is the byte pair each literal is looked for by and its bucket
// in the pair scan's tables (see pairTables). The pair scan passes a place
// when its byte pair and the byte after it fit the nibbles of one of a
// bucket's pairs: the pairs and buckets are chosen so that few places of
// llama.cpp's output pass (counted over the repository's logs and
// llama-server request lines: TestLiteralPairsAreRare), since each place
// passed is looked up. A literal not listed is looked for by its first
// two bytes, in bucket 0.
var litPair = map[string]struct {
	pair   string
	bucket int
}{
	"breakdown_print": {"ea", 3}, "loaded meta data": {"a ", 2}, "constructing llama_context": {"ru", 1},
	"output_reserve: reallocating output buffer": {"ea", 4}, "draft model": {"ra", 3}, "spawning server": {"aw", 2},
	"instance name=": {"e ", 4}, "CLIP using": {"LI", 3}, "fallback to CPU backend": {"o ", 0},
	"model size:": {"ze", 0}, "fitting params": {"it", 5}, "warming up the model": {"rm", 6},
	"build": {"bu", 1}, "version: ": {"on", 7}, "verbosity = ": {"os", 7}, "mem required": {"qu", 1},
	"VRAM used": {"AM", 1}, "compute buffer total size": {"to", 5}, "KV self size": {"se", 6},
	" cells": {"el", 4}, "size = ": {"ze", 0}, "projected to use": {"ro", 3},
	"using device ": {"g ", 2}, "projected memory use with initial parameters": {"ro", 3},
	"getting device memory data": {"g ", 2}, "reserving ...": {"g ", 2},
	"failed to ": {"fa", 7}, "Failed to ": {"Fa", 7}, "GGML_ASSERT(buffer)": {"SE", 6},
	// -v markers (a table of their own: debugLitTab)
	"create_tensor: loading tensor": {"cr", 0}, "assigned to device": {"as", 1},
	"for async uploads": {"r ", 6}, "using async uploads for device": {"r ", 2},
	"does not support async": {"do", 7}, "n_embd_k_gqa =": {"k_", 0},
	"enumerating backends": {"en", 5}, "graph_reserve: reserving a graph": {"ph", 3},
	": dev = ": {": ", 2}, "does not have KV cache": {"do", 7},
	"cannot be used with preferred buffer type": {"ef", 7}, "backend_ptrs.size()": {"nd", 3},
	"max_nodes = ": {"x_", 4},
}

// litAt is a literal, its id and the offset of its pair in it.
type litAt struct {
	a  []byte
	id int
	k  int
}

// litTable finds the literals: bits has the bit of every pair some literal
// is looked for by, slot the index in at of that pair's literals.
type litTable struct {
	bits [1 << 16 / 64]uint64
	slot [1 << 16]uint8
	at   [][]litAt
	// pt is the pairs for the pair scan's kernel (see pairTables): the
	// places it gives are checked with bits, as every place is without
	// it.
	pt pairTables
}

// litTab finds the grammar's literals but the -v markers, debugLitTab the
// -v markers: a parse looks for the markers only when the rules before
// theirs read nothing (fewer literals a table, fewer places the kernel
// gives to look up).
var (
	litTab      = newLitTable(0, litDebug)
	debugLitTab = newLitTable(litDebug, len(lits))
)

// newLitTable is the table of lits[from:to].
func newLitTable(from, to int) *litTable {
	t := &litTable{at: [][]litAt{nil}} // slot 0: no pair
	for id := from; id < to; id++ {
		a := lits[id]
		lp := litPair[string(a)]
		pair, bucket := lp.pair, lp.bucket
		k := bytes.Index(a, []byte(pair))
		if len(pair) != 2 || k < 0 {
			pair, bucket, k = string(a[:2]), 0, 0
		}
		v := uint16(pair[0])<<8 | uint16(pair[1])
		if t.slot[v] == 0 {
			t.slot[v] = uint8(len(t.at))
			t.at = append(t.at, nil)
			t.bits[v>>6] |= 1 << (v & 63)
		}
		t.at[t.slot[v]] = append(t.at[t.slot[v]], litAt{a: a, id: id, k: k})
		t.pt.add(a, k, bucket)
	}
	return t
}

// find returns which of t's literals s holds. With the pair scan's
// kernel, a message of 34 bytes or more is looked at 32 places a step
// (the last step overlaps the one before), and only the places it gives
// are looked up; from looks up every place.
func (t *litTable) find(s []byte) litMask {
	if !usePairScan || len(s) < 34 {
		return t.from(s, 0)
	}
	var m litMask
	for pos := 0; ; {
		off, mask, _, _ := pairScan(s[pos:], &t.pt)
		at := pos + off
		if mask == 0 {
			// Fewer than 34 bytes from at: one step over the last 34
			// (the places before at are done), then the last place.
			end := len(s) - 34
			if at <= end {
				break // cannot happen: the kernel stops only past end
			}
			_, mask, _, _ = pairScan(s[end:], &t.pt)
			mask &^= 1<<(at-end) - 1
			for mask != 0 {
				m |= t.check(s, end+bits.TrailingZeros32(mask))
				mask &= mask - 1
			}
			return m | t.check(s, len(s)-2)
		}
		for mask != 0 {
			m |= t.check(s, at+bits.TrailingZeros32(mask))
			mask &= mask - 1
		}
		pos = at + 32
	}
	return m | t.from(s, 0)
}

// from returns which of t's literals s holds at a place from q on.
func (t *litTable) from(s []byte, q int) litMask {
	var m litMask
	for ; q+1 < len(s); q++ {
		m |= t.check(s, q)
	}
	return m
}

// check returns which of lits s holds at q by the pair at q (q+1 <
// len(s)).
func (t *litTable) check(s []byte, q int) litMask {
	v := uint16(s[q])<<8 | uint16(s[q+1])
	if t.bits[v>>6]&(1<<(v&63)) == 0 {
		return 0
	}
	var m litMask
	for _, x := range t.at[t.slot[v]] {
		if st := q - x.k; st >= 0 && st+len(x.a) <= len(s) && bytes.Equal(s[st:st+len(x.a)], x.a) {
			m |= 1 << x.id
		}
	}
	return m
}
