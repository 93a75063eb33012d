package offline

import (
	"io"
	"sync"
)

// readAhead reads r on its own goroutine, a few blocks ahead of the
// consumer, so the read system calls (the kernel's copy out of the page
// cache) run on one core while the fold scans on another. It holds at
// most (depth+2)×blockSize bytes.
type readAhead struct {
	full  chan []byte
	free  chan []byte
	cur   []byte // the block being consumed, cur[off:] unread
	off   int
	err   error // r's error once full is closed
	done  chan struct{}
	close sync.Once
}

const (
	raBlock = 1 << 20
	raDepth = 3
)

func newReadAhead(r io.Reader) *readAhead {
	ra := &readAhead{full: make(chan []byte, raDepth), free: make(chan []byte, raDepth+1), done: make(chan struct{})}
	for i := 0; i < raDepth+1; i++ {
		ra.free <- make([]byte, raBlock)
	}
	go func() {
		defer close(ra.full)
		for {
			var b []byte
			select {
			case b = <-ra.free:
			case <-ra.done:
				return
			}
			n, err := io.ReadFull(r, b)
			if n > 0 {
				ra.full <- b[:n]
			}
			if err != nil {
				if err == io.ErrUnexpectedEOF {
					err = io.EOF
				}
				ra.err = err // read by Read after full is closed
				return
			}
		}
	}()
	return ra
}

func (ra *readAhead) Read(p []byte) (int, error) {
	for ra.off == len(ra.cur) {
		if ra.cur != nil {
			ra.free <- ra.cur[:cap(ra.cur)]
			ra.cur, ra.off = nil, 0
		}
		b, ok := <-ra.full
		if !ok {
			return 0, ra.err
		}
		ra.cur, ra.off = b, 0
	}
	n := copy(p, ra.cur[ra.off:])
	ra.off += n
	return n, nil
}

// Close stops the reading goroutine (after its current read) and waits
// for it.
func (ra *readAhead) Close() {
	ra.close.Do(func() { close(ra.done) })
	for range ra.full {
	}
}
