//go:build linux

package offline

import (
	"math"
	"os"
	"syscall"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// readLogMapped feeds the log file f (size bytes when opened) to feed from
// a read-only shared mapping of its first size bytes: the workers scan
// the page cache in place, nothing is copied (a read copies every byte
// out of the page cache into the process, which is most of what reading
// a log costs). The blocks' pages are released once applied, so the
// mapping's resident part is the blocks in flight (see mapWindow), not
// the file. What follows the last newline (a line without its
// newline, what was appended since the file was opened) is read with
// ReadAt. It returns errNoMap, having fed nothing, when the file cannot
// be mapped (a file system without mmap, no address space this large).
func readLogMapped(feed *split.LogFeed, f *os.File, size int64, block, workers int) (uint64, error) {
	if size <= 0 || size > math.MaxInt {
		return 0, errNoMap
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return 0, errNoMap
	}
	defer syscall.Munmap(m)
	return readMapped(feed, &mapBlocks{m: m, block: block, page: os.Getpagesize()}, f, size, workers)
}

// readMapped feeds the log of the mapping src.m (of f, size bytes) to
// feed, the blocks in flight as mapWindow bounds them.
func readMapped(feed *split.LogFeed, src *mapBlocks, f *os.File, size int64, workers int) (uint64, error) {
	w, inflight := mapWindow(src.block, workers)
	return readPieces(feed, src, f, size, src.block, w, inflight)
}

// dontNeed drops b's pages from the mapping (they stay in the page
// cache); a refusal is ignored: it is advice.
func dontNeed(b []byte) { _ = syscall.Madvise(b, syscall.MADV_DONTNEED) }
