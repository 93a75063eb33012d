package natstest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// A port chosen now for a server started later (a cluster's nodes name
// each other's route ports before any of them runs) can be taken in
// between. A port the kernel hands out for listen(":0") or for an
// outgoing connection comes from its ephemeral range, and a busy test
// process opens thousands of connections: one of them once took a
// nats-server child's port between the choice and its bind. FreePorts
// chooses below that range, where only another explicit choice like this
// one can collide, and checks each port is free when chosen.

// ephemeralFile holds the kernel's ephemeral port range ("low high").
const ephemeralFile = "/proc/sys/net/ipv4/ip_local_port_range"

// lowestPort is the lowest port FreePorts chooses: above the well-known
// and most registered services' ports.
const lowestPort = 10000

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a
// moment ago, chosen outside the kernel's ephemeral range when it leaves
// room below it (else from the kernel, as listen(":0") would).
func FreePorts(n int) ([]int, error) {
	lo, hi := choiceRange()
	if hi-lo < 64*n {
		return kernelPorts(n)
	}
	var out []int
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			_ = ln.Close()
		}
	}()
	for tries := 0; len(out) < n; tries++ {
		if tries > 200*n {
			return nil, fmt.Errorf("natstest: no free port in %d-%d after %d tries", lo, hi-1, tries)
		}
		p := lo + rand.IntN(hi-lo)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // in use (or reserved): choose another
		}
		held = append(held, ln)
		out = append(out, p)
	}
	return out, nil
}

// choiceRange is [lowestPort, the ephemeral range's low end), or an empty
// range when the range cannot be read.
func choiceRange() (lo, hi int) {
	b, err := os.ReadFile(ephemeralFile)
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, 0
	}
	return lowestPort, low
}

func kernelPorts(n int) ([]int, error) {
	var out []int
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("natstest: free port: %w", err)
		}
		held = append(held, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// errPortTaken is a node that could not bind its ports: someone took one
// after FreePorts chose it.
var errPortTaken = errors.New("natstest: a chosen port was taken before the server bound it")
