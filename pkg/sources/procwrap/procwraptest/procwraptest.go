// Package procwraptest is the child process of the tests of what wraps a
// process (procwrap, collector run and attach): a tiny program driven by
// its arguments, standing in for llama.cpp. A test binary re-executes
// itself with Arg as its first argument, and its TestMain calls Main with
// the arguments after it:
//
//	func TestMain(m *testing.M) {
//		if len(os.Args) > 1 && os.Args[1] == procwraptest.Arg {
//			os.Exit(procwraptest.Main(os.Args[2:]))
//		}
//		...
//	}
//
// Each argument is one operation, run in order; arguments that are not an
// operation (such as an appended "-v" or a "--verbose" a test passes to
// keep the collector from appending one) are ignored:
//
//	args          print "args=" and the JSON of all arguments to stdout
//	pid           print "pid=<own pid>" to stdout
//	env=NAME      print "env NAME=VALUE" or "env NAME unset" to stdout
//	record=FILE   write the argv, environment and pid as JSON (a Record) to FILE
//	delay=D       sleep D after each line that print, cat and err write
//	chunk=N       cat, err and mix write in pieces of N bytes
//	cat=FILE      copy FILE to stdout (line by line when delay is set)
//	err=FILE      copy FILE to stderr (line by line when delay is set)
//	mix=FILE      copy FILE's lines alternately to stdout and stderr
//	flood=N       print N numbered lines to stdout
//	src=FILE      the lines later print operations print (split into lines,
//	              each with its "\n", a last line without one kept as it is)
//	print=A:B     print lines A (inclusive) to B (exclusive, empty: to the
//	              end) of src; line i goes to stdout when ToStdout(i), else
//	              to stderr, or to the log file after logto
//	logto=FILE    print to FILE (created, appended to) instead of stdout/stderr
//	rotate        rename the log file to FILE.N (N counts rotations from 1)
//	              and continue in a new FILE, as logrotate's rename does
//	mark=FILE     create FILE (tells the test a point was reached)
//	gate=FILE     wait until FILE exists (at most a minute)
//	sampled=FILE  wait until FILE (a gtt.txt) holds a sample of this process
//	              (at most a minute; then say so on stderr and go on)
//	wait=MODE     print "ready" to stdout, wait for SIGTERM or SIGINT and print
//	              "got SIGNAME" to stderr; MODE "die" then dies by that
//	              signal, "exit" exits 42; MODE "ignore" ignores SIGTERM and
//	              sleeps until killed
//	kill=SIG      die by signal SIG (TERM, INT or KILL)
//	exit=N        exit with status N
package procwraptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Arg is the first argument that turns a test binary into the child.
const Arg = "gttsplit-testchild"

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
	chunk   int
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
		case "args":
			b, _ := json.Marshal(args)
			_, err = fmt.Fprintf(os.Stdout, "args=%s\n", b)
		case "pid":
			_, err = fmt.Fprintf(os.Stdout, "pid=%d\n", os.Getpid())
		case "env":
			if v, ok := os.LookupEnv(val); ok {
				_, err = fmt.Fprintf(os.Stdout, "env %s=%s\n", val, v)
			} else {
				_, err = fmt.Fprintf(os.Stdout, "env %s unset\n", val)
			}
		case "record":
			err = record(val)
		case "delay":
			c.delay, err = time.ParseDuration(val)
		case "chunk":
			c.chunk, err = strconv.Atoi(val)
		case "cat":
			err = c.copyFile(os.Stdout, val)
		case "err":
			err = c.copyFile(os.Stderr, val)
		case "mix":
			err = c.mix(val)
		case "flood":
			err = flood(val)
		case "src":
			var b []byte
			b, err = os.ReadFile(val)
			c.lines = Lines(b)
		case "print":
			err = c.print(val)
		case "logto":
			c.logPath = val
			c.logf, err = os.OpenFile(val, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		case "rotate":
			err = c.rotate()
		case "mark":
			err = os.WriteFile(val, nil, 0o644)
		case "gate":
			err = gate(val)
		case "sampled":
			if err := sampled(val); err != nil {
				fmt.Fprintln(os.Stderr, "testchild:", err)
			}
		case "wait":
			return wait(val)
		case "kill":
			return kill(val)
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

// write writes b to w in pieces of c.chunk bytes (at once when 0).
func (c *child) write(w io.Writer, b []byte) error {
	chunk := c.chunk
	if chunk <= 0 {
		chunk = len(b)
	}
	for len(b) > 0 {
		n := min(chunk, len(b))
		if _, err := w.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func (c *child) sleep() {
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
}

// copyFile writes the file at path to w: at once (in pieces of chunk),
// or line by line with delay after each when delay is set.
func (c *child) copyFile(w io.Writer, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if c.delay <= 0 {
		return c.write(w, b)
	}
	for _, l := range Lines(b) {
		if err := c.write(w, l); err != nil {
			return err
		}
		c.sleep()
	}
	return nil
}

func (c *child) mix(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for i, l := range Lines(b) {
		w := os.Stdout
		if i%2 == 1 {
			w = os.Stderr
		}
		if err := c.write(w, l); err != nil {
			return err
		}
	}
	return nil
}

func flood(val string) error {
	n, err := strconv.Atoi(val)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "flood line %d of %d\n", i, n)
	}
	_, err = os.Stdout.Write(b.Bytes())
	return err
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

// until polls cond every 5 ms for at most maxWait.
func until(what string, cond func() bool) error {
	deadline := time.Now().Add(maxWait)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: still not so after %s", what, maxWait)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

func gate(path string) error {
	return until("gate "+path, func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}

// sampled waits until path holds a "# sample" line of this process: a
// real llama-cli lives for seconds and is always sampled, while a child
// that exits at once often is not.
func sampled(path string) error {
	mark := fmt.Appendf(nil, " pid=%d\n", os.Getpid())
	return until("no sample of this process in "+path, func() bool {
		b, err := os.ReadFile(path)
		return err == nil && bytes.Contains(b, mark)
	})
}

// kill dies by the named signal (TERM, INT, KILL). The Go runtime
// re-raises an unhandled SIGTERM or SIGINT with the default action, so
// the parent sees a death by signal.
func kill(name string) int {
	sig, ok := map[string]syscall.Signal{"TERM": syscall.SIGTERM, "INT": syscall.SIGINT, "KILL": syscall.SIGKILL}[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "testchild: kill=%s: not TERM, INT or KILL\n", name)
		return 2
	}
	_ = syscall.Kill(os.Getpid(), sig)
	time.Sleep(maxWait)
	return 2
}

func wait(mode string) int {
	ch := make(chan os.Signal, 1)
	if mode == "ignore" {
		signal.Ignore(syscall.SIGTERM)
	} else {
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	}
	fmt.Fprintln(os.Stdout, "ready")
	if mode == "ignore" {
		time.Sleep(maxWait)
		return 3
	}
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
