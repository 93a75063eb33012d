package natstest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy between clients and a real server that can make
// the server late: every byte the server sends (its acks among them)
// reaches the client a fixed latency after it was sent, without limiting
// the throughput, as from a broker that is healthy but under load; and
// Hold keeps them back altogether (acks that do not come) until Release,
// while the clients' bytes still get through. Its URL is what clients
// dial.
type Proxy struct {
	ln    net.Listener
	delay time.Duration

	mu    sync.Mutex
	open  chan struct{} // closed while the server's bytes flow
	conns []net.Conn
	wg    sync.WaitGroup
}

// StartProxy listens on a free loopback port and forwards to target
// (host:port), delaying what the server sends by delay (0: none); it stops
// when the test ends.
func StartProxy(t testing.TB, target string, delay time.Duration) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, delay: delay, open: make(chan struct{})}
	close(p.open)
	p.wg.Add(1)
	go p.accept(target)
	t.Cleanup(p.Close)
	return p
}

// URL is the proxy's nats:// URL.
func (p *Proxy) URL() string { return "nats://" + p.ln.Addr().String() }

// Hold keeps what the server sends from reaching the clients.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

// Release lets it through again.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

func (p *Proxy) accept(target string) {
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

// late copies from src to dst, each chunk delay after it was read and
// while the proxy does not hold.
func (p *Proxy) late(dst, src net.Conn) {
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
			p.mu.Lock()
			open := p.open
			p.mu.Unlock()
			<-open
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

// Close stops the proxy (letting what it held go) and closes its
// connections.
func (p *Proxy) Close() {
	p.Release()
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
