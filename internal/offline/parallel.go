package offline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// A log file is read in blocks: block k is its bytes [k×block, (k+1)×block)
// of the first size bytes (its size when opened). Workers take the blocks
// in turn, and each scans the whole lines its block holds
// (llamalog.Parser.ScanPiece, a pure function of the bytes) and parses the
// lines the scan found (split.ParsePiece, the same); the calling
// goroutine folds the blocks in file order, so the fold is the one
// Fold.ReadLog gives. A line that crosses from one block into the next is
// put together from the two (or more) blocks by the applier, so no byte
// of the file is read twice. What follows the last newline of the first
// size bytes (a last line without its newline, or what was written to the
// file since it was opened) is read on to the end with LogFeed.ReadFrom.

// blockSource hands out the blocks of a file.
type blockSource interface {
	// load puts block k's bytes in pb.data (maybe in pb.buf). It is
	// called on the workers, for any k in any order.
	load(pb *piece, k int64) error
	// applied tells that block k is applied: its bytes are not looked
	// at again.
	applied(k int64)
}

// piece is one block, how its lines fall and what the scan found in
// them. A block without a newline (noEOL) continues a line; any other
// is: data[:head] the end of the line the blocks before left open (the
// block's first newline included), data[head:body] the whole lines that
// start in it, data[body:] the start of a line the next blocks end.
type piece struct {
	k          int64
	buf        []byte
	data       []byte
	noEOL      bool
	head, body int
	pc         llamalog.Piece
	pr         split.PieceRecords
	err        error
}

// cut finds the block's first and last newlines, scans its whole lines
// and parses the lines the scan found (only their folding is left to the
// goroutine that applies the blocks in order).
func (pb *piece) cut(p *llamalog.Parser, debug bool) {
	d := pb.data
	i := bytes.IndexByte(d, '\n')
	pb.noEOL = i < 0
	if pb.noEOL {
		return
	}
	pb.head = i + 1
	pb.body = bytes.LastIndexByte(d, '\n') + 1
	p.ScanPiece(d[pb.head:pb.body], debug, &pb.pc)
	split.ParsePiece(p, d[pb.head:pb.body], &pb.pc, &pb.pr)
}

// readPieces feeds to feed the log of which src hands out the first size
// bytes, in blocks of block bytes, on workers goroutines, at most inflight
// blocks held at a time; then the rest of r from the start of the last
// line on. It returns the number of lines.
func readPieces(feed *split.LogFeed, src blockSource, r io.ReaderAt, size int64, block, workers, inflight int) (lines uint64, err error) {
	nblocks := (size + int64(block) - 1) / int64(block)
	workers = int(min(int64(max(1, workers)), nblocks))
	inflight = max(inflight, workers, 1)
	free := make(chan *piece, inflight)
	out := make(chan *piece, inflight)
	for range inflight {
		free <- &piece{}
	}
	done := make(chan struct{})
	var next atomic.Int64
	var wantDebug atomic.Bool
	wantDebug.Store(feed.WantDebug())
	p := feed.Parser()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			// A mapped file cut short under the reader faults: an error
			// of the block, not a crash (see pieceFault).
			debug.SetPanicOnFault(true)
			for {
				var pb *piece
				select {
				case pb = <-free:
				case <-done:
					return
				}
				k := next.Add(1) - 1
				if k >= nblocks {
					free <- pb
					return
				}
				pb.k = k
				pb.err = pieceFault(func() error {
					if err := src.load(pb, k); err != nil {
						return err
					}
					pb.cut(p, wantDebug.Load())
					return nil
				})
				out <- pb
			}
		})
	}
	defer func() {
		close(done)
		wg.Wait()
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	ring := make([]*piece, inflight)
	// The line the blocks so far left open starts at offset open; carry
	// holds it, unless it crossed a whole block (long: it is read again
	// when it ends, or by ReadFrom at the end).
	var carry []byte
	var open int64
	long := false
	var stitch llamalog.Piece
	err = pieceFault(func() error {
		for k := int64(0); k < nblocks; k++ {
			i := k % int64(inflight)
			for ring[i] == nil {
				pb := <-out
				ring[pb.k%int64(inflight)] = pb
			}
			pb := ring[i]
			ring[i] = nil
			if pb.err != nil {
				return pb.err
			}
			d := pb.data
			if pb.noEOL {
				if len(d) > 0 {
					carry, long = carry[:0], true
				}
			} else {
				end := k*int64(block) + int64(pb.head)
				if long {
					carry = slices.Grow(carry[:0], int(end-open))[:end-open]
					if _, err := readAt(r, carry, open); err != nil {
						return err
					}
				} else {
					carry = append(carry, d[:pb.head]...)
				}
				p.ScanPiece(carry, feed.WantDebug(), &stitch)
				feed.Apply(carry, &stitch)
				feed.ApplyParsed(d[pb.head:pb.body], &pb.pc, &pb.pr)
				carry, long = append(carry[:0], d[pb.body:]...), false
				open = k*int64(block) + int64(pb.body)
				if !feed.WantDebug() {
					wantDebug.Store(false)
				}
			}
			src.applied(k)
			free <- pb
		}
		return nil
	})
	if err != nil {
		return feed.Lines(), err
	}
	// The open line, and whatever was appended to the file since it was
	// opened, to the end.
	if _, err := feed.ReadFrom(io.NewSectionReader(r, open, math.MaxInt64-open)); err != nil {
		return feed.Lines(), err
	}
	return feed.Close(), nil
}

// readAt fills b from offset off of r; a file cut short is errShrank.
func readAt(r io.ReaderAt, b []byte, off int64) (int, error) {
	n, err := r.ReadAt(b, off)
	if err == io.EOF {
		err = nil
		if n < len(b) {
			err = errShrank
		}
	}
	return n, err
}

// errShrank is the error of a mapped log cut short while it is read.
var errShrank = errors.New("the log file shrank while it was read")

// pieceFault runs f, turning a fault on a memory-mapped file's bytes (the
// file was truncated under the mapping: SIGBUS, a panic with
// debug.SetPanicOnFault) into errShrank.
func pieceFault(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(interface{ Addr() uintptr }); ok {
				err = fmt.Errorf("%w (a fault at %#x)", errShrank, e.Addr())
				return
			}
			panic(r)
		}
	}()
	return f()
}

// readBlocks reads the blocks with ReadAt: the streaming reader's copy out
// of the page cache, on every core. A block starts at a multiple of its
// size (a multiple of the page size), and buffers this large start on a
// page: the kernel copies whole aligned words (from an odd offset its
// copy is 5× slower).
type readBlocks struct {
	r     io.ReaderAt
	size  int64
	block int
}

func (s *readBlocks) load(pb *piece, k int64) error {
	off := k * int64(s.block)
	n := int(min(int64(s.block), s.size-off))
	if cap(pb.buf) < n {
		pb.buf = make([]byte, s.block)
	}
	m, err := s.r.ReadAt(pb.buf[:n], off)
	if err == io.EOF {
		err = nil // cut short since it was opened: the rest is read on
	}
	pb.data = pb.buf[:m]
	return err
}

func (s *readBlocks) applied(int64) {}

// errNoMap is readLogMapped's answer for a file it cannot map.
var errNoMap = errors.New("cannot map the file")

// mapBlock is the block of a mapped file: the workers touch the mapping
// page by page as they scan, so its size costs no copy; a larger block is
// fewer releases and hand-overs, a smaller one less resident. mapInFlight
// bounds what the blocks in flight hold (see mapWindow).
const (
	mapBlock    = 4 << 20
	mapInFlight = 32 << 20
)

// mapWindow returns how many workers scan a mapped file in blocks of
// block bytes and how many blocks are in flight (taken by a worker and
// not yet applied and released): two a worker, at most mapInFlight bytes
// whatever the number of cores, and a worker fewer than blocks. A worker
// takes a block only with a piece the applier gave back, and the applier
// gives a piece back only once its block is released, so this bounds the
// mapping's resident pages by construction, however the goroutines are
// scheduled: a starved applier stops the workers, it does not let them
// run ahead.
func mapWindow(block, workers int) (w, inflight int) {
	inflight = max(2, min(2*max(1, workers), mapInFlight/max(1, block)))
	return max(1, min(workers, inflight-1)), inflight
}

// mapBlocks hands out the blocks of a mapped file (or of bytes in memory,
// with page 0).
type mapBlocks struct {
	m     []byte
	block int
	page  int
	// released, when set (by a test), is called after block k's
	// pages are released.
	released func(k int64)
}

func (s *mapBlocks) load(pb *piece, k int64) error {
	off := k * int64(s.block)
	pb.data = s.m[off:min(off+int64(s.block), int64(len(s.m)))]
	return nil
}

// applied releases the pages of block k and of the block before it
// (MADV_DONTNEED: they stay in the page cache, the mapping drops them),
// but a page that holds bytes of block k+1. The kernel maps the pages
// around a fault too (fault-around, a large folio whole), and where the
// mapping does not start on such a window's edge, a fault at the start
// of block k maps pages of block k-1 after k-1 was released: they go
// with block k. A page released twice costs a walk of empty page tables;
// a page still to be read is faulted in again (a shared mapping of a
// file loses nothing).
func (s *mapBlocks) applied(k int64) {
	if s.page == 0 {
		return
	}
	p := int64(s.page)
	lo := max(0, (k-1)*int64(s.block)) / p * p
	hi := (k + 1) * int64(s.block)
	if hi < int64(len(s.m)) {
		hi = hi / p * p
	} else {
		hi = int64(len(s.m))
	}
	if hi > lo {
		dontNeed(s.m[lo:hi])
	}
	if s.released != nil {
		s.released(k)
	}
}

// readBlock is the block of a read with ReadAt: small enough that a
// worker scans its block while the block is still in the core's cache.
const readBlock = 512 << 10

// readLogParallel feeds the log r (a file of size bytes when opened) to
// feed, reading it in blocks of block bytes with ReadAt on workers
// goroutines, 2×workers blocks held at a time. It returns the number of
// lines.
func readLogParallel(feed *split.LogFeed, r io.ReaderAt, size int64, block, workers int) (uint64, error) {
	return readPieces(feed, &readBlocks{r: r, size: size, block: block}, r, size, block, workers, 2*workers)
}

// workers is how many goroutines scan a log in parallel.
func workers() int { return runtime.GOMAXPROCS(0) }
