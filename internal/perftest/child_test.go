package perftest

import (
	"bytes"
	"errors"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// A child run by RunChild has its own peak RSS, not this process's: with
// 96 MiB touched here, `true` started directly peaks at 96 MiB or more
// (Linux counts the parent's peak into a vfork'd child's ru_maxrss),
// under RunChild at the launcher's few MiB. Its output, exit status and
// times come through.
func TestRunChildPeakIsTheChilds(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("ru_maxrss of a vfork'd child: Linux")
	}
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true on PATH")
	}
	ballast := make([]byte, 96<<20)
	for i := range ballast {
		ballast[i] = 1
	}
	direct := exec.Command(truePath)
	if err := direct.Run(); err != nil {
		t.Fatal(err)
	}
	directPeak := direct.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
	u, err := RunChild(exec.Command(truePath))
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(ballast)
	t.Logf("true: %d MiB started directly, %d MiB under RunChild (the launcher's %d MiB)", directPeak>>20, u.PeakRSS>>20, u.LauncherRSS>>20)
	if directPeak < 96<<20 {
		t.Logf("this kernel does not count the parent's peak into the child's")
	}
	if u.PeakRSS <= 0 || u.PeakRSS >= 64<<20 {
		t.Fatalf("true peaked at %d MiB under RunChild", u.PeakRSS>>20)
	}

	var out bytes.Buffer
	cmd := exec.Command("sh", "-c", "echo hi; echo err >&2; exit 3")
	cmd.Stdout, cmd.Stderr = &out, &out
	u, err = RunChild(cmd)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("err %v, want exit status 3", err)
	}
	if got := out.String(); !strings.Contains(got, "hi\n") || !strings.Contains(got, "err\n") {
		t.Fatalf("output %q", got)
	}
	if u.Wall <= 0 {
		t.Fatalf("wall %v", u.Wall)
	}
	if _, err := RunChild(exec.Command("/nonexistent/command")); err == nil {
		t.Fatal("a command that cannot start: no error")
	}
}
