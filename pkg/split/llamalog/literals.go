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

// litPair is the byte pair each literal is looked for by: among its pairs,
// one that few lines of llama.cpp's output hold (counted over the
// repository's logs), so that few places are compared. A literal not
// listed is looked for by its first two bytes.
var litPair = map[string]string{
	"breakdown_print": "kd", "loaded meta data": "da", "constructing llama_context": "uc",
	"output_reserve: reallocating output buffer": "oc", "draft model": "af", "spawning server": "aw",
	"instance name=": "nc", "CLIP using": "IP", "fallback to CPU backend": "lb", "model size:": "e:",
	"fitting params": "ms", "projected to use": "je", "projected memory use with initial parameters": "je",
	"getting device memory data": "tt", "reserving ...": " .", "failed to ": "fa", "Failed to ": "Fa", "GGML_ASSERT(buffer)": "T(", "warming up the model": "mi", "build": "ui", "version: ": "n:",
	"verbosity = ": "rb", "mem required": "ir", "VRAM used": "VR", "compute buffer total size": "ot",
	"KV self size": "lf", " cells": "ls", "size = ": "ze", "using device ": "vi",
	"create_tensor: loading tensor": "cr", "assigned to device": "gn", "for async uploads": "yn",
	"using async uploads for device": "yn", "does not support async": "oe", "n_embd_k_gqa =": "gq",
	"enumerating backends": "um", "graph_reserve: reserving a graph": "gr", ": dev = ": "ev",
	"does not have KV cache": "av", "cannot be used with preferred buffer type": "nn",
	"backend_ptrs.size()": "()", "max_nodes = ": "ax",
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

var litTab = newLitTable()

func newLitTable() *litTable {
	t := &litTable{at: [][]litAt{nil}} // slot 0: no pair
	for id, a := range lits {
		pair := litPair[string(a)]
		k := bytes.Index(a, []byte(pair))
		if len(pair) != 2 || k < 0 {
			pair, k = string(a[:2]), 0
		}
		v := uint16(pair[0])<<8 | uint16(pair[1])
		if t.slot[v] == 0 {
			t.slot[v] = uint8(len(t.at))
			t.at = append(t.at, nil)
			t.bits[v>>6] |= 1 << (v & 63)
		}
		t.at[t.slot[v]] = append(t.at[t.slot[v]], litAt{a: a, id: id, k: k})
		t.pt.add(a, k, id%8)
	}
	return t
}

// literals returns which of lits s holds. With the pair scan's kernel,
// a message of 34 bytes or more is looked at 32 places a step (the last
// step overlaps the one before), and only the places it gives are looked
// up; literalsFrom looks up every place.
func literals(s []byte) litMask {
	if !usePairScan || len(s) < 34 {
		return literalsFrom(s, 0)
	}
	var m litMask
	t := litTab
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
	return m | literalsFrom(s, 0)
}

// literalsFrom returns which of lits s holds at a place from q on.
func literalsFrom(s []byte, q int) litMask {
	var m litMask
	for ; q+1 < len(s); q++ {
		m |= litTab.check(s, q)
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
