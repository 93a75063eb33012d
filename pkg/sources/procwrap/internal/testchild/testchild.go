// Package testchild is the child process of procwrap's tests: a tiny
// program driven by its arguments. The test binary re-executes itself with
// EnvSwitch set and calls Main.
//
// Each argument is one operation, run in order; arguments that are not an
// operation (such as an appended "-v") are ignored:
//
//	args            print "args=" and the JSON of all arguments to stdout
//	pid             print "pid=<own pid>" to stdout
//	env=NAME        print "env NAME=VALUE" or "env NAME unset" to stdout
//	chunk=N         later file writes go out in pieces of N bytes
//	cat=FILE        copy FILE to stdout
//	err=FILE        copy FILE to stderr
//	mix=FILE        copy FILE's lines alternately to stdout and stderr
//	flood=N         print N numbered lines to stdout
//	wait=MODE       print "ready" to stdout, wait for SIGTERM or SIGINT,
//	                print "got SIGNAME" to stderr; MODE "die" then dies by
//	                that signal, "exit" exits 42; MODE "ignore" ignores
//	                SIGTERM and sleeps until killed
//	exit=N          exit with status N
package testchild

import (
	"bytes"
	"encoding/json"
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

// EnvSwitch is the environment variable that turns the test binary into
// the child.
const EnvSwitch = "GTTSPLIT_PROCWRAP_TESTCHILD"

// Main runs the operations in args and returns the exit status.
func Main(args []string) int {
	chunk := 0
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
		case "chunk":
			chunk, err = strconv.Atoi(val)
		case "cat":
			err = copyFile(os.Stdout, val, chunk)
		case "err":
			err = copyFile(os.Stderr, val, chunk)
		case "mix":
			err = mix(val, chunk)
		case "flood":
			err = flood(val)
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

func write(w io.Writer, b []byte, chunk int) error {
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

func copyFile(w io.Writer, path string, chunk int) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return write(w, b, chunk)
}

func mix(path string, chunk int) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for i := 0; len(b) > 0; i++ {
		n := bytes.IndexByte(b, '\n') + 1
		if n == 0 {
			n = len(b)
		}
		w := os.Stdout
		if i%2 == 1 {
			w = os.Stderr
		}
		if err := write(w, b[:n], chunk); err != nil {
			return err
		}
		b = b[n:]
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

func wait(mode string) int {
	ch := make(chan os.Signal, 1)
	if mode == "ignore" {
		signal.Ignore(syscall.SIGTERM)
	} else {
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	}
	fmt.Fprintln(os.Stdout, "ready")
	if mode == "ignore" {
		time.Sleep(time.Minute)
		return 3
	}
	var sig os.Signal
	select {
	case sig = <-ch:
	case <-time.After(time.Minute):
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
	time.Sleep(time.Minute)
	return 2
}
