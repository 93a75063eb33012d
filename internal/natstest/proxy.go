package natstest

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy in front of a server, for tests that make the
// network misbehave between a client and a real server:
//
//   - Freeze cuts a client off without closing its connection: nothing is
//     forwarded in either direction (what the client sends meanwhile waits
//     in the proxy and the kernel's buffers, and arrives, late, once it
//     thaws), as a network partition or a paused peer would.
//   - HoldServer keeps only what the server sends (its acks among them)
//     from reaching the clients, while their bytes still get through:
//     acks that do not come. HoldServerWhenClientSends does it from a
//     given request on (a pull whose messages and heartbeats stop).
//   - Cut closes every connection open now, dropping what waits in the
//     proxy for it (a frozen connection's bytes never arrive): the
//     network between a client that gave a connection up and its server
//     was down until then. Connections made later are forwarded.
//   - SetLatency delays every byte the server sends by a fixed time,
//     without limiting the throughput: a broker that is healthy but slow
//     to answer, as one under load is.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	frozen  bool
	held    bool
	holdOn  []byte        // HoldServerWhenClientSends's pattern
	holding chan struct{} // closed when it was seen
	latency time.Duration
	thawed  *sync.Cond // signalled when frozen or held ends
	conns   []net.Conn
	wg      sync.WaitGroup
}

// StartProxy listens on a free local port and forwards to target
// (host:port) until the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target}
	p.thawed = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// URL is the nats:// URL of the proxy.
func (p *Proxy) URL() string { return "nats://" + p.ln.Addr().String() }

// Freeze stops forwarding.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = true
}

// Thaw forwards again, what waited first.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = false
	p.thawed.Broadcast()
}

// HoldServer keeps what the server sends from reaching the clients.
func (p *Proxy) HoldServer() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = true
}

// ReleaseServer lets it through again, what waited first.
func (p *Proxy) ReleaseServer() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = false
	p.thawed.Broadcast()
}

// HoldServerWhenClientSends holds the server (as HoldServer) from the
// moment a client sends bytes holding pattern, before they reach the
// server: what the server answers to them, and sends after, waits for
// ReleaseServer. The returned channel is closed then. The pattern is
// looked for in each read from a client on its own (a client writes a
// protocol message in one go; one split across two reads is missed).
func (p *Proxy) HoldServerWhenClientSends(pattern []byte) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdOn, p.holding = pattern, make(chan struct{})
	return p.holding
}

// Cut closes the connections open now; what waits for them is dropped.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// SetLatency makes every byte the server sends from now on reach its
// client d after it was sent (0: at once).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = d
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.frozen, p.held = false, false
	p.thawed.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(s, c, false)
		go p.pipe(c, s, true)
	}
}

// pipe copies from src to dst; fromServer chunks are delayed by the
// latency (a writer of their own keeps reading at full speed) and held
// while the server is held.
func (p *Proxy) pipe(dst, src net.Conn, fromServer bool) {
	defer p.wg.Done()
	defer dst.Close()
	type chunk struct {
		b  []byte
		at time.Time
	}
	q := make(chan chunk, 4096)
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		failed := false
		for c := range q {
			if failed {
				continue // let the reader finish
			}
			time.Sleep(time.Until(c.at))
			p.mu.Lock()
			for p.frozen || fromServer && p.held {
				p.thawed.Wait()
			}
			p.mu.Unlock()
			if _, err := dst.Write(c.b); err != nil {
				failed = true
				_ = src.Close()
			}
		}
	}()
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			at := time.Now()
			p.mu.Lock()
			if fromServer {
				at = at.Add(p.latency)
			} else if p.holdOn != nil && bytes.Contains(buf[:n], p.holdOn) {
				p.held, p.holdOn = true, nil
				close(p.holding)
			}
			p.mu.Unlock()
			q <- chunk{b: buf[:n], at: at}
		}
		if err != nil {
			if err != io.EOF {
				_ = src.Close()
			}
			break
		}
	}
	close(q)
	<-wrote
}
