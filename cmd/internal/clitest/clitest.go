// Package clitest holds what the testscript tests of both binaries share:
// the script environment (fixtures, free ports, a spool), the fakellama
// test program, the custom script commands, and a build of the other
// binary for the scripts that need both.
//
// # Script environment
//
// [Setup] copies the 4B and 27B reference runs (testdata/runs/4b, 27b) to $WORK/4b and $WORK/27b,
// the 4B run's offload-off control (testdata/controls/4b-ngl0) to $WORK/4b-ngl0, the 4B
// peak fdinfo snapshot (testdata/fdinfo/4b-peak) to $WORK/fdinfo/4b-peak
// and the sample configs to $WORK/configs; the reference runs again under
// $WORK/testdata/runs and the snapshot as $WORK/fdinfo-snapshot (the paths
// the help examples use); puts llama-cli and llama-server stand-ins
// (fakellama printing the 4B log, exit 0) first on PATH; and sets:
//
//	NATS_PORT, HTTP_PORT,       free TCP ports on 127.0.0.1
//	HTTP_PORT2
//	GTTSPLIT_SPOOL_DIR          $WORK/spool (testscript's HOME is /no-home)
//	GTTSPLIT_SAMPLE_SYS_ROOT    an empty directory, so no host GPU card is read
//	GORACE                      atexit_sleep_ms=50 unless set, so race-built
//	                            commands do not sleep a second at exit
//
// # Commands
//
//	exitcode N PROG [ARGS...]    run PROG like exec and require exit code N
//	                             (stdout and stderr are kept for the checks)
//	waitfile PATH...             wait until every PATH exists
//	waithttp URL                 wait until GET URL answers 200
//	cmpjson [-ignore K,...] A B  compare two JSON files, ignoring dotted keys
//	jsmsgs STREAM                print the message count of a JetStream stream
//	                             on $GTTSPLIT_NATS_URL
//	startproc VAR PROG [ARGS...] start PROG in the background, its pid in $VAR
//	holdport VAR                 listen on a free 127.0.0.1 port until the
//	                             script ends (a port in use), its number in $VAR
//	sigwhen SIGNAL PATH          once PATH exists, send SIGNAL (INT, TERM) to
//	                             the newest background command (`exec ... &name&`,
//	                             then `wait name` collects its output)
//	sigexit N                    require that the command sigwhen signalled,
//	                             once waited for, exited with code N
//
// The waits poll every 20ms and give up after [WaitTimeout].
package clitest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/sources/procwrap/procwraptest"
)

// WaitTimeout bounds waitfile and waithttp. It is generous: a loaded
// two-core machine running race-built binaries is slow, and a wait that
// succeeds returns as soon as it can.
const WaitTimeout = 60 * time.Second

// pollEvery is how often the waits look again.
const pollEvery = 20 * time.Millisecond

// RepoRoot is the repository root seen from a cmd/<bin> test directory.
const RepoRoot = "../.."

// Setup prepares a script's environment (see the package doc).
func Setup(e *testscript.Env) error {
	copies := [][2]string{
		{filepath.Join(RepoRoot, "testdata", "runs", "4b"), "4b"},
		{filepath.Join(RepoRoot, "testdata", "runs", "27b"), "27b"},
		{filepath.Join(RepoRoot, "testdata", "controls", "4b-ngl0"), "4b-ngl0"},
		{filepath.Join(RepoRoot, "testdata", "fdinfo", "4b-peak"), filepath.Join("fdinfo", "4b-peak")},
		{filepath.Join(RepoRoot, "configs"), "configs"},
		// The examples name the repository's paths.
		{filepath.Join(RepoRoot, "testdata", "runs", "4b"), filepath.Join("testdata", "runs", "4b")},
		{filepath.Join(RepoRoot, "testdata", "runs", "27b"), filepath.Join("testdata", "runs", "27b")},
		{filepath.Join(RepoRoot, "testdata", "controls", "4b-ngl0"), filepath.Join("testdata", "controls", "4b-ngl0")},
		{filepath.Join(RepoRoot, "testdata", "fdinfo", "4b-peak"), "fdinfo-snapshot"},
	}
	for _, c := range copies {
		if err := copyTree(c[0], filepath.Join(e.WorkDir, c[1])); err != nil {
			return fmt.Errorf("setup: copy %s: %w", c[0], err)
		}
	}
	for _, name := range []string{"NATS_PORT", "HTTP_PORT", "HTTP_PORT2"} {
		port, err := FreePort()
		if err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		e.Setenv(name, strconv.Itoa(port))
	}
	// llama-cli and llama-server stand-ins: fakellama printing the 4B log.
	bin := filepath.Join(e.WorkDir, ".bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	for _, name := range []string{"llama-cli", "llama-server"} {
		sh := "#!/bin/sh\nexec fakellama \"" + filepath.Join(e.WorkDir, "4b", "split.log") + "\" 0 \"$@\"\n"
		if err := os.WriteFile(filepath.Join(bin, name), []byte(sh), 0o755); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
	}
	e.Setenv("PATH", bin+string(os.PathListSeparator)+e.Getenv("PATH"))
	sys := filepath.Join(e.WorkDir, ".sys")
	if err := os.MkdirAll(sys, 0o755); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	e.Values[signalledKey{}] = &signalled{}
	e.Setenv("GTTSPLIT_SPOOL_DIR", filepath.Join(e.WorkDir, "spool"))
	e.Setenv("GTTSPLIT_SAMPLE_SYS_ROOT", sys)
	if os.Getenv("GORACE") == "" {
		e.Setenv("GORACE", "atexit_sleep_ms=50")
	}
	return nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// outside the range the kernel gives outgoing connections (see
// natstest.FreePorts).
func FreePort() (int, error) {
	ports, err := natstest.FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// copyTree copies the regular files under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}

// FakeLlama is the main function of the fakellama test program, a stand-in
// for llama-cli that `collector run` wraps:
//
//	fakellama LOG CODE [ARGS...]
//
// It writes LOG to stderr (llama.cpp logs there) and exits with CODE, or,
// when CODE is a signal name (TERM, INT, KILL), kills itself with that
// signal. With $FAKELLAMA_RECORD set it first writes there the arguments
// after CODE and the GGML_HRX_HOST_WEIGHT_TRACE variable it was given.
//
// With $FAKELLAMA_WAIT_SAMPLED set to the gtt.txt of `collector run --out`,
// it exits only once that file holds a sample of its pid (or after a
// minute): a real llama-cli lives for seconds and is always sampled, while
// this one would otherwise often exit before the first sample, and the
// split's flags would depend on the machine's load.
//
// It is the tests' one child program (procwraptest) under the command
// line a script shows.
func FakeLlama() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: fakellama LOG CODE [ARGS...]")
		os.Exit(2)
	}
	if rec := os.Getenv("FAKELLAMA_RECORD"); rec != "" {
		trace, ok := os.LookupEnv("GGML_HRX_HOST_WEIGHT_TRACE")
		if !ok {
			trace = "(unset)"
		}
		body := fmt.Sprintf("args=%s\nGGML_HRX_HOST_WEIGHT_TRACE=%s\n", strings.Join(os.Args[3:], " "), trace)
		if err := os.WriteFile(rec, []byte(body), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "fakellama:", err)
			os.Exit(1)
		}
	}
	ops := []string{"err=" + os.Args[1]}
	if path := os.Getenv("FAKELLAMA_WAIT_SAMPLED"); path != "" {
		ops = append(ops, "sampled="+path)
	}
	switch code := os.Args[2]; code {
	case "TERM", "INT", "KILL":
		ops = append(ops, "kill="+code)
	default:
		ops = append(ops, "exit="+code)
	}
	os.Exit(procwraptest.Main(ops))
}

// Commands returns the custom script commands (see the package doc).
func Commands() map[string]func(ts *testscript.TestScript, neg bool, args []string) {
	return map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"exitcode":  cmdExitCode,
		"waitfile":  cmdWaitFile,
		"waithttp":  cmdWaitHTTP,
		"cmpjson":   cmdCmpJSON,
		"jsmsgs":    cmdJSMsgs,
		"startproc": cmdStartProc,
		"holdport":  cmdHoldPort,
		"sigwhen":   cmdSigWhen,
		"sigexit":   cmdSigExit,
	}
}

func cmdHoldPort(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: holdport VAR")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	ts.Defer(func() { _ = ln.Close() })
	ts.Setenv(args[0], strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
}

// signalled is the command sigwhen signalled last, per script.
type signalled struct{ cmd *exec.Cmd }

type signalledKey struct{}

func cmdSigWhen(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: sigwhen SIGNAL PATH")
	}
	sig, ok := map[string]os.Signal{"INT": os.Interrupt, "TERM": syscall.SIGTERM}[args[0]]
	if !ok {
		ts.Fatalf("sigwhen: signal %q is not INT or TERM", args[0])
	}
	bg := ts.BackgroundCmds()
	if len(bg) == 0 {
		ts.Fatalf("sigwhen: no background command")
	}
	cmd := bg[len(bg)-1]
	cmdWaitFile(ts, false, args[1:])
	ts.Check(cmd.Process.Signal(sig))
	ts.Value(signalledKey{}).(*signalled).cmd = cmd
}

func cmdSigExit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: sigexit N")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("sigexit: %q is not a number", args[0])
	}
	cmd := ts.Value(signalledKey{}).(*signalled).cmd
	// The script's wait has returned: the state is set.
	if cmd == nil || cmd.ProcessState == nil {
		ts.Fatalf("sigexit: no signalled command was waited for (sigwhen, then wait)")
	}
	if got := cmd.ProcessState.ExitCode(); got != want {
		ts.Fatalf("sigexit: exit code %d (%v), want %d", got, cmd.ProcessState, want)
	}
}

// cmdStartProc starts a program in the background and sets an environment
// variable to its pid: `startproc VAR PROG [ARGS...]`. It is killed when
// the script ends.
func cmdStartProc(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: startproc VAR PROG [ARGS...]")
	}
	cmd := exec.Command(args[1], args[2:]...)
	cmd.Dir = ts.Getenv("WORK")
	if err := cmd.Start(); err != nil {
		ts.Fatalf("startproc: %v", err)
	}
	ts.Setenv(args[0], strconv.Itoa(cmd.Process.Pid))
	ts.Defer(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

func cmdExitCode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exitcode N PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitcode: %q is not a number", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitcode: %v", err)
		}
		got = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ts.Fatalf("exitcode: %s was killed by %v, want exit code %d", args[1], ws.Signal(), want)
		}
	}
	if got != want {
		ts.Fatalf("exitcode: %s exited with %d, want %d", args[1], got, want)
	}
}

func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: waitfile PATH...")
	}
	deadline := time.Now().Add(WaitTimeout)
	for _, a := range args {
		path := ts.MkAbs(a)
		for {
			if _, err := os.Stat(path); err == nil {
				break
			}
			if time.Now().After(deadline) {
				ts.Fatalf("waitfile: %s does not exist after %s", a, WaitTimeout)
			}
			time.Sleep(pollEvery)
		}
	}
}

func cmdWaitHTTP(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waithttp URL")
	}
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(WaitTimeout)
	var last string
	for {
		resp, err := client.Get(args[0])
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			ts.Fatalf("waithttp: %s not ready after %s: %s", args[0], WaitTimeout, last)
		}
		time.Sleep(pollEvery)
	}
}

func cmdCmpJSON(ts *testscript.TestScript, neg bool, args []string) {
	var ignore []string
	if len(args) > 0 && args[0] == "-ignore" {
		if len(args) < 2 {
			ts.Fatalf("usage: cmpjson [-ignore KEY,...] GOT WANT")
		}
		ignore = strings.Split(args[1], ",")
		args = args[2:]
	}
	if len(args) != 2 {
		ts.Fatalf("usage: cmpjson [-ignore KEY,...] GOT WANT")
	}
	got, err := readJSON(ts.ReadFile(args[0]), ignore)
	ts.Check(err)
	want, err := readJSON(ts.ReadFile(args[1]), ignore)
	ts.Check(err)
	diff := cmp.Diff(want, got)
	switch {
	case diff != "" && !neg:
		ts.Fatalf("%s and %s differ (-%s +%s):\n%s", args[0], args[1], args[1], args[0], diff)
	case diff == "" && neg:
		ts.Fatalf("%s and %s do not differ", args[0], args[1])
	}
}

// readJSON decodes a JSON document and deletes the dotted keys in ignore.
func readJSON(text string, ignore []string) (any, error) {
	var v any
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return nil, fmt.Errorf("cmpjson: %w", err)
	}
	for _, key := range ignore {
		parts := strings.Split(key, ".")
		m, ok := v.(map[string]any)
		for _, p := range parts[:len(parts)-1] {
			if !ok {
				break
			}
			m, ok = m[p].(map[string]any)
		}
		if ok {
			delete(m, parts[len(parts)-1])
		}
	}
	return v, nil
}

func cmdJSMsgs(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: jsmsgs STREAM")
	}
	url := ts.Getenv("GTTSPLIT_NATS_URL")
	if url == "" {
		ts.Fatalf("jsmsgs: GTTSPLIT_NATS_URL is not set")
	}
	// Bounds, not expectations (a loaded machine under -race).
	nc, err := nats.Connect(url, nats.Timeout(natstest.ConnectTimeout))
	ts.Check(err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	ts.Check(err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, args[0])
	ts.Check(err)
	info, err := s.Info(ctx)
	ts.Check(err)
	fmt.Fprintln(ts.Stdout(), info.State.Msgs)
}

// BuildCommand builds the main package pkg (an import path) into dir with
// the go tool that runs the tests, race-instrumented when the tests are,
// and returns the binary's path. Scripts that need both binaries get the
// other one this way: a package main cannot be imported.
func BuildCommand(ctx context.Context, dir, pkg string) (string, error) {
	goTool, err := goTool()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, pkg)
	b, err := exec.CommandContext(ctx, goTool, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return out, nil
}

// goTool finds the go command: `go test` puts its toolchain's bin
// directory first on the test's PATH.
func goTool() (string, error) {
	p, err := exec.LookPath("go")
	if err != nil {
		return "", errors.New("the go command is needed to build the other binary")
	}
	return p, nil
}
