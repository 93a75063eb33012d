package bus

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

func wire(i int) events.Wire {
	return events.Wire{
		Subject: "gttsplit.log.h.l.r",
		ID:      fmt.Sprintf("r/stderr/%d", i),
		Data:    fmt.Appendf(nil, `{"n":%d,"pad":"%040d"}`, i, i),
	}
}

func openTest(t *testing.T, dir string, maxBytes, segBytes int64) *spool {
	t.Helper()
	s, err := openSpool(dir, maxBytes, segBytes, zerolog.New(zerolog.NewTestWriter(t)))
	require.NoError(t, err)
	return s
}

// drain reads every remaining record, committing the first k.
func readIDs(t *testing.T, s *spool, commit int) []string {
	t.Helper()
	var got []string
	for i := 0; ; i++ {
		w, pos, ok := s.next()
		if !ok {
			return got
		}
		got = append(got, w.ID)
		if i < commit {
			require.NoError(t, s.commit(pos))
		}
	}
}

func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	require.NoError(t, err)
	return m
}

func TestSpoolOrderAcrossSegmentsAndReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openTest(t, dir, 1<<20, 300) // a few records per segment
	for i := range 20 {
		require.NoError(t, s.append(wire(i), false))
	}
	require.NoError(t, s.sync())
	require.Greater(t, len(segFiles(t, dir)), 3)
	require.False(t, s.empty())

	got := readIDs(t, s, 7)
	require.Len(t, got, 20)
	for i, id := range got {
		require.Equal(t, wire(i).ID, id)
	}
	before := s.bytes()
	require.NoError(t, s.close())

	// Reopen: the 7 committed records are gone, the other 13 come back,
	// in order; segments before the head were deleted.
	s2 := openTest(t, dir, 1<<20, 300)
	require.LessOrEqual(t, s2.bytes(), before)
	got = readIDs(t, s2, 0)
	require.Len(t, got, 13)
	require.Equal(t, wire(7).ID, got[0])
	// Rewind and commit everything: the spool resets.
	s2.rewind()
	readIDs(t, s2, 13)
	require.True(t, s2.empty())
	require.Zero(t, s2.bytes())
	require.Empty(t, segFiles(t, dir))
	_, err := os.Stat(filepath.Join(dir, headFile))
	require.ErrorIs(t, err, os.ErrNotExist)
	// It takes new records after a reset.
	require.NoError(t, s2.append(wire(99), false))
	require.Equal(t, []string{wire(99).ID}, readIDs(t, s2, 0))
	require.NoError(t, s2.close())
}

func TestSpoolCutsTornTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openTest(t, dir, 1<<20, 1<<20)
	for i := range 5 {
		require.NoError(t, s.append(wire(i), false))
	}
	require.NoError(t, s.sync())
	require.NoError(t, s.close())
	segs := segFiles(t, dir)
	require.Len(t, segs, 1)
	// A crash mid-append leaves half a record.
	rec := encodeRecord(wire(5))
	f, err := os.OpenFile(segs[0], os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(rec[:len(rec)/2])
	require.NoError(t, err)
	require.NoError(t, f.Close())

	s2 := openTest(t, dir, 1<<20, 1<<20)
	require.Equal(t, 1, s2.corrupt)
	got := readIDs(t, s2, 0)
	require.Len(t, got, 5)
	require.NoError(t, s2.append(wire(6), false))
	s2.rewind()
	got = readIDs(t, s2, 0)
	require.Equal(t, wire(6).ID, got[5], "records appended after the cut are readable")
	require.NoError(t, s2.close())
}

// TestSpoolSkipsCorruptRecord: a record whose bytes changed on disk costs
// only itself; the records after it are read, the loss is counted with
// the run around it. (Before the marker, everything after it was cut.)
func TestSpoolSkipsCorruptRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openTest(t, dir, 1<<20, 1<<20)
	for i := range 5 {
		require.NoError(t, s.append(wire(i), false))
	}
	require.NoError(t, s.close())
	seg := segFiles(t, dir)[0]
	b, err := os.ReadFile(seg)
	require.NoError(t, err)
	n := len(encodeRecord(wire(0)))
	b[len(segMagic)+2*n+recHeader+3] ^= 0xff // a byte inside the third record
	require.NoError(t, os.WriteFile(seg, b, 0o600))

	s2 := openTest(t, dir, 1<<20, 1<<20)
	require.Equal(t, []string{wire(0).ID, wire(1).ID, wire(3).ID, wire(4).ID}, readIDs(t, s2, 0))
	require.Equal(t, 1, s2.corrupt)
	require.Equal(t, SpoolLoss{Holes: 1, Bytes: int64(n), Runs: []string{"r"}}, s2.loss.get())
	require.Equal(t, 4, s2.pending())
	require.NoError(t, s2.close())
}

func TestSpoolFull(t *testing.T) {
	t.Parallel()
	rec := int64(len(encodeRecord(wire(0))))
	s := openTest(t, t.TempDir(), 3*rec, 1<<20) // the segment's header is not counted
	for i := range 3 {
		require.NoError(t, s.append(wire(i), false))
	}
	require.ErrorIs(t, s.append(wire(3), false), errSpoolFull)
	require.Equal(t, 3, s.pending())
	// A run event may use the reserve beyond max_bytes.
	require.NoError(t, s.append(wire(3), true))
	require.Equal(t, 4, s.pending())
	// Committing a record does not free its bytes until its segment is
	// deleted; draining the whole spool does.
	readIDs(t, s, 4)
	require.True(t, s.empty())
	require.Zero(t, s.pending())
	require.NoError(t, s.append(wire(4), false))
	require.NoError(t, s.close())
}

func TestSpoolRecordDecodeRejectsGarbage(t *testing.T) {
	t.Parallel()
	w := wire(3)
	got, err := decodeRecord(encodeRecord(w)[recHeader:])
	require.NoError(t, err)
	require.Equal(t, w, got)
	for _, p := range [][]byte{nil, {0xff}, {5, 'a'}, {1, 'a', 9, 'b'}} {
		_, err := decodeRecord(p)
		require.Error(t, err, "%q", p)
	}
}
