// Package testchild is the child process of the collector's tests: a tiny
// program driven by its arguments, standing in for llama.cpp. The test
// binary re-executes itself with Arg as its first argument, and TestMain
// calls Main with the arguments after it.
//
// Each argument is one operation, run in order; arguments that are not an
// operation (such as an appended "-v" or a "--verbose" the test passes to
// keep the collector from appending one) are ignored:
//
//	record=FILE   write the argv, environment and pid as JSON (a Record) to FILE
//	src=FILE      the lines later print operations print (split into lines,
//	              each with its "\n", a last line without one kept as it is)
//	print=A:B     print lines A (inclusive) to B (exclusive, empty: to the
//	              end) of src; line i goes to stdout when ToStdout(i), else
//	              to stderr, or to the log file after logto
//	err=FILE      print every line of FILE to stderr
//	delay=D       sleep D after each printed line (a time.Duration)
//	logto=FILE    print to FILE (created, appended to) instead of stdout/stderr
//	rotate        rename the log file to FILE.N (N counts rotations from 1)
//	              and continue in a new FILE, as logrotate's rename does
//	mark=FILE     create FILE (tells the test a point was reached)
//	gate=FILE     wait until FILE exists (at most a minute)
//	wait=MODE     print "ready" to stdout, wait for SIGTERM or SIGINT and print
//	              "got SIGNAME" to stderr; MODE "die" then dies by that
//	              signal, "exit" exits 42
//	exit=N        exit with status N
package testchild

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Arg is the first argument that turns the test binary into the child.
const Arg = "gttsplit-collector-testchild"

// maxWait bounds every wait of the child, so a failed test leaves no
// process behind for long.
const maxWait = time.Minute

// Record is what the record operation writes.
type Record struct {
	Args []string `json:"args"` // os.Args[1:]
	Env  []string `json:"env"`
	PID  int      `json:"pid"`
}

// Lookup returns the value of the environment variable name in r.Env.
func (r Record) Lookup(name string) (string, bool) {
	for _, kv := range r.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// ToStdout reports whether print sends line i (from 0) to stdout.
func ToStdout(i int) bool { return i%5 == 4 }

// Lines splits b into lines, each with its "\n"; a last line without one is
// kept as it is.
func Lines(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := bytes.IndexByte(b, '\n') + 1
		if n == 0 {
			n = len(b)
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// child is the state of one run.
type child struct {
	lines   [][]byte
	delay   time.Duration
	logPath string
	logf    *os.File
	rotated int
}

// Main runs the operations in args and returns the exit status.
func Main(args []string) int {
	c := &child{}
	defer func() {
		if c.logf != nil {
			_ = c.logf.Close()
		}
	}()
	for _, a := range args {
		op, val, _ := strings.Cut(a, "=")
		var err error
		switch op {
		case "record":
			err = record(val)
		case "src":
			var b []byte
			b, err = os.ReadFile(val)
			c.lines = Lines(b)
		case "print":
			err = c.print(val)
		case "err":
			var b []byte
			if b, err = os.ReadFile(val); err == nil {
				for _, l := range Lines(b) {
					if _, err = os.Stderr.Write(l); err != nil {
						break
					}
					c.sleep()
				}
			}
		case "delay":
			c.delay, err = time.ParseDuration(val)
		case "logto":
			c.logPath = val
			c.logf, err = os.OpenFile(val, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		case "rotate":
			err = c.rotate()
		case "mark":
			err = os.WriteFile(val, nil, 0o644)
		case "gate":
			err = gate(val)
		case "wait":
			return wait(val)
		case "exit":
			code, err := strconv.Atoi(val)
			if err != nil {
				fmt.Fprintln(os.Stderr, "testchild:", err)
				return 2
			}
			return code
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "testchild:", err)
			return 2
		}
	}
	return 0
}

func record(path string) error {
	b, err := json.Marshal(Record{Args: os.Args[1:], Env: os.Environ(), PID: os.Getpid()})
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (c *child) sleep() {
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
}

func (c *child) print(val string) error {
	from, to, ok := strings.Cut(val, ":")
	if !ok {
		return fmt.Errorf("print=%s: want A:B", val)
	}
	a, err := strconv.Atoi(from)
	if err != nil {
		return err
	}
	b := len(c.lines)
	if to != "" {
		if b, err = strconv.Atoi(to); err != nil {
			return err
		}
	}
	if a < 0 || b > len(c.lines) || a > b {
		return fmt.Errorf("print=%s: src has %d lines", val, len(c.lines))
	}
	for i := a; i < b; i++ {
		w := os.Stderr
		switch {
		case c.logf != nil:
			w = c.logf
		case ToStdout(i):
			w = os.Stdout
		}
		if _, err := w.Write(c.lines[i]); err != nil {
			return err
		}
		c.sleep()
	}
	return nil
}

func (c *child) rotate() error {
	if c.logf == nil {
		return errors.New("rotate before logto")
	}
	c.rotated++
	if err := os.Rename(c.logPath, fmt.Sprintf("%s.%d", c.logPath, c.rotated)); err != nil {
		return err
	}
	if err := c.logf.Close(); err != nil {
		return err
	}
	var err error
	c.logf, err = os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	return err
}

func gate(path string) error {
	deadline := time.Now().Add(maxWait)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gate %s: still closed after %s", path, maxWait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wait(mode string) int {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	fmt.Fprintln(os.Stdout, "ready")
	var sig os.Signal
	select {
	case sig = <-ch:
	case <-time.After(maxWait):
		fmt.Fprintln(os.Stderr, "testchild: no signal")
		return 2
	}
	s := sig.(syscall.Signal)
	fmt.Fprintf(os.Stderr, "got %s\n", unix.SignalName(s))
	if mode == "exit" {
		return 42
	}
	signal.Reset(s)
	_ = syscall.Kill(os.Getpid(), s)
	time.Sleep(maxWait)
	return 2
}
