package perftest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Usage is what a child process used: its wall time (from its start to
// its exit), user and system time, and its peak resident set size.
type Usage struct {
	Wall, User, Sys time.Duration
	// PeakRSS is the child's largest resident set (ru_maxrss, in bytes):
	// its own pages and the pages of files it mapped, as top counts
	// them.
	PeakRSS int64
	// LauncherRSS is the peak resident set of the process that started
	// the child (see RunChild): the floor of PeakRSS.
	LauncherRSS int64
}

// launchEnv holds the command a test binary re-executed as a launcher
// runs (see RunChild).
const launchEnv = "GTTSPLIT_PERFTEST_CHILD"

// A test binary started by RunChild is the launcher: it runs the command
// and exits, before any test.
func init() {
	if a, ok := os.LookupEnv(launchEnv); ok {
		os.Exit(launch(a))
	}
}

// RunChild runs cmd (not yet started; its Path, Args, Env, Dir, Stdin,
// Stdout and Stderr are used) and returns what it used.
//
// cmd does not run as this process's child but as a child of a small
// launcher (this test binary, started again), which reports its usage.
// A child that a Go program starts shares the program's memory until it
// executes its command (vfork), and Linux then counts the program's own
// peak resident set into the child's ru_maxrss: a test process that had
// grown to 180 MiB (other tests, run in parallel) made every child it
// started peak at 180 MiB or more. The launcher's peak (LauncherRSS, a
// few MiB) is all that is counted in.
func RunChild(cmd *exec.Cmd) (Usage, error) {
	self, err := os.Executable()
	if err != nil {
		return Usage{}, err
	}
	argv, err := json.Marshal(append([]string{cmd.Path}, cmd.Args[1:]...))
	if err != nil {
		return Usage{}, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return Usage{}, err
	}
	defer r.Close()
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	l := exec.Command(self)
	l.Env = append(env[:len(env):len(env)], launchEnv+"="+string(argv))
	l.Dir, l.Stdin, l.Stdout, l.Stderr = cmd.Dir, cmd.Stdin, cmd.Stdout, cmd.Stderr
	l.ExtraFiles = []*os.File{w}
	err = l.Start()
	w.Close()
	if err != nil {
		return Usage{}, err
	}
	var rep report
	derr := json.NewDecoder(r).Decode(&rep)
	werr := l.Wait()
	switch {
	case derr != nil && werr != nil:
		return Usage{}, fmt.Errorf("%s: %w", cmd.Path, werr)
	case derr != nil:
		return Usage{}, fmt.Errorf("the launcher of %s said nothing: %w", cmd.Path, derr)
	case rep.Err != "":
		return Usage{}, fmt.Errorf("%s: %s", cmd.Path, rep.Err)
	}
	u := Usage{Wall: time.Duration(rep.Wall), User: time.Duration(rep.User), Sys: time.Duration(rep.Sys),
		PeakRSS: rep.PeakRSS, LauncherRSS: rep.LauncherRSS}
	if werr != nil {
		return u, fmt.Errorf("%s: %w", cmd.Path, werr)
	}
	return u, nil
}

// report is what a launcher writes on its file descriptor 3.
type report struct {
	Wall, User, Sys      int64
	PeakRSS, LauncherRSS int64
	Err                  string `json:",omitempty"`
}

// launch runs the command argv (JSON) with this process's environment
// (but launchEnv) and standard files, writes its report on descriptor 3,
// and returns the command's exit status.
func launch(argv string) int {
	out := os.NewFile(3, "report")
	fail := func(err error) int {
		_ = json.NewEncoder(out).Encode(report{Err: err.Error()})
		return 2
	}
	var args []string
	if err := json.Unmarshal([]byte(argv), &args); err != nil || len(args) == 0 {
		return fail(fmt.Errorf("no command in %s", launchEnv))
	}
	os.Unsetenv(launchEnv)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	t0 := time.Now()
	err := cmd.Run()
	wall := time.Since(t0)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return fail(err)
	}
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if ru == nil {
		return fail(errors.New("no resource usage on this system"))
	}
	_ = json.NewEncoder(out).Encode(report{
		Wall: int64(wall), User: ru.Utime.Nano(), Sys: ru.Stime.Nano(),
		PeakRSS: maxRSSBytes(ru.Maxrss), LauncherRSS: ownPeakRSS(),
	})
	return cmd.ProcessState.ExitCode()
}

// maxRSSBytes is ru_maxrss in bytes (kilobytes but on macOS).
func maxRSSBytes(v int64) int64 {
	if runtime.GOOS == "darwin" {
		return v
	}
	return v << 10
}

// ownPeakRSS is this process's peak resident set (VmHWM), 0 where
// /proc/self/status does not say.
func ownPeakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
