package natstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The real nats-server as a process: for tests that kill a node
// (SIGKILL, not a graceful shutdown), pause it (SIGSTOP) or measure its
// CPU time apart from the test's. It is this module's nats-server
// version, built from the module cache.

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// ServerBinary builds the nats-server binary once per test process and
// returns its path; the test is skipped when there is no Go toolchain.
func ServerBinary(t testing.TB) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain to build nats-server")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "natstest-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildBin = filepath.Join(dir, "nats-server")
		out, err := exec.Command(gobin, "build", "-o", buildBin, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build nats-server: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// Node is one nats-server process of a ProcCluster.
type Node struct {
	Name        string
	Port        int
	ClusterPort int
	Dir         string // its store and config
	conf        string
	bin         string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// ProcCluster is n nats-server processes routed into one JetStream cluster.
type ProcCluster struct {
	Nodes []*Node
}

// StartProcCluster starts an n-node cluster of nats-server processes
// (free ports, stores under t.TempDir()), with extra appended to every
// node's configuration, and waits until JetStream answers through every
// node. The processes are killed when the test ends. When a node finds
// one of its chosen ports taken, the whole cluster starts again on other
// ports.
func StartProcCluster(t testing.TB, n int, extra string) *ProcCluster {
	t.Helper()
	bin := ServerBinary(t)
	const attempts = 3
	for i := 1; ; i++ {
		c := newProcCluster(t, bin, n, extra)
		err := c.waitReady(n)
		if err == nil {
			return c
		}
		for _, nd := range c.Nodes {
			nd.kill()
		}
		if !errors.Is(err, errPortTaken) || i == attempts {
			t.Fatal(err)
		}
		t.Logf("natstest: starting the cluster again on other ports: %v", err)
	}
}

func newProcCluster(t testing.TB, bin string, n int, extra string) *ProcCluster {
	t.Helper()
	ports, err := FreePorts(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for i := 0; i < n; i++ {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	c := &ProcCluster{}
	name := fmt.Sprintf("gttsplit-proc-%d", time.Now().UnixNano())
	for i := 0; i < n; i++ {
		nd := &Node{Name: fmt.Sprintf("n%d", i+1), Port: ports[i], ClusterPort: ports[n+i], Dir: t.TempDir(), bin: bin}
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
max_payload: 8MB
jetstream {
  store_dir: %q
  max_file_store: 8GB
  max_memory_store: 256MB
}
cluster {
  name: %s
  listen: 127.0.0.1:%d
  routes: [%s]
}
%s
`, nd.Name, nd.Port, filepath.Join(nd.Dir, "store"), name, nd.ClusterPort, strings.Join(routes, ", "), extra)
		nd.conf = filepath.Join(nd.Dir, "nats.conf")
		if err := os.WriteFile(nd.conf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, nd)
	}
	for _, nd := range c.Nodes {
		nd.start(t)
		t.Cleanup(nd.kill)
	}
	return c
}

func (nd *Node) start(t testing.TB) {
	t.Helper()
	nd.mu.Lock()
	defer nd.mu.Unlock()
	log, err := os.OpenFile(filepath.Join(nd.Dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nd.bin, "-c", nd.conf)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(done)
	}()
	nd.cmd, nd.done = cmd, done
}

// URL is the node's client URL.
func (nd *Node) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", nd.Port) }

// Pid is the node's process id (0 when it is not running).
func (nd *Node) Pid() int {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd == nil || nd.cmd.Process == nil {
		return 0
	}
	return nd.cmd.Process.Pid
}

// Kill SIGKILLs the node (no graceful shutdown: its raft groups lose a
// peer as a crash loses it) and waits until it is gone.
func (nd *Node) Kill() { nd.kill() }

func (nd *Node) kill() {
	nd.mu.Lock()
	cmd, done := nd.cmd, nd.done
	nd.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	<-done
}

// Restart starts a killed node again on its store.
func (nd *Node) Restart(t testing.TB) {
	t.Helper()
	nd.kill()
	nd.start(t)
}

// Stop pauses the node (SIGSTOP); Cont resumes it.
func (nd *Node) Stop() { nd.signal(syscall.SIGSTOP) }

// Cont resumes a paused node.
func (nd *Node) Cont() { nd.signal(syscall.SIGCONT) }

func (nd *Node) signal(s syscall.Signal) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd != nil && nd.cmd.Process != nil {
		_ = nd.cmd.Process.Signal(s)
	}
}

// CPU is the CPU time the node's process has used so far.
func (nd *Node) CPU() time.Duration { return ProcessCPU(nd.Pid()) }

// ProcessCPU is the CPU time process pid has used (user and system, all
// its threads: /proc/<pid>/stat, in clock ticks of 10 ms), 0 when it
// cannot be read.
func ProcessCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces: count from its end.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * (time.Second / clockTicks)
}

// clockTicks is the kernel's USER_HZ, 100 on Linux.
const clockTicks = 100

// URLs are the client URLs of every node, comma-separated.
func (c *ProcCluster) URLs() string {
	var out []string
	for _, nd := range c.Nodes {
		out = append(out, nd.URL())
	}
	return strings.Join(out, ",")
}

// CPU is the CPU time of every node's process so far.
func (c *ProcCluster) CPU() time.Duration {
	var sum time.Duration
	for _, nd := range c.Nodes {
		sum += nd.CPU()
	}
	return sum
}

// waitReady waits until every node accepts clients and creates and
// deletes an R-n stream through it. A node that exited because a port
// was taken is errPortTaken.
func (c *ProcCluster) waitReady(n int) error {
	deadline := time.Now().Add(clusterReadyTimeout * 2)
	for i, nd := range c.Nodes {
		for {
			err := nd.warmUp(i, n)
			if err == nil {
				break
			}
			if nd.exited() {
				b, _ := os.ReadFile(filepath.Join(nd.Dir, "server.log"))
				if bytes.Contains(b, []byte("address already in use")) {
					return fmt.Errorf("node %s: %w\n%s", nd.Name, errPortTaken, b)
				}
				return fmt.Errorf("natstest: node %s exited: %v\n%s", nd.Name, err, b)
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(filepath.Join(nd.Dir, "server.log"))
				return fmt.Errorf("natstest: node %s not ready: %v\n%s", nd.Name, err, b)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// warmUp connects to the node and creates and deletes an R-n stream
// through it.
func (nd *Node) warmUp(i, n int) error {
	nc, err := nats.Connect(nd.URL(), nats.Timeout(time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	name := fmt.Sprintf("NATSTEST_WARMUP_%d", i)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"natstest.warmup." + name},
		Storage: jetstream.MemoryStorage, Replicas: n}); err != nil {
		return err
	}
	return js.DeleteStream(ctx, name)
}

// exited tells whether the node's process has ended.
func (nd *Node) exited() bool {
	nd.mu.Lock()
	done := nd.done
	nd.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}
