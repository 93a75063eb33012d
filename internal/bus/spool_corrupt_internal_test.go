package bus

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/events"
)

// fixtureWires returns the recorded 4B run's events (25) once under each
// of the run ids, as the collector hands them to the spool.
func fixtureWires(t testing.TB, runs ...string) []events.Wire {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "runs", "4b", "events.jsonl"))
	require.NoError(t, err)
	const recorded = "strix01-20261107T140311-4b"
	var out []events.Wire
	for _, run := range runs {
		r := events.NewReader(bytes.NewReader(bytes.ReplaceAll(raw, []byte(recorded), []byte(run))))
		for r.Next() {
			w, err := events.ToWire(r.Event())
			require.NoError(t, err)
			out = append(out, w)
		}
		require.NoError(t, r.Err())
	}
	return out
}

// TestSpoolCorruptMiddleCostsOnlyItsRecords is the fault as found: 40
// bytes overwritten in the middle of a segment of three runs' events.
// Only the records those bytes touch are lost; every other record is read,
// in order; the loss (its bytes, the run) is said at WARN and counted.
// Before the marker, the reader cut the segment there and the records
// after it were gone without a word of their runs.
func TestSpoolCorruptMiddleCostsOnlyItsRecords(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ws := fixtureWires(t, "run-a", "run-b", "run-c")
	require.Len(t, ws, 75)
	s := openTest(t, dir, 1<<30, 1<<30)
	var ends []int64 // each record's end in the segment
	end := int64(len(segMagic))
	for _, w := range ws {
		require.NoError(t, s.append(w, false))
		end += int64(len(encodeRecord(w)))
		ends = append(ends, end)
	}
	require.NoError(t, s.close())
	seg := segFiles(t, dir)
	require.Len(t, seg, 1)
	b, err := os.ReadFile(seg[0])
	require.NoError(t, err)
	mid := int64(len(b) / 2)
	copy(b[mid:mid+40], strings.Repeat("Z", 40))
	require.NoError(t, os.WriteFile(seg[0], b, 0o600))

	var want []string
	var lost int64
	hitRuns := map[string]bool{}
	for i, w := range ws {
		start := int64(len(segMagic))
		if i > 0 {
			start = ends[i-1]
		}
		if start < mid+40 && ends[i] > mid {
			lost += ends[i] - start
			hitRuns[runOf(w)] = true
			continue
		}
		want = append(want, w.ID)
	}
	var logs bytes.Buffer
	s2, err := openSpool(dir, 1<<30, 1<<30, zerolog.New(&logs))
	require.NoError(t, err)
	require.Equal(t, want, readIDs(t, s2, len(want)), "every record the bytes did not touch")
	loss := s2.loss.get()
	require.Equal(t, 1, loss.Holes)
	require.Equal(t, lost, loss.Bytes)
	for run := range hitRuns {
		require.Contains(t, loss.Runs, run)
		require.Contains(t, logs.String(), run)
	}
	require.Contains(t, logs.String(), `"level":"warn"`)
	require.Contains(t, logs.String(), fmt.Sprintf(`"bytes_lost":%d`, lost))
	require.True(t, s2.empty(), "the hole is passed: the spool drained")
	require.Empty(t, segFiles(t, dir))
	require.NoError(t, s2.close())
}

// encodeRecordV1 writes a record as the previous format did: no marker,
// the checksum over the payload alone.
func encodeRecordV1(w events.Wire) []byte {
	rec := encodeRecord(w)
	payload := rec[recHeader:]
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(payload, crcTable))
	return append(b, payload...)
}

// TestSpoolDrainsPreviousFormat: a spool written by the previous version
// (segments without header or markers, its head file) is read from its
// head on; a corrupt record in it costs only itself (the reader tries
// every offset there); new records go to a segment of the current format
// after it, and everything drains.
func TestSpoolDrainsPreviousFormat(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(dir, 0o700))
	var seg []byte
	var offs []int
	for i := range 8 {
		offs = append(offs, len(seg))
		seg = append(seg, encodeRecordV1(wire(i))...)
	}
	seg[offs[5]+recHeaderV1+4] ^= 0x40 // inside record 5's payload
	require.NoError(t, os.WriteFile(filepath.Join(dir, segName(3)), seg, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, headFile), fmt.Appendf(nil, "3 %d\n", offs[2]), 0o600))

	s := openTest(t, dir, 1<<20, 1<<20)
	require.True(t, s.segs[0].v1)
	require.Equal(t, 5, s.pending(), "records 2, 3, 4, 6 and 7 wait, 5 is a hole")
	require.NoError(t, s.append(wire(8), false))
	require.Equal(t, []string{wire(2).ID, wire(3).ID, wire(4).ID, wire(6).ID, wire(7).ID, wire(8).ID}, readIDs(t, s, 6))
	require.Equal(t, int64(offs[6]-offs[5]), s.loss.get().Bytes)
	require.True(t, s.empty())
	require.Empty(t, segFiles(t, dir))
	require.NoError(t, s.close())
}

// TestSpoolTornTailIsNoLoss: zeros at the end of the last segment (a file
// extended whose data never reached the disk) are a torn tail, cut off as
// the half record of a crash is, and no loss: the source sends it again.
func TestSpoolTornTailIsNoLoss(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openTest(t, dir, 1<<20, 1<<20)
	for i := range 3 {
		require.NoError(t, s.append(wire(i), false))
	}
	require.NoError(t, s.close())
	f, err := os.OpenFile(segFiles(t, dir)[0], os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(make([]byte, 4096))
	require.NoError(t, err)
	require.NoError(t, f.Close())

	s2 := openTest(t, dir, 1<<20, 1<<20)
	require.Equal(t, 1, s2.corrupt)
	require.Zero(t, s2.loss.get())
	require.Len(t, readIDs(t, s2, 0), 3)
	require.NoError(t, s2.close())
}

// TestSpoolCorruptEndOfSealedSegment: a bad last record of a segment that
// is not the last one is no torn tail (the segment was synced before the
// next began): it is lost and said, the next segment is read.
func TestSpoolCorruptEndOfSealedSegment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rec := int64(len(encodeRecord(wire(0))))
	s := openTest(t, dir, 1<<20, 3*rec) // three records a segment
	for i := range 9 {
		require.NoError(t, s.append(wire(i), false))
	}
	require.NoError(t, s.close())
	segs := segFiles(t, dir)
	require.Len(t, segs, 3)
	b, err := os.ReadFile(segs[0])
	require.NoError(t, err)
	b[len(b)-5] ^= 0xff
	require.NoError(t, os.WriteFile(segs[0], b, 0o600))

	s2 := openTest(t, dir, 1<<20, 3*rec)
	got := readIDs(t, s2, 8)
	require.Equal(t, []string{wire(0).ID, wire(1).ID, wire(3).ID, wire(4).ID, wire(5).ID, wire(6).ID, wire(7).ID, wire(8).ID}, got)
	require.Equal(t, SpoolLoss{Holes: 1, Bytes: rec, Runs: []string{"r"}}, s2.loss.get())
	require.NoError(t, s2.close())
}

// TestSpoolCorruptFoundWhileDraining: a record damaged after the spool
// was opened (its scan saw it whole) is found by the reader: a hole, the
// loss said, the records after it read; a head that waits at the hole
// passes it, so a spool whose last record was lost still drains.
func TestSpoolCorruptFoundWhileDraining(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openTest(t, dir, 1<<20, 1<<20)
	for i := range 4 {
		require.NoError(t, s.append(wire(i), false))
	}
	require.NoError(t, s.sync())
	rec := len(encodeRecord(wire(0)))
	damage := func(k int) {
		f, err := os.OpenFile(segFiles(t, dir)[0], os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteAt([]byte{0, 0, 0}, int64(len(segMagic)+k*rec+recHeader+2))
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	damage(1)
	damage(3)
	require.Equal(t, []string{wire(0).ID, wire(2).ID}, readIDs(t, s, 2))
	loss := s.loss.get()
	require.Equal(t, 2, loss.Holes)
	require.Equal(t, int64(2*rec), loss.Bytes)
	require.True(t, s.empty(), "the head passed the last hole")
	require.Empty(t, segFiles(t, dir))
	require.NoError(t, s.close())
}

// FuzzSpoolDamage overwrites n bytes at off of a spool of 12 records in
// segments with a pattern (the second segment's): the reader never fails, returns only
// records that were written, in order, and every record the damage did
// not touch.
func FuzzSpoolDamage(f *testing.F) {
	f.Add(uint16(40), uint8(40), byte('Z'))
	f.Add(uint16(0), uint8(12), byte(0))
	f.Add(uint16(3), uint8(255), byte(0xf7))
	f.Add(uint16(200), uint8(1), byte(0xff))
	f.Fuzz(func(t *testing.T, off uint16, n uint8, pat byte) {
		dir := t.TempDir()
		rec := int64(len(encodeRecord(wire(0))))
		s, err := openSpool(dir, 1<<20, 4*rec, zerolog.Nop())
		require.NoError(t, err)
		var all []string
		for i := range 12 {
			require.NoError(t, s.append(wire(i), false))
			all = append(all, wire(i).ID)
		}
		require.NoError(t, s.close())
		segs := segFiles(t, dir)
		require.GreaterOrEqual(t, len(segs), 3)
		b, err := os.ReadFile(segs[1])
		require.NoError(t, err)
		o := int(off) % len(b)
		e := min(len(b), o+int(n))
		copy(b[o:e], bytes.Repeat([]byte{pat}, e-o))
		require.NoError(t, os.WriteFile(segs[1], b, 0o600))

		s2, err := openSpool(dir, 1<<20, 4*rec, zerolog.Nop())
		require.NoError(t, err)
		got := readIDs(t, s2, 100)
		require.NoError(t, s2.close())
		// Records 4..7 are in the damaged segment, at 8+k*rec.
		var want []string
		for i, id := range all {
			if k := int64(i - 4); k >= 0 && k < 4 {
				start, end := int64(len(segMagic))+k*rec, int64(len(segMagic))+(k+1)*rec
				if start < int64(e) && end > int64(o) {
					continue // touched
				}
			}
			want = append(want, id)
		}
		var kept []string
		for _, id := range got {
			require.Contains(t, all, id)
			kept = append(kept, id)
		}
		require.True(t, slices.IsSorted(indexes(all, kept)), "in order: %v", kept)
		for _, id := range want {
			require.Contains(t, kept, id, "untouched record")
		}
	})
}

func indexes(all, ids []string) []int {
	var out []int
	for _, id := range ids {
		out = append(out, slices.Index(all, id))
	}
	return out
}
