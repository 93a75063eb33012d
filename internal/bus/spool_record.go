package bus

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"

	"github.com/gttsplit/gttsplit/pkg/events"
)

// A spool record as it sits in a segment (the format is spool.go's):
// encoding and decoding one, reading one at an offset, and telling a torn
// tail from a hole and resynchronising past it.

// torn reports whether a bad record at off, with no valid one after it,
// is what a crash mid-write leaves: a record cut short, or zeros (a file
// extended whose data never reached the disk).
func torn(f *os.File, off, size int64, err error) bool {
	if errors.Is(err, errTorn) {
		return true
	}
	b := make([]byte, size-off)
	if _, err := f.ReadAt(b, off); err != nil {
		return false
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// previousFormat tells a segment without the current header: of the
// previous format when it starts with a valid record of that format, or
// holds no valid record of the current one (a current segment whose
// header was damaged still has its markers).
func previousFormat(f *os.File, size int64) bool {
	if size == 0 {
		return true
	}
	if _, _, err := readRecord(f, 0, size, true); err == nil {
		return true
	}
	return resync(f, false, 0, size) < 0
}

// resync returns the offset of the first valid record at or after off, or
// -1: the next marker that starts a valid record, or in a segment of the
// previous format the next offset where one starts.
func resync(f *os.File, v1 bool, off, size int64) int64 {
	if off >= size {
		return -1
	}
	b := make([]byte, size-off)
	if _, err := f.ReadAt(b, off); err != nil {
		return -1
	}
	for i := 0; i < len(b); i++ {
		if !v1 {
			j := bytes.Index(b[i:], recMarker[:])
			if j < 0 {
				return -1
			}
			i += j
		}
		if _, _, err := parseRecord(b[i:], v1); err == nil {
			return off + int64(i)
		}
	}
	return -1
}

// recHeaderOf is the size of a record's header in a segment of the
// previous format (v1) or the current one.
func recHeaderOf(v1 bool) int64 {
	if v1 {
		return recHeaderV1
	}
	return recHeader
}

// recordLen reads the payload length from a record's header, checking the
// marker; an incomplete header is errTorn.
func recordLen(hdr []byte, v1 bool) (int64, error) {
	if int64(len(hdr)) < recHeaderOf(v1) {
		return 0, fmt.Errorf("short record header: %w", errTorn)
	}
	if v1 {
		return int64(binary.LittleEndian.Uint32(hdr[0:4])), nil
	}
	if !bytes.Equal(hdr[0:4], recMarker[:]) {
		return 0, errors.New("no record marker")
	}
	return int64(binary.LittleEndian.Uint32(hdr[4:8])), nil
}

// readRecord reads the record at off of a segment file of the given size
// and returns it with its length on disk.
func readRecord(f *os.File, off, size int64, v1 bool) (events.Wire, int64, error) {
	h := recHeaderOf(v1)
	hdr := make([]byte, min(h, size-off))
	if _, err := f.ReadAt(hdr, off); err != nil {
		return events.Wire{}, 0, fmt.Errorf("read record header: %w", err)
	}
	n, err := recordLen(hdr, v1)
	if err != nil {
		return events.Wire{}, 0, err
	}
	if n > size-off-h {
		return events.Wire{}, 0, errTorn
	}
	b := make([]byte, h+n)
	if _, err := f.ReadAt(b, off); err != nil {
		return events.Wire{}, 0, fmt.Errorf("read record: %w", err)
	}
	return parseRecord(b, v1)
}

// parseRecord checks and decodes the record at the start of b and returns
// it with its length on disk.
func parseRecord(b []byte, v1 bool) (events.Wire, int64, error) {
	h := recHeaderOf(v1)
	n, err := recordLen(b, v1)
	if err != nil {
		return events.Wire{}, 0, err
	}
	if n > int64(len(b))-h {
		return events.Wire{}, 0, errTorn
	}
	payload := b[h : h+n]
	var sum, want uint32
	if v1 {
		sum, want = crc32.Checksum(payload, crcTable), binary.LittleEndian.Uint32(b[4:8])
	} else {
		sum = crc32.Update(crc32.Checksum(b[4:8], crcTable), crcTable, payload)
		want = binary.LittleEndian.Uint32(b[8:12])
	}
	if sum != want {
		return events.Wire{}, 0, errors.New("record checksum mismatch")
	}
	w, err := decodeRecord(payload)
	if err != nil {
		return events.Wire{}, 0, err
	}
	return w, h + n, nil
}

func encodeRecord(w events.Wire) []byte {
	b := make([]byte, recHeader, recHeader+2*binary.MaxVarintLen64+len(w.Subject)+len(w.ID)+len(w.Data))
	b = binary.AppendUvarint(b, uint64(len(w.Subject)))
	b = append(b, w.Subject...)
	b = binary.AppendUvarint(b, uint64(len(w.ID)))
	b = append(b, w.ID...)
	b = append(b, w.Data...)
	copy(b[0:4], recMarker[:])
	binary.LittleEndian.PutUint32(b[4:8], uint32(len(b)-recHeader))
	binary.LittleEndian.PutUint32(b[8:12], crc32.Update(crc32.Checksum(b[4:8], crcTable), crcTable, b[recHeader:]))
	return b
}

func decodeRecord(p []byte) (events.Wire, error) {
	var w events.Wire
	for _, dst := range []*string{&w.Subject, &w.ID} {
		n, k := binary.Uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) {
			return events.Wire{}, errors.New("malformed record")
		}
		*dst = string(p[k : k+int(n)])
		p = p[k+int(n):]
	}
	w.Data = p
	return w, nil
}
