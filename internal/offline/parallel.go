package offline

import (
	"bytes"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// parBlock is how much of the file each piece of a parallel read starts
// from: small enough that a worker scans its piece while the piece is
// still in the core's cache.
const parBlock = 512 << 10

// readLogParallel feeds the log r (a file of size bytes when opened) to
// feed, on workers goroutines: each reads a piece of the file with ReadAt
// and scans it (llamalog.Parser.ScanPiece, a pure function of the bytes),
// and the calling goroutine applies the pieces in file order, so the fold
// is the one Fold.ReadLog gives. The file is cut into blocks of block
// bytes; a piece is the lines that start in its block (a line is read on
// to its end, however long), and the last piece reads on to the end of
// the file. At most 2×workers pieces are held at a time. It returns the
// number of lines.
func readLogParallel(feed *split.LogFeed, r io.ReaderAt, size int64, block, workers int) (uint64, error) {
	nblocks := max(1, (size+int64(block)-1)/int64(block))
	workers = int(min(int64(max(1, workers)), nblocks))
	nbuf := 2 * workers
	free := make(chan *piece, nbuf)
	out := make(chan *piece, nbuf)
	for range nbuf {
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
				pb.err = pb.read(r, k, int64(block), k == nblocks-1)
				if pb.err == nil {
					p.ScanPiece(pb.data, wantDebug.Load(), &pb.pc)
				}
				out <- pb
			}
		})
	}
	defer func() {
		close(done)
		wg.Wait()
	}()
	ring := make([]*piece, nbuf)
	for k := int64(0); k < nblocks; k++ {
		i := k % int64(nbuf)
		for ring[i] == nil {
			pb := <-out
			ring[pb.k%int64(nbuf)] = pb
		}
		pb := ring[i]
		ring[i] = nil
		if pb.err != nil {
			return feed.Lines(), pb.err
		}
		feed.Apply(pb.data, &pb.pc)
		if !feed.WantDebug() {
			wantDebug.Store(false)
		}
		free <- pb
	}
	return feed.Close(), nil
}

// piece is one block's lines and what the scan found in them.
type piece struct {
	k    int64
	buf  []byte
	data []byte // the lines that start in block k
	pc   llamalog.Piece
	err  error
}

// read reads the lines that start in block k into pb.data: from the first
// line start at or after k×block (the byte before the block tells whether
// a line starts at its first byte) to the first line start at or after
// the next block, or, for the last block, to the end of the file.
func (pb *piece) read(r io.ReaderAt, k, block int64, last bool) error {
	off := k * block
	base, lo := off-1, int64(1) // the file offset of buf[0]; off's index
	if k == 0 {
		base, lo = 0, 0
	}
	want := int(lo + block)
	if cap(pb.buf) < want {
		pb.buf = make([]byte, want)
	}
	n, eof, err := readAt(r, pb.buf[:want], base)
	if err != nil {
		return err
	}
	data := pb.buf[:n]
	s := 0
	if k > 0 {
		// A line starts in the block after each newline at offsets
		// off-1 .. off+block-2.
		j := bytes.IndexByte(data[:min(len(data), int(block))], '\n')
		if j < 0 {
			pb.data = data[:0] // inside a line that started before
			return nil
		}
		s = j + 1
	}
	from := int(lo + block - 1) // the first newline from here ends the piece
	for {
		if !last && from < len(data) {
			if j := bytes.IndexByte(data[from:], '\n'); j >= 0 {
				pb.data = data[s : from+j+1]
				return nil
			}
		}
		from = max(from, len(data))
		if eof {
			pb.data = data[s:]
			return nil
		}
		// A long line, or the last block: read on, a block at a time.
		if cap(data)-len(data) < int(block) {
			nb := make([]byte, len(data), 2*len(data)+int(block))
			copy(nb, data)
			pb.buf, data = nb, nb
		}
		var m int
		m, eof, err = readAt(r, data[len(data):len(data)+int(block)], base+int64(len(data)))
		if err != nil {
			return err
		}
		data = data[:len(data)+m]
	}
}

// readAt fills b from offset off, short only at the end of the file.
func readAt(r io.ReaderAt, b []byte, off int64) (n int, eof bool, err error) {
	n, err = r.ReadAt(b, off)
	if err == io.EOF {
		return n, true, nil
	}
	return n, false, err
}

// workers is how many goroutines scan a log in parallel.
func workers() int { return runtime.GOMAXPROCS(0) }
