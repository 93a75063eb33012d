package bus

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/rs/zerolog"
)

// The spool is a directory of segment files, <20-digit id>.seg. A segment
// starts with the 8 bytes "GTSPOOL2" and holds a sequence of records:
//
//	marker F7 47 53 52 | uint32 LE payload length | uint32 LE CRC-32C of the length's 4 bytes and the payload | payload
//	payload = uvarint len(subject) subject | uvarint len(id) id | event bytes
//
// The marker is what a reader resynchronises on: a record whose checksum
// fails costs only itself. The reader looks for the next marker that
// starts a valid record, skips the bytes in between (a hole, kept in
// memory, never rewritten) and says at WARN what they held: their bytes
// and the runs whose events it can still read in them (else the runs of
// the records on either side). 0xF7 never occurs in UTF-8, so a marker
// inside an event's JSON is rare, and a false one fails its checksum. A
// bad end of the last segment with no valid record after it is a torn
// tail (a crash mid-write: its source was never told the event was
// durable, so sends it again): it is cut off, and is no loss.
//
// Segments written before the header existed (the previous format: no
// header, no marker, records "uint32 LE length | uint32 LE CRC-32C of the
// payload | payload") are still read and drained; the reader resyncs in
// them by trying every offset for a record whose checksum holds. New
// records always go to a new segment of the current format.
//
// "head" holds the position of the first record not yet acknowledged by the
// broker ("<segment id> <offset>\n"); it is rewritten at most every
// headPersistEvery, when a segment is deleted, and on close, so after a
// crash a few records may be sent again (the broker drops them as
// duplicates). "lock" is flock'ed by the owning process. "reserve" is a
// file of runReserve bytes allocated on the disk when the spool opens:
// when the disk is full (ENOSPC), a run-started or run-finished record
// frees what it needs of it and is written all the same.

const (
	segSuffix        = ".seg"
	headFile         = "head"
	lockFile         = "lock"
	reserveFile      = "reserve"
	segMagic         = "GTSPOOL2"
	recHeader        = 12 // marker, length, checksum
	recHeaderV1      = 8  // length, checksum (the previous format)
	headPersistEvery = 200 * time.Millisecond
)

// recMarker starts every record of the current format.
var recMarker = [4]byte{0xf7, 'G', 'S', 'R'}

var (
	errSpoolFull = errors.New("spool full")
	// errDiskFull wraps a write that failed because the spool's disk
	// (or the user's quota on it) is full.
	errDiskFull = errors.New("spool disk full")
	// errTorn is a record that ends past the end of its segment: what a
	// crash mid-write leaves.
	errTorn  = errors.New("record runs past the end of the segment")
	crcTable = crc32.MakeTable(crc32.Castagnoli)
)

// isDiskFull reports a write error of a full disk or quota.
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// spoolPos is a position in the spool: a segment and a byte offset in it.
type spoolPos struct {
	seg uint64
	off int64
}

type segment struct {
	id   uint64
	size int64
	// v1: written in the previous format (no header, no markers).
	v1 bool
	// holes are the byte ranges of corrupt records the reader skips, in
	// ascending order.
	holes []hole
}

// hole is a byte range [off, end) of a segment that holds no valid record.
type hole struct{ off, end int64 }

// start is the offset of the segment's first record.
func (sg *segment) start() int64 {
	if sg.v1 {
		return 0
	}
	return int64(len(segMagic))
}

// skipHole returns the end of the hole that starts at off, else off.
func (sg *segment) skipHole(off int64) int64 {
	for _, h := range sg.holes {
		if h.off == off {
			return h.end
		}
	}
	return off
}

// records is the segment's size without its header.
func (sg *segment) records() int64 { return sg.size - sg.start() }

// spool is an append-only on-disk queue. It is used by one goroutine.
type spool struct {
	dir      string
	maxBytes int64
	segBytes int64
	log      zerolog.Logger

	lock   *os.File
	segs   []segment // ascending ids; the last is the tail
	w      *os.File  // the tail segment, open for appending
	wID    uint64
	rf     *os.File // the segment being read
	rfID   uint64
	head   spoolPos // first unacknowledged record
	read   spoolPos // next record to hand out
	total  int64    // bytes of the records in all segments
	nextID uint64
	// lastRun is the run of the record next handed out last, to name
	// the neighbours of a hole.
	lastRun string

	lastPersist time.Time
	headDirty   bool
	corrupt     int // torn tails cut off and corrupt records skipped
	// loss counts what the corrupt records cost; read by Stats.
	loss spoolLoss

	// reserve is the size of the reserve file: disk space held for run
	// records when the disk is full.
	reserve int64
	// write appends to a segment: (*os.File).Write, which tests replace
	// to fail as a full disk does.
	write func(f *os.File, b []byte) (int, error)
}

func segName(id uint64) string { return fmt.Sprintf("%020d%s", id, segSuffix) }

// openSpool opens (creating) the spool in dir, locks it, cuts off a torn or
// corrupt tail and positions at the first unacknowledged record.
func openSpool(dir string, maxBytes, segBytes int64, log zerolog.Logger) (*spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create spool %s: %w", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open spool lock: %w", err)
	}
	if err := lockFileExclusive(lock); err != nil {
		lock.Close()
		return nil, fmt.Errorf("spool %s is in use by another process: %w", dir, err)
	}
	s := &spool{dir: dir, maxBytes: maxBytes, segBytes: segBytes, log: log, lock: lock, nextID: 1, write: (*os.File).Write}
	if err := s.load(); err != nil {
		s.close()
		return nil, err
	}
	if err := s.ensureReserve(); err != nil {
		log.Warn().Err(err).Str("spool", dir).Int64("reserve_bytes", s.reserve).
			Msg("no room on the spool's disk for its reserve: if the disk fills up, the runs' start and finish are only kept in memory")
	}
	return s, nil
}

// ensureReserve grows the reserve file to runReserve bytes, allocated on
// the disk (not a sparse file). On error it keeps what it could allocate.
func (s *spool) ensureReserve() error {
	path := filepath.Join(s.dir, reserveFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("spool reserve: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() >= runReserve {
		s.reserve = st.Size()
		return nil
	}
	err = preallocate(f, runReserve)
	if err == nil {
		err = f.Sync()
	}
	if st, serr := f.Stat(); serr == nil {
		s.reserve = st.Size()
	}
	if err != nil {
		return fmt.Errorf("spool reserve: %w", err)
	}
	return nil
}

// releaseReserve frees room for a record of n bytes from the reserve file
// (with a margin for the blocks the record straddles); false when the
// reserve holds less than n.
func (s *spool) releaseReserve(n int64) bool {
	if s.reserve < n {
		return false
	}
	const margin = 16 << 10 // the record's partial blocks and the file system's own
	keep := max(0, s.reserve-n-margin) &^ (4<<10 - 1)
	f, err := os.OpenFile(filepath.Join(s.dir, reserveFile), os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	// The sync commits the truncation: a journaling file system (ext4)
	// reuses freed blocks only once it is committed.
	if err := f.Truncate(keep); err != nil || f.Sync() != nil {
		return false
	}
	s.reserve = keep
	return true
}

func (s *spool) load() error {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("read spool %s: %w", s.dir, err)
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, segSuffix) || !e.Type().IsRegular() {
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSuffix(name, segSuffix), 10, 64)
		if err != nil || id == 0 {
			continue
		}
		s.segs = append(s.segs, segment{id: id})
	}
	slices.SortFunc(s.segs, func(a, b segment) int { return cmpUint(a.id, b.id) })
	if len(s.segs) > 0 {
		s.nextID = s.segs[len(s.segs)-1].id + 1
	}
	head := s.readHead()
	// Segments before the head were drained; a crash kept them.
	for len(s.segs) > 0 && s.segs[0].id < head.seg {
		if err := os.Remove(filepath.Join(s.dir, segName(s.segs[0].id))); err != nil {
			return fmt.Errorf("remove drained spool segment: %w", err)
		}
		s.segs = s.segs[1:]
	}
	if len(s.segs) == 0 || s.segs[0].id != head.seg {
		head = spoolPos{}
		if len(s.segs) > 0 {
			head.seg = s.segs[0].id
		}
	}
	for i := range s.segs {
		sg := &s.segs[i]
		from := int64(0)
		if sg.id == head.seg {
			from = head.off
		}
		if err := s.scan(i, from); err != nil {
			return err
		}
		if sg.id == head.seg && sg.size < head.off {
			head.off = sg.size
		}
		s.total += sg.records()
	}
	s.head = head
	s.normalizeHead()
	s.read = s.head
	if s.empty() {
		return s.reset()
	}
	return nil
}

// readHead reads the persisted head position (zero when absent or bad).
func (s *spool) readHead() spoolPos {
	b, err := os.ReadFile(filepath.Join(s.dir, headFile))
	if err != nil {
		return spoolPos{}
	}
	var p spoolPos
	if _, err := fmt.Sscanf(string(b), "%d %d", &p.seg, &p.off); err != nil || p.off < 0 {
		return spoolPos{}
	}
	return p
}

// scan validates the records of segment i from offset from on. A corrupt
// record becomes a hole up to the next valid record (the loss is said and
// counted); a torn tail of the last segment is cut off.
func (s *spool) scan(i int, from int64) error {
	sg := &s.segs[i]
	f, err := os.OpenFile(filepath.Join(s.dir, segName(sg.id)), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open spool segment: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat spool segment: %w", err)
	}
	size := st.Size()
	var magic [len(segMagic)]byte
	n, _ := f.ReadAt(magic[:], 0)
	if int64(n) == size && size < int64(len(magic)) && string(magic[:n]) == segMagic[:n] {
		// A crash right after the segment was created: no record.
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("truncate spool segment: %w", err)
		}
		size = 0
	}
	sg.v1 = string(magic[:n]) != segMagic && previousFormat(f, size)
	sg.size = size
	prev := ""
	for off := max(from, sg.start()); off < size; {
		w, n, err := readRecord(f, off, size, sg.v1)
		if err == nil {
			prev = runOf(w)
			off += n
			continue
		}
		next := resync(f, sg.v1, off+1, size)
		if next < 0 && i == len(s.segs)-1 && torn(f, off, size, err) {
			s.corrupt++
			s.log.Warn().Err(err).Str("segment", segName(sg.id)).Int64("offset", off).Int64("bytes_cut", size-off).
				Msg("spool segment ends in a torn record (a crash while writing it: its source sends it again), cutting it off")
			if err := f.Truncate(off); err != nil {
				return fmt.Errorf("truncate spool segment: %w", err)
			}
			sg.size = off
			return nil
		}
		if next < 0 {
			next = size
		}
		s.lose(sg, f, off, next, prev, err)
		off = next
	}
	return nil
}

func (s *spool) tailEnd() spoolPos {
	if len(s.segs) == 0 {
		return spoolPos{seg: s.head.seg}
	}
	t := s.segs[len(s.segs)-1]
	return spoolPos{seg: t.id, off: t.size}
}

// empty reports whether every record was acknowledged.
func (s *spool) empty() bool { return len(s.segs) == 0 || s.head == s.tailEnd() }

// bytes returns the spool's size on disk.
func (s *spool) bytes() int64 { return s.total }

func (s *spool) segIndex(id uint64) int {
	for i, sg := range s.segs {
		if sg.id == id {
			return i
		}
	}
	return -1
}

// runReserve is the room beyond max_bytes kept for run-started and
// run-finished events (one each per run), so that a full spool still keeps
// the run's finish and its count of dropped events.
const runReserve = 1 << 20

// append writes one record at the end; it is durable after sync. A record
// with reserve set may use runReserve bytes beyond maxBytes and, when the
// disk is full, the reserve file's room. A full disk's error wraps
// errDiskFull.
func (s *spool) append(w events.Wire, reserve bool) error {
	rec := encodeRecord(w)
	n := int64(len(rec))
	limit := s.maxBytes
	if reserve {
		limit += runReserve
	}
	if s.total+n > limit {
		return errSpoolFull
	}
	err := s.appendRecord(rec)
	if err != nil && reserve && isDiskFull(err) && s.releaseReserve(n) {
		err = s.appendRecord(rec)
	}
	if err != nil && isDiskFull(err) {
		return fmt.Errorf("%w: %w", errDiskFull, err)
	}
	return err
}

// appendRecord writes an encoded record at the end of the tail segment,
// starting a new one when it is full.
func (s *spool) appendRecord(rec []byte) error {
	n := int64(len(rec))
	if s.w == nil || (s.segs[len(s.segs)-1].records() > 0 && s.segs[len(s.segs)-1].records()+n > s.segBytes) {
		if err := s.rotate(); err != nil {
			return err
		}
	}
	tail := &s.segs[len(s.segs)-1]
	k, err := s.write(s.w, rec)
	if err != nil {
		if k > 0 {
			// Cut the partial record so the segment stays readable.
			if terr := s.w.Truncate(tail.size); terr != nil {
				err = errors.Join(err, terr)
			}
		}
		return fmt.Errorf("write spool: %w", err)
	}
	tail.size += n
	s.total += n
	return nil
}

// rotate starts a new tail segment.
func (s *spool) rotate() error {
	if s.w != nil {
		if err := s.w.Sync(); err != nil {
			return fmt.Errorf("sync spool segment: %w", err)
		}
		if err := s.w.Close(); err != nil {
			return fmt.Errorf("close spool segment: %w", err)
		}
		s.w = nil
	}
	id := s.nextID
	path := filepath.Join(s.dir, segName(id))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("create spool segment: %w", err)
	}
	if _, err := s.write(f, []byte(segMagic)); err != nil {
		f.Close()
		_ = os.Remove(path)
		return fmt.Errorf("create spool segment: %w", err)
	}
	s.nextID++
	s.w, s.wID = f, id
	s.segs = append(s.segs, segment{id: id, size: int64(len(segMagic))})
	if len(s.segs) == 1 {
		s.head = spoolPos{seg: id, off: int64(len(segMagic))}
		s.read = s.head
	}
	return syncDir(s.dir)
}

// sync makes the appended records durable.
func (s *spool) sync() error {
	if s.w == nil {
		return nil
	}
	if err := s.w.Sync(); err != nil {
		return fmt.Errorf("sync spool: %w", err)
	}
	return nil
}

// next returns the record at the read position and the position after it;
// false when every record was handed out. A corrupt record it comes upon
// becomes a hole up to the next valid one (said and counted).
func (s *spool) next() (events.Wire, spoolPos, bool) {
	for {
		if s.read.seg < s.head.seg {
			s.read = s.head // the segment was drained and deleted
		}
		if s.read == s.tailEnd() || len(s.segs) == 0 {
			return events.Wire{}, spoolPos{}, false
		}
		i := s.segIndex(s.read.seg)
		if i < 0 {
			return events.Wire{}, spoolPos{}, false
		}
		sg := &s.segs[i]
		if off := sg.skipHole(max(s.read.off, sg.start())); off != s.read.off {
			s.read.off = off
			continue
		}
		if s.read.off >= sg.size {
			if i+1 >= len(s.segs) {
				return events.Wire{}, spoolPos{}, false
			}
			s.read = spoolPos{seg: s.segs[i+1].id}
			continue
		}
		if s.rf == nil || s.rfID != sg.id {
			if s.rf != nil {
				s.rf.Close()
				s.rf = nil
			}
			f, err := os.Open(filepath.Join(s.dir, segName(sg.id)))
			if err != nil {
				s.lose(sg, nil, s.read.off, sg.size, s.lastRun, err)
				s.passHoles()
				continue
			}
			s.rf, s.rfID = f, sg.id
		}
		w, n, err := readRecord(s.rf, s.read.off, sg.size, sg.v1)
		if err != nil {
			end := resync(s.rf, sg.v1, s.read.off+1, sg.size)
			if end < 0 {
				end = sg.size
			}
			s.lose(sg, s.rf, s.read.off, end, s.lastRun, err)
			s.passHoles()
			continue
		}
		s.lastRun = runOf(w)
		s.read.off += n
		return w, s.read, true
	}
}

// passHoles moves a head that waits at a hole past it (what a hole held
// is lost, there is nothing to acknowledge), and resets a spool that is
// then empty.
func (s *spool) passHoles() {
	before := s.head
	s.normalizeHead()
	if s.head == before {
		return
	}
	s.headDirty = true
	if s.empty() {
		if err := s.reset(); err != nil {
			s.log.Error().Err(err).Msg("spool bookkeeping failed")
		}
	}
}

// pending counts the records not yet acknowledged, reading each one's
// header from the head on.
func (s *spool) pending() int {
	n := 0
	for _, sg := range s.segs {
		if sg.id < s.head.seg {
			continue
		}
		off := sg.start()
		if sg.id == s.head.seg {
			off = max(off, s.head.off)
		}
		if off >= sg.size {
			continue
		}
		f, err := os.Open(filepath.Join(s.dir, segName(sg.id)))
		if err != nil {
			continue
		}
		h := recHeaderOf(sg.v1)
		hdr := make([]byte, h)
		for {
			off = sg.skipHole(off)
			if off+h > sg.size {
				break
			}
			if _, err := f.ReadAt(hdr, off); err != nil {
				break
			}
			ln, err := recordLen(hdr, sg.v1)
			if err != nil {
				break
			}
			off += h + ln
			n++
		}
		f.Close()
	}
	return n
}

// rewind makes next start again at the first unacknowledged record.
func (s *spool) rewind() { s.read = s.head }

// commit marks every record before p as acknowledged, deletes the segments
// that became empty and, when nothing is left, resets the spool.
func (s *spool) commit(p spoolPos) error {
	s.head = p
	s.headDirty = true
	deleted, err := s.dropDrained()
	if err != nil {
		return err
	}
	if s.empty() {
		return s.reset()
	}
	if deleted || time.Since(s.lastPersist) >= headPersistEvery {
		return s.persistHead()
	}
	return nil
}

// normalizeHead moves a head before a segment's first record, or at a
// hole, past them, and a head at the end of a segment to the start of the
// next one.
func (s *spool) normalizeHead() {
	for {
		i := s.segIndex(s.head.seg)
		if i < 0 {
			return
		}
		sg := &s.segs[i]
		s.head.off = sg.skipHole(max(s.head.off, sg.start()))
		if i+1 >= len(s.segs) || s.head.off < sg.size {
			return
		}
		s.head = spoolPos{seg: s.segs[i+1].id}
	}
}

// dropDrained deletes the segments before the head.
func (s *spool) dropDrained() (bool, error) {
	s.normalizeHead()
	deleted := false
	for len(s.segs) > 1 && s.segs[0].id < s.head.seg {
		sg := s.segs[0]
		if s.rf != nil && s.rfID == sg.id {
			s.rf.Close()
			s.rf = nil
		}
		if err := os.Remove(filepath.Join(s.dir, segName(sg.id))); err != nil {
			return deleted, fmt.Errorf("remove drained spool segment: %w", err)
		}
		s.total -= sg.records()
		s.segs = s.segs[1:]
		deleted = true
	}
	return deleted, nil
}

// reset deletes every segment of an empty spool.
func (s *spool) reset() error {
	if s.w != nil {
		s.w.Close()
		s.w = nil
	}
	if s.rf != nil {
		s.rf.Close()
		s.rf = nil
	}
	for _, sg := range s.segs {
		if err := os.Remove(filepath.Join(s.dir, segName(sg.id))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove drained spool segment: %w", err)
		}
	}
	s.segs = nil
	s.total = 0
	s.head = spoolPos{seg: s.nextID}
	s.read = s.head
	if err := os.Remove(filepath.Join(s.dir, headFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove spool head: %w", err)
	}
	s.headDirty = false
	if s.reserve < runReserve {
		// Room again after a full disk: best effort, said at the next open.
		_ = s.ensureReserve()
	}
	return nil
}

// persistHead writes the head position atomically.
func (s *spool) persistHead() error {
	s.lastPersist = time.Now()
	if !s.headDirty {
		return nil
	}
	tmp := filepath.Join(s.dir, headFile+".tmp")
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %d\n", s.head.seg, s.head.off), 0o600); err != nil {
		return fmt.Errorf("write spool head: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, headFile)); err != nil {
		return fmt.Errorf("write spool head: %w", err)
	}
	s.headDirty = false
	return nil
}

// close persists the head and releases the files and the lock.
func (s *spool) close() error {
	var errs []error
	if s.lock != nil && !s.empty() {
		errs = append(errs, s.persistHead())
	}
	for _, f := range []*os.File{s.w, s.rf} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	s.w, s.rf = nil, nil
	if s.lock != nil {
		unlockFile(s.lock)
		errs = append(errs, s.lock.Close())
		s.lock = nil
	}
	return errors.Join(errs...)
}

// RemoveSpool deletes the spool directory dir (its lock and reserve
// files) when it holds no event; a spool with segments, or with rejected/
// files, is left as it is. A collector removes the spool it made for
// itself (a lane's spool was in use) once it is empty.
func RemoveSpool(dir string) error {
	segs, err := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	if err != nil || len(segs) > 0 {
		return err
	}
	for _, name := range []string{reserveFile, headFile, lockFile} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		if ents, rerr := os.ReadDir(dir); rerr == nil && len(ents) > 0 {
			return nil // rejected/ is kept for a look
		}
		return err
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open spool dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync spool dir: %w", err)
	}
	return nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
