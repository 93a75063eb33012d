package natstest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// SlowProxy is a TCP proxy between clients and a real server that delays
// every byte the server sends (its acks among them) by a fixed latency,
// without limiting the throughput: a broker that is healthy but slow to
// answer, as one under load is. Its URL is what clients dial.
type SlowProxy struct {
	ln    net.Listener
	delay time.Duration

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// StartSlowProxy listens on a free loopback port and forwards to target
// (host:port), delaying what the server sends by delay; it stops when the
// test ends.
func StartSlowProxy(t testing.TB, target string, delay time.Duration) *SlowProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &SlowProxy{ln: ln, delay: delay}
	p.wg.Add(1)
	go p.accept(target)
	t.Cleanup(p.Close)
	return p
}

// URL is the proxy's nats:// URL.
func (p *SlowProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *SlowProxy) accept(target string) {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(s, c)
			_ = s.Close()
			_ = c.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.late(c, s)
		}()
	}
}

// late copies from src to dst, each chunk delay after it was read.
func (p *SlowProxy) late(dst, src net.Conn) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	q := make(chan chunk, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			time.Sleep(time.Until(c.at))
			if _, err := dst.Write(c.b); err != nil {
				_ = src.Close()
				for range q { // let the reader finish
				}
				return
			}
		}
	}()
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{b: buf[:n], at: time.Now().Add(p.delay)}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
	_ = dst.Close()
}

// Close stops the proxy and closes its connections.
func (p *SlowProxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
