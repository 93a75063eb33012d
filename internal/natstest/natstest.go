// Package natstest runs a real, embedded nats-server with JetStream for
// tests: never a mock. Start gives a server on a free port with its store
// in t.TempDir(); NewServer gives one on a chosen store directory and port,
// for restart tests (same store, same port) and testscript Setup. Connect
// and JetStream give a test a client on it, closed when the test ends.
package natstest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// readyTimeout bounds the wait for a started server to accept clients;
// clusterReadyTimeout the same for a cluster's server, which also waits
// for its routes and its share of JetStream, and for the cluster's meta
// leader and first R3 stream. Bounds, not expectations: a healthy server
// is ready at once. Under -race beside CI a server restarted on its store
// took more than 10 s to recover it, and a cluster more than 30 s to
// create its first R3 stream.
const (
	readyTimeout        = time.Minute
	clusterReadyTimeout = 90 * time.Second
	// ConnectTimeout bounds a test client's connection attempt (nats.go's
	// default is 2 s): at load ~37 under -race a server's first INFO took
	// longer (TestRunNATSIntegration, "read tcp ...: i/o timeout"). A
	// bound, not an expectation: a healthy server answers at once.
	ConnectTimeout = time.Minute
)

// Options returns the server options NewServer uses: JetStream with its
// store under storeDir, listening on 127.0.0.1:port (port <= 0 picks a free
// port), no logging, no signal handlers.
func Options(storeDir string, port int) *server.Options {
	if port <= 0 {
		port = server.RANDOM_PORT
	}
	return &server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  storeDir,
		NoLog:     true,
		NoSigs:    true,
		// Bound the store so a test can never fill the disk.
		JetStreamMaxStore:  1 << 30,
		JetStreamMaxMemory: 64 << 20,
	}
}

// NewServer starts an embedded JetStream server with its store in storeDir
// on 127.0.0.1:port (port <= 0 picks a free port) and waits until it
// accepts clients. The caller shuts it down (see Shutdown).
func NewServer(storeDir string, port int) (*server.Server, error) {
	return NewServerWithOptions(Options(storeDir, port))
}

// NewServerWithOptions starts an embedded server from opts (for tests that
// need authentication or TLS) and waits until it accepts clients.
func NewServerWithOptions(opts *server.Options) (*server.Server, error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natstest: new server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(readyTimeout) {
		Shutdown(s)
		return nil, fmt.Errorf("natstest: server on port %d not ready within %s", opts.Port, readyTimeout)
	}
	return s, nil
}

// StartConfigFile starts an embedded server from a nats-server
// configuration file (accounts, users, operator mode: what a test of
// authentication needs), without logging or signal handlers, and shuts it
// down when the test ends.
func StartConfigFile(t testing.TB, path string) *server.Server {
	t.Helper()
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("natstest: %s: %v", path, err)
	}
	opts.NoLog, opts.NoSigs = true, true
	s, err := NewServerWithOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Shutdown(s) })
	return s
}

// Shutdown stops s and waits until it has stopped (its port and store are
// free again). It is safe to call more than once.
func Shutdown(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

// Start starts an embedded JetStream server on a free port with its store
// in t.TempDir(), and shuts it down when the test ends.
func Start(t testing.TB) *server.Server {
	t.Helper()
	return StartAt(t, t.TempDir(), -1)
}

// StartAt is Start with a chosen store directory and port, for tests that
// stop a server and start another on the same store and port.
func StartAt(t testing.TB, storeDir string, port int) *server.Server {
	t.Helper()
	s, err := NewServer(storeDir, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Shutdown(s) })
	return s
}

// Port returns the client port s listens on (0 when it does not listen).
func Port(s *server.Server) int {
	if a, ok := s.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// Connect connects to url (a server's ClientURL, or a cluster's URLs),
// fails the test when it cannot, and closes the connection when the test
// ends. The connection reconnects for ever, every 50 ms (a test restarts
// or kills servers); opts come after that and may change it.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.Timeout(ConnectTimeout), nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("natstest: connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream connects to url as Connect does and returns a JetStream
// context on the connection.
func JetStream(t testing.TB, url string, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(Connect(t, url, opts...))
	if err != nil {
		t.Fatalf("natstest: jetstream on %s: %v", url, err)
	}
	return js
}

// Cluster is n embedded JetStream servers routed into one cluster, each
// on free ports with its store in its own temp directory.
type Cluster struct {
	Servers []*server.Server
}

// StartCluster starts an n-node JetStream cluster (random client and
// route ports, stores under t.TempDir()) and waits until JetStream has a
// meta leader; the servers are shut down when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWith(t, n, nil)
}

// StartClusterWith is StartCluster with every server's options changed
// by edit (nil: none) before it starts.
func StartClusterWith(t testing.TB, n int, edit func(*server.Options)) *Cluster {
	t.Helper()
	return startCluster(t, n, nil, edit)
}

// StartClusterBehindProxies is StartCluster with every route between the
// servers through a Proxy in front of each server's route port (each
// server advertises its proxy to the others): Freeze on every proxy
// stops the replication between the servers (a raft leader's proposals
// wait, uncommitted) while their clients stay connected to each. The
// proxies are in the servers' order.
func StartClusterBehindProxies(t testing.TB, n int) (*Cluster, []*Proxy) {
	t.Helper()
	var proxies []*Proxy
	c := startCluster(t, n, func(port int) string {
		p := StartProxy(t, fmt.Sprintf("127.0.0.1:%d", port))
		proxies = append(proxies, p)
		return p.ln.Addr().String()
	}, nil)
	return c, proxies
}

// startCluster starts the cluster; via, when not nil, gives the address
// the others reach a server's route port at (and the server advertises).
func startCluster(t testing.TB, n int, via func(port int) string, edit func(*server.Options)) *Cluster {
	t.Helper()
	name := fmt.Sprintf("gttsplit-test-%d", time.Now().UnixNano())
	// Reserve the route ports first so every server can name every other.
	ports, err := FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	var routes, advertised []string
	for _, p := range ports {
		at := fmt.Sprintf("127.0.0.1:%d", p)
		if via != nil {
			at = via(p)
		}
		advertised = append(advertised, at)
		routes = append(routes, "nats-route://"+at)
	}
	c := &Cluster{}
	for i := 0; i < n; i++ {
		o := Options(t.TempDir(), -1)
		o.ServerName = fmt.Sprintf("n%d", i+1)
		o.Cluster.Name = name
		o.Cluster.Host = "127.0.0.1"
		o.Cluster.Port = ports[i]
		o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		if via != nil {
			o.Cluster.Advertise = advertised[i]
		}
		if edit != nil {
			edit(o)
		}
		s, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		c.Servers = append(c.Servers, s)
		t.Cleanup(func() { Shutdown(s) })
	}
	deadline := time.Now().Add(clusterReadyTimeout)
	for _, s := range c.Servers {
		if !s.ReadyForConnections(clusterReadyTimeout) {
			t.Fatalf("natstest: cluster server %s not ready within %s", s.Name(), clusterReadyTimeout)
		}
	}
	for time.Now().Before(deadline) {
		leader := false
		for _, s := range c.Servers {
			if s.JetStreamIsLeader() {
				leader = true
			}
		}
		// Every server current, and the meta leader sees every peer with
		// its stats (an R3 asset needs three to place).
		current, peers := leader, 0
		for _, s := range c.Servers {
			current = current && s.JetStreamIsCurrent()
			if s.JetStreamIsLeader() {
				peers = len(s.JetStreamClusterPeers())
			}
		}
		if current && peers == n {
			warmUp(t, c, n, deadline)
			return c
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("natstest: the cluster has no JetStream meta leader after %s", clusterReadyTimeout)
	return nil
}

// URLs returns the client URLs of the running servers, comma-separated.
func (c *Cluster) URLs() string {
	var out []string
	for _, s := range c.Servers {
		if s.Running() {
			out = append(out, s.ClientURL())
		}
	}
	return strings.Join(out, ",")
}

// warmUp creates and deletes a stream with n replicas through every
// server, the first attempt bounded to 2 s and each next one twice as
// long (up to 16 s), until it works: a cluster that has just elected its
// meta leader may leave a first request unanswered (a client then waits
// out its whole deadline), and an R3 asset needs every peer placed; on a
// loaded machine under -race every 2 s attempt timed out for 30 s.
func warmUp(t testing.TB, c *Cluster, n int, deadline time.Time) {
	t.Helper()
	for i, s := range c.Servers {
		nc, err := nats.Connect(s.ClientURL(), nats.Timeout(ConnectTimeout))
		if err != nil {
			t.Fatalf("natstest: connect to %s: %v", s.Name(), err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			t.Fatal(err)
		}
		name := fmt.Sprintf("NATSTEST_WARMUP_%d", i)
		for attempt := 2 * time.Second; ; attempt = min(2*attempt, 16*time.Second) {
			ctx, cancel := context.WithTimeout(context.Background(), attempt)
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"natstest.warmup." + name},
				Storage: jetstream.MemoryStorage, Replicas: n})
			if err == nil {
				err = js.DeleteStream(ctx, name)
			}
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				nc.Close()
				t.Fatalf("natstest: the cluster does not create an R%d stream through %s: %v", n, s.Name(), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		nc.Close()
	}
}
