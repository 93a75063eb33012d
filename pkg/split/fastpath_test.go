package split

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// The plain forms of the allocation-free folding steps: what they
// replaced, kept here as the reference the fuzz targets below hold them
// to.

// evictLess is evictKey.less of two records.
func evictLess(ak lineKey, a llamalog.Record, bk lineKey, b llamalog.Record) bool {
	x := evictKey{seq: ak.seq, stream: ak.stream, class: evictClass(&a), kind: a.Kind}
	y := evictKey{seq: bk.seq, stream: bk.stream, class: evictClass(&b), kind: b.Kind}
	return x.less(&y)
}

// FuzzKeepRecordMatchesSort holds the bounded record store (sorted queues
// whose heads are replaced in place) to its plain form: every record
// applied, each class's sorted in evictKey.less's order; classes 0 and 1 get
// up to limit/4 each, class 2 as many of the rest as it has, then class 1,
// then class 0; each class keeps its last. The input is a stream of
// records (kind, stream, position) in any order, each position once.
func FuzzKeepRecordMatchesSort(f *testing.F) {
	f.Add(uint8(3), []byte{1, 0, 1, 2, 0, 2, 3, 1, 3, 9, 0, 4, 1, 1, 5, 2, 0, 6})
	f.Add(uint8(1), []byte{10, 0, 9, 10, 0, 8, 10, 1, 8, 3, 0, 1})
	f.Add(uint8(16), bytes.Repeat([]byte{2, 0, 7, 4, 1, 3}, 20))
	kinds := []llamalog.Record{
		{Kind: llamalog.KindBuffer, BufKind: "model"}, {Kind: llamalog.KindBuffer, BufKind: "compute"}, {Kind: llamalog.KindBuffer, BufKind: "KV"},
		{Kind: llamalog.KindEcho}, {Kind: llamalog.KindLoad}, {Kind: llamalog.KindContext}, {Kind: llamalog.KindBreakdownHead}, {Kind: llamalog.KindBreakdownRow},
		{Kind: llamalog.KindOutputRealloc}, {Kind: llamalog.KindRole}, {Kind: llamalog.KindRouter}, {Kind: llamalog.KindClip}, {Kind: llamalog.KindFitBracket},
	}
	f.Fuzz(func(t *testing.T, limit uint8, ops []byte) {
		if limit == 0 {
			return
		}
		var st state
		type kr struct {
			k lineKey
			r llamalog.Record
		}
		var all []kr
		seen := map[lineKey]bool{}
		for ; len(ops) >= 3; ops = ops[3:] {
			r := kinds[int(ops[0])%len(kinds)]
			k := lineKey{stream: []string{"log", "err"}[ops[1]&1], seq: uint64(binary.BigEndian.Uint16([]byte{ops[1] >> 1, ops[2]}))}
			if seen[k] {
				continue
			}
			seen[k] = true
			r.Seq = k.seq
			st.keepRecord(k, &r, int(limit))
			all = append(all, kr{k, r})
		}
		slices.SortFunc(all, func(a, b kr) int {
			if evictLess(a.k, a.r, b.k, b.r) {
				return -1
			}
			return 1
		})
		var class [3][]kr
		for _, x := range all {
			c := evictClass(&x.r)
			class[c] = append(class[c], x)
		}
		var share [3]int
		lim, floor := int(limit), int(limit)/4
		share[0], share[1] = min(len(class[0]), floor), min(len(class[1]), floor)
		share[2] = min(len(class[2]), lim-share[0]-share[1])
		share[1] = min(len(class[1]), lim-share[2]-share[0])
		share[0] = min(len(class[0]), lim-share[2]-share[1])
		want := map[lineKey]llamalog.Record{}
		var dropped uint8
		for c, xs := range class {
			for _, x := range xs[len(xs)-share[c]:] {
				want[x.k] = x.r
			}
			if share[c] < len(xs) {
				dropped |= 1 << c
			}
		}
		got := map[lineKey]llamalog.Record{}
		for _, x := range st.records {
			got[lineKey{x.Stream, x.Seq}] = x.Record
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("limit %d: kept %v, want %v", limit, got, want)
		}
		if st.Dropped != dropped {
			t.Fatalf("limit %d: dropped classes %03b, want %03b", limit, st.Dropped, dropped)
		}
	})
}

// FuzzRangeSetMatchesMap holds rangeSet (with its shortcut for a value past
// the last range) to a plain set, on values mostly increasing as lines
// are read, with steps back.
func FuzzRangeSetMatchesMap(f *testing.F) {
	f.Add([]byte{1, 1, 2, 0, 5, 1, 1, 200, 3})
	f.Add([]byte{0, 0, 0, 255, 128, 1})
	f.Fuzz(func(t *testing.T, steps []byte) {
		var r rangeSet
		seen := map[uint64]bool{}
		v := uint64(100)
		for _, s := range steps {
			v = v + uint64(s%8) - 2 // -2..+5
			if s >= 200 {
				v -= uint64(s - 200) // a step back
			}
			if r.has(v) != seen[v] {
				t.Fatalf("has(%d) = %v before add: %v", v, r.has(v), r)
			}
			r.add(v)
			seen[v] = true
		}
		if r.count() != uint64(len(seen)) {
			t.Fatalf("count %d, want %d: %v", r.count(), len(seen), r)
		}
		for i := 1; i < len(r); i++ {
			if r[i-1][1]+1 >= r[i][0] {
				t.Fatalf("not disjoint and apart: %v", r)
			}
		}
		for x := range seen {
			if !r.has(x) {
				t.Fatalf("%d missing: %v", x, r)
			}
		}
	})
}

// addMarkerPlain is addMarker as it was: insert, then drop the first when
// more than MaxMarkers.
func (st *state) addMarkerPlain(m marker) {
	i := sort.Search(len(st.Markers), func(i int) bool {
		x := st.Markers[i]
		return !posLess(x.Seq, x.Stream, m.Seq, m.Stream)
	})
	if i < len(st.Markers) && st.Markers[i].Seq == m.Seq && st.Markers[i].Stream == m.Stream {
		return
	}
	st.Markers = append(st.Markers, marker{})
	copy(st.Markers[i+1:], st.Markers[i:])
	st.Markers[i] = m
	if len(st.Markers) > MaxMarkers {
		st.Markers = st.Markers[1:]
	}
}

// FuzzAddMarkerMatchesPlain holds the in-place marker window to the plain
// insert-then-drop, in any order of arrival, duplicates included.
func FuzzAddMarkerMatchesPlain(f *testing.F) {
	f.Add(bytes.Repeat([]byte{1, 2, 3, 250, 7}, 60))
	f.Add(bytes.Repeat([]byte{200, 1, 100, 3, 150, 2, 50}, 40))
	f.Fuzz(func(t *testing.T, ops []byte) {
		var a, b state
		for i, o := range ops {
			m := marker{Kind: MarkerContext, Seq: uint64(o>>1) + uint64(i%3), Stream: []string{"log", "err"}[o&1]}
			a.addMarker(m)
			b.addMarkerPlain(m)
			if !slices.Equal(a.Markers, b.Markers) {
				t.Fatalf("after %d markers:\n%v\n%v", i+1, a.Markers, b.Markers)
			}
		}
	})
}

// FuzzNameCacheMatchesHash holds the bulk feed's name-hash cache to
// nameHash, names colliding in its slots and coming back included.
func FuzzNameCacheMatchesHash(f *testing.F) {
	f.Add([]byte("blk.0.ffn_up.weight\x00blk.0.ffn_down.weight\x00blk.0.ffn_up.weight\x00token_embd.weight\x00x"))
	f.Add([]byte("aaaaaaaa\x00aaaaaaaaa\x00aaaaaaaa\x00" + strings.Repeat("n", 55) + "\x00" + strings.Repeat("n", 56)))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c nameCache
		names := bytes.Split(data, []byte{0})
		for round := 0; round < 2; round++ {
			for _, n := range names {
				if got, want := c.hash(n), nameHash(n); got != want {
					t.Fatalf("%q: cache %x, hash %x", n, got, want)
				}
			}
		}
	})
}
