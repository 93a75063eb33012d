package natstest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestFreePortsOutsideTheEphemeralRange(t *testing.T) {
	lo, hi := choiceRange()
	if hi-lo < 64*8 {
		t.Skipf("no room below the ephemeral range (%d-%d)", lo, hi)
	}
	ports, err := FreePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < lo || p >= hi {
			t.Errorf("port %d outside %d-%d: the kernel may give it to a connection", p, lo, hi-1)
		}
		if seen[p] {
			t.Errorf("port %d twice", p)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Errorf("port %d not free: %v", p, err)
			continue
		}
		_ = ln.Close()
	}
}

// A node whose port was taken between the choice and its bind is told
// apart from a node that is slow, so StartProcCluster starts the cluster
// again on other ports instead of failing the test.
func TestPortTakenBeforeTheNodeBoundIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs nats-server")
	}
	bin := ServerBinary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port
	nd := &Node{Name: "n1", Port: taken, Dir: t.TempDir(), bin: bin}
	nd.conf = filepath.Join(nd.Dir, "nats.conf")
	conf := fmt.Sprintf("server_name: n1\nlisten: 127.0.0.1:%d\njetstream { store_dir: %q }\n", taken, filepath.Join(nd.Dir, "store"))
	if err := os.WriteFile(nd.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	nd.start(t)
	t.Cleanup(nd.kill)
	c := &ProcCluster{Nodes: []*Node{nd}}
	err = c.waitReady(1)
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("waitReady = %v, want errPortTaken", err)
	}
}

func TestProcClusterIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs nats-server")
	}
	c := StartProcCluster(t, 3, "")
	nc := Connect(t, c.URLs())
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}
}
