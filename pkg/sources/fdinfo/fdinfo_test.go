package fdinfo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// envChild turns the test binary into a child that waits for its stdin to
// close.
const envChild = "GTTSPLIT_FDINFO_TESTCHILD"

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func testLogger(t *testing.T) zerolog.Logger { return zerolog.New(zerolog.NewTestWriter(t)) }

func TestParseStat(t *testing.T) {
	t.Parallel()
	st, err := parseStat([]byte(statLine(4242, 17, "llama-server", 987654)))
	require.NoError(t, err)
	require.Equal(t, procStat{state: 'S', ppid: 17, start: 987654}, st)

	// comm can hold spaces and parentheses, even ") S 1 ".
	st, err = parseStat([]byte(statLine(7, 3, "a) S 1 2 (b c)", 55)))
	require.NoError(t, err)
	require.Equal(t, procStat{state: 'S', ppid: 3, start: 55}, st)

	st, err = parseStat([]byte("9 (z) Z 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0"))
	require.NoError(t, err)
	require.True(t, st.dead())
	require.Equal(t, uint64(77), st.start)

	for _, bad := range []string{"", "1 no parens S 1", "1 (x) S 1 2 3", "1 (x) S one 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
		"1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 -5 0"} {
		_, err := parseStat([]byte(bad))
		require.ErrorIs(t, err, errStat, "%q", bad)
	}
}

func TestClientIDTakesFirstLineKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "7", string(value([]byte(fixture(t, "amdgpu-6.6-dup")), keyClientID)))
	require.Equal(t, "30", string(value([]byte(fixture(t, "amdgpu-6.13")), keyClientID)))
	require.Nil(t, value([]byte(fixture(t, "kfd")), keyClientID))
	require.Nil(t, value([]byte("x-drm-client-id: 4\n"), keyClientID), "a key must start its line")
	require.False(t, hasKey([]byte(fixture(t, "dmabuf")), keyDriver))
	require.True(t, hasKey([]byte(fixture(t, "xe")), keyDriver))
}

// fds is a compact view of one process's sample: fd -> link and text.
func fdsOf(t *testing.T, smp *split.Sample, pid int) map[int]split.FDInfo {
	t.Helper()
	for _, p := range smp.Procs {
		if p.PID == pid {
			out := map[int]split.FDInfo{}
			for i, f := range p.FDs {
				if i > 0 {
					require.Less(t, p.FDs[i-1].FD, f.FD, "fds sorted")
				}
				out[f.FD] = f
			}
			return out
		}
	}
	return nil
}

func pids(smp *split.Sample) []int {
	var out []int
	for _, p := range smp.Procs {
		out = append(out, p.PID)
	}
	return out
}

func link(tr *tree, l string) string {
	if tr.links {
		return l
	}
	return ""
}

func TestSamplerFollowsChangingTree(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name            string
		children, links bool
	}{
		{"children files and fd links", true, true},
		{"stat scan and fd links", false, true},
		{"children files without fd links", true, false},
		{"stat scan without fd links", false, false},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			testChangingTree(t, newTree(t, mode.children, mode.links))
		})
	}
}

func testChangingTree(t *testing.T, tr *tree) {
	amd := fixture(t, "amdgpu-6.13")
	legacy := fixture(t, "amdgpu-6.4")
	xe := fixture(t, "xe")

	tr.addProc(1, 0, "init", 1)
	tr.addProc(100, 1, "llama-server (x) y", 5000)
	tr.addFD(100, 0, "/dev/pts/0", fixture(t, "tty"))
	tr.addFD(100, 3, "/dev/dri/renderD128", amd)
	tr.addFD(100, 4, "/dev/dri/renderD128", amd) // libdrm's dup
	tr.addFD(100, 5, "/dev/kfd", fixture(t, "kfd"))
	tr.addFD(100, 6, "/dmabuf:", fixture(t, "dmabuf"))
	tr.addFD(100, 7, "/dev/dri/renderD129", xe)
	tr.addFD(100, 8, "anon_inode:[eventfd]", fixture(t, "eventfd"))
	tr.addFD(100, 9, "/dev/dri/card1", legacy)
	tr.addProc(101, 100, "sh", 5100)
	tr.addFD(101, 0, "/dev/pts/0", fixture(t, "tty"))
	tr.addProc(200, 1, "other", 10) // not in the tree
	tr.addFD(200, 3, "/dev/dri/renderD128", fixture(t, "amdgpu-6.6-dup"))

	tr.addCard("card0", "i915", 1, 2)
	tr.addCard("card1", "amdgpu", 1<<30, 96<<30)
	tr.addCard("card2", "", 5, 10)
	tr.addCard("card1-eDP-1", "", 7, 8) // a connector, not a card

	cfg := DefaultConfig()
	cfg.ProcRoot, cfg.SysRoot = tr.proc, tr.sys
	s, err := newSampler(cfg, tr.readlink, testLogger(t), 100)
	require.NoError(t, err)
	defer s.close()
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) *split.Sample {
		t.Helper()
		smp := s.sample(t0.Add(d))
		require.NotNil(t, smp)
		require.Equal(t, t0.Add(d), smp.Time)
		return smp
	}

	// Tick 1: the root's DRM fds, its child without any, no stranger.
	smp := at(0)
	require.Equal(t, uint64(1), smp.Seq)
	require.Equal(t, []int{100, 101}, pids(smp))
	require.Equal(t, map[int]split.FDInfo{
		3: {FD: 3, Link: link(tr, "/dev/dri/renderD128"), Text: amd},
		4: {FD: 4, Link: link(tr, "/dev/dri/renderD128"), Text: amd},
		7: {FD: 7, Link: link(tr, "/dev/dri/renderD129"), Text: xe},
		9: {FD: 9, Link: link(tr, "/dev/dri/card1"), Text: legacy},
	}, fdsOf(t, smp, 100))
	require.Empty(t, fdsOf(t, smp, 101))
	require.Equal(t, []split.CardGTT{
		{Card: "card1", UsedBytes: 1 << 30, TotalBytes: 96 << 30},
		{Card: "card2", UsedBytes: 5, TotalBytes: 10},
	}, smp.Cards)
	links := tr.readlinks.Load()

	// Tick 2: client memory grows; it is re-read without a rescan.
	grown := withGTT(amd, 512, "30")
	tr.setText(100, 3, grown)
	tr.setCard("card1", 2<<30, 96<<30)
	smp = at(100 * time.Millisecond)
	require.Equal(t, uint64(2), smp.Seq)
	require.Equal(t, grown, fdsOf(t, smp, 100)[3].Text)
	require.Equal(t, amd, fdsOf(t, smp, 100)[4].Text)
	require.Equal(t, int64(2<<30), smp.Cards[0].UsedBytes)
	require.Equal(t, links, tr.readlinks.Load(), "no readlink between rescans")

	// A grandchild appears; it is found at the next rescan, not before.
	tr.addProc(102, 101, "worker", 5200)
	child := withGTT(amd, 64, "31")
	tr.addFD(102, 3, "/dev/dri/renderD128", child)
	smp = at(200 * time.Millisecond)
	require.Equal(t, []int{100, 101}, pids(smp))
	smp = at(time.Second)
	require.Equal(t, []int{100, 101, 102}, pids(smp))
	require.Equal(t, map[int]split.FDInfo{3: {FD: 3, Link: link(tr, "/dev/dri/renderD128"), Text: child}}, fdsOf(t, smp, 102))
	if tr.links {
		require.Greater(t, tr.readlinks.Load(), links, "the rescan reads the links")
	}

	// fd 9 is closed and reused for another client; the open fdinfo file
	// shows the new client (procfs resolves the fd on each read), and the
	// changed drm-client-id makes the sampler re-read the link at once.
	other := withGTT(amd, 8, "99")
	tr.setText(100, 9, other)
	tr.relink(100, 9, "/dev/dri/renderD128")
	links = tr.readlinks.Load()
	smp = at(1100 * time.Millisecond)
	require.Equal(t, split.FDInfo{FD: 9, Link: link(tr, "/dev/dri/renderD128"), Text: other}, fdsOf(t, smp, 100)[9])
	if tr.links {
		require.Greater(t, tr.readlinks.Load(), links, "a new client id triggers a rescan")
	}

	// fd 4 is closed: gone in the same tick.
	tr.removeFD(100, 4)
	smp = at(1200 * time.Millisecond)
	require.Equal(t, []int{3, 7, 9}, sortedKeys(fdsOf(t, smp, 100)))

	// PID 101 is reused by another process that has a DRM fd.
	tr.addProc(101, 100, "reused", 6000)
	reused := withGTT(amd, 16, "40")
	tr.addFD(101, 5, "/dev/dri/renderD128", reused)
	smp = at(2100 * time.Millisecond)
	require.Equal(t, uint64(6000), s.procs[101].start)
	require.Equal(t, map[int]split.FDInfo{5: {FD: 5, Link: link(tr, "/dev/dri/renderD128"), Text: reused}}, fdsOf(t, smp, 101))

	// The grandchild exits: its fd read fails and it leaves the sample.
	tr.removeProc(102)
	smp = at(2200 * time.Millisecond)
	require.Equal(t, []int{100, 101}, pids(smp))

	// The root's PID is reused (another start time): the tree is gone.
	tr.addProc(100, 1, "llama-server (x) y", 9000)
	require.Nil(t, s.sample(t0.Add(2300*time.Millisecond)))
}

func TestSamplerEndsWhenRootGone(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"exits", "zombie"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			tr := newTree(t, true, true)
			tr.addProc(100, 1, "llama-cli", 5000)
			tr.addFD(100, 3, "/dev/dri/renderD128", fixture(t, "amdgpu-6.13"))
			cfg := DefaultConfig()
			cfg.ProcRoot, cfg.SysRoot = tr.proc, tr.sys
			s, err := newSampler(cfg, tr.readlink, testLogger(t), 100)
			require.NoError(t, err)
			defer s.close()
			require.NotNil(t, s.sample(time.Now()))
			if how == "exits" {
				tr.removeProc(100)
			} else {
				tr.write(filepath.Join(tr.pidDir(100), "stat"), strings.Replace(statLine(100, 1, "llama-cli", 5000), ") S ", ") Z ", 1))
			}
			require.Nil(t, s.sample(time.Now()))
		})
	}
}

// recorder collects samples; onSample runs in Run's goroutine after each.
type recorder struct {
	mu       sync.Mutex
	samples  []*split.Sample
	onSample func(n int)
}

func (r *recorder) emit(_ context.Context, rec sources.Record) error {
	if rec.Sample == nil || rec.Lines != nil || rec.Started != nil || rec.Finished != nil {
		return errors.New("want exactly one Sample per record")
	}
	r.mu.Lock()
	r.samples = append(r.samples, rec.Sample)
	n := len(r.samples)
	r.mu.Unlock()
	if r.onSample != nil {
		r.onSample(n)
	}
	return nil
}

func TestRunStopsWhenRootGone(t *testing.T) {
	t.Parallel()
	tr := newTree(t, false, true)
	tr.addProc(100, 1, "llama-cli", 5000)
	tr.addFD(100, 3, "/dev/dri/renderD128", fixture(t, "amdgpu-6.13"))
	cfg := DefaultConfig()
	var proc Process
	cfg.ProcRoot, cfg.SysRoot = tr.proc, tr.sys
	cfg.Interval = 2 * time.Millisecond
	cfg.RescanInterval = 5 * time.Millisecond
	var pidCalls int
	proc.PIDFunc = func(context.Context) (int, error) { pidCalls++; return 100, nil }
	src, err := New(cfg, proc, sources.Settings{Logger: testLogger(t)})
	require.NoError(t, err)
	rec := &recorder{onSample: func(n int) {
		if n == 5 {
			tr.removeProc(100)
		}
	}}
	require.NoError(t, src.Run(t.Context(), rec.emit))
	require.Equal(t, 1, pidCalls)
	require.Len(t, rec.samples, 5)
	for i, smp := range rec.samples {
		require.Equal(t, uint64(i+1), smp.Seq)
		require.Len(t, fdsOf(t, smp, 100), 1)
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	tr := newTree(t, false, true)
	cfg := DefaultConfig()
	var proc Process
	cfg.ProcRoot, cfg.SysRoot = tr.proc, tr.sys

	proc.PID = 4242
	src, err := New(cfg, proc, sources.Settings{})
	require.NoError(t, err)
	err = src.Run(t.Context(), (&recorder{}).emit)
	require.ErrorIs(t, err, ErrNoProcess)

	proc.PID = 0
	boom := errors.New("child could not start")
	proc.PIDFunc = func(context.Context) (int, error) { return 0, boom }
	src, err = New(cfg, proc, sources.Settings{})
	require.NoError(t, err)
	require.ErrorIs(t, src.Run(t.Context(), (&recorder{}).emit), boom)

	// Cancelled while waiting for the PID: not an error.
	proc.PIDFunc = func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() }
	src, err = New(cfg, proc, sources.Settings{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, src.Run(ctx, (&recorder{}).emit))

	// A downstream failure is this source's error.
	tr.addProc(100, 1, "x", 1)
	proc.PIDFunc, proc.PID = nil, 100
	src, err = New(cfg, proc, sources.Settings{})
	require.NoError(t, err)
	closed := errors.New("pipeline closed")
	require.ErrorIs(t, src.Run(t.Context(), func(context.Context, sources.Record) error { return closed }), closed)
}

func TestConfig(t *testing.T) {
	t.Parallel()
	err := Config{}.Validate()
	for _, want := range []string{"proc_root: must not be empty", "sys_root: must not be empty",
		"interval: must be a positive duration, got 0s", "rescan_interval: must be a positive duration, got 0s"} {
		require.ErrorContains(t, err, want)
	}
	c := DefaultConfig()
	require.NoError(t, c.Validate())
	require.Equal(t, "/proc", c.ProcRoot)
	require.Equal(t, 100*time.Millisecond, c.Interval)
	_, err = New(c, Process{}, sources.Settings{})
	require.ErrorContains(t, err, "pid: must be a process id")
	src, err := New(c, Process{PID: 1}, sources.Settings{})
	require.NoError(t, err)
	require.IsType(t, &Source{}, src)
}

// startChild starts the test binary as a child that lives until its stdin
// is closed.
func startChild(t *testing.T) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envChild+"=1", "GORACE=atexit_sleep_ms=0")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	return cmd, stdin
}

// The real /proc of this test process: no DRM fds, its child found, and
// procfs giving fresh text on each pread of a kept-open fdinfo file.
func TestRealProc(t *testing.T) {
	cmd, _ := startChild(t)
	self := os.Getpid()

	f, err := os.CreateTemp(t.TempDir(), "fake-drm")
	require.NoError(t, err)
	defer f.Close()
	fakeFD := int(f.Fd())

	cfg := DefaultConfig()
	var proc Process
	proc.PID = self
	cfg.SysRoot = t.TempDir()
	src, err := New(cfg, proc, sources.Settings{Logger: testLogger(t)})
	require.NoError(t, err)

	// Plain: no DRM fds at all.
	s, err := newSampler(src.cfg, os.Readlink, src.log, self)
	require.NoError(t, err)
	smp := s.sample(time.Now())
	require.NotNil(t, smp)
	s.close()
	require.Contains(t, pids(smp), self)
	require.Contains(t, pids(smp), cmd.Process.Pid)
	for _, p := range smp.Procs {
		require.Empty(t, p.FDs, "pid %d", p.PID)
	}
	require.Empty(t, smp.Cards)

	// One ordinary fd made to look like a DRM fd: its fdinfo is re-read
	// through the open file and follows the file position.
	fake := func(name string) (string, error) {
		if name == filepath.Join("/proc", strconv.Itoa(self), "fd", strconv.Itoa(fakeFD)) {
			return "/dev/dri/renderD128", nil
		}
		return os.Readlink(name)
	}
	s, err = newSampler(src.cfg, fake, src.log, self)
	require.NoError(t, err)
	defer s.close()
	t0 := time.Now()
	smp = s.sample(t0)
	got := fdsOf(t, smp, self)
	require.Len(t, got, 1)
	require.Contains(t, got[fakeFD].Text, "pos:\t0\n")
	_, err = f.Seek(12345, io.SeekStart)
	require.NoError(t, err)
	smp = s.sample(t0.Add(time.Millisecond)) // no rescan: same open file
	require.Contains(t, fdsOf(t, smp, self)[fakeFD].Text, "pos:\t12345\n")
}

// Run on a real child: it ends by itself when the child is gone.
func TestRealProcRootExits(t *testing.T) {
	cmd, stdin := startChild(t)
	cfg := DefaultConfig()
	var proc Process
	proc.PID = cmd.Process.Pid
	cfg.SysRoot = t.TempDir()
	cfg.Interval = 5 * time.Millisecond
	src, err := New(cfg, proc, sources.Settings{Logger: testLogger(t)})
	require.NoError(t, err)
	rec := &recorder{onSample: func(n int) {
		if n == 2 {
			_ = stdin.Close()
		}
	}}
	done := make(chan error, 1)
	go func() { done <- src.Run(t.Context(), rec.emit) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("sampler did not notice the root exit")
	}
	require.GreaterOrEqual(t, len(rec.samples), 2)
	for _, smp := range rec.samples {
		require.Equal(t, []int{cmd.Process.Pid}, pids(smp), fmt.Sprint(smp.Procs))
	}
}

// A pre-5.19 amdgpu fd (no drm- keys) is sampled too, with fd links or
// without them (a captured tree: the sampler then keeps fds by content).
func TestSamplerKeepsPre519AmdgpuFDs(t *testing.T) {
	t.Parallel()
	for _, links := range []bool{true, false} {
		tr := newTree(t, true, links)
		tr.addProc(1, 0, "init", 1)
		tr.addProc(100, 1, "llama-cli", 5000)
		tr.addFD(100, 3, "/dev/dri/renderD128", fixture(t, "amdgpu-5.18"))
		tr.addFD(100, 4, "/dev/kfd", fixture(t, "kfd"))
		cfg := DefaultConfig()
		cfg.ProcRoot, cfg.SysRoot = tr.proc, tr.sys
		s, err := newSampler(cfg, tr.readlink, testLogger(t), 100)
		require.NoError(t, err)
		smp := s.sample(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
		s.close()
		require.NotNil(t, smp)
		var fds []int
		for _, p := range smp.Procs {
			for _, fd := range p.FDs {
				fds = append(fds, fd.FD)
			}
		}
		require.Equal(t, []int{3}, fds, "links=%v", links)
	}
}

// TestRunProcRootBlind: a live process (this test's own) that proc_root
// does not show (a container given the host's /proc) is said at once, at
// WARN, with the pid and the directory; a pid that names no process at
// all (a child gone before the first sample) is not.
func TestRunProcRootBlind(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	var mu sync.Mutex
	log := zerolog.New(zerolog.SyncWriter(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(b)
	})))
	cfg := DefaultConfig()
	var proc Process
	cfg.ProcRoot, cfg.SysRoot = t.TempDir(), t.TempDir()
	proc.PID = os.Getpid()
	src, err := New(cfg, proc, sources.Settings{Logger: log})
	require.NoError(t, err)
	require.ErrorIs(t, src.Run(t.Context(), (&recorder{}).emit), ErrNoProcess)
	mu.Lock()
	out := logs.String()
	logs.Reset()
	mu.Unlock()
	require.Contains(t, out, `"level":"warn"`)
	require.Contains(t, out, fmt.Sprintf(`pid %d not found under %s; no fdinfo will be sampled`, os.Getpid(), cfg.ProcRoot))

	// A pid no process has (the child exited before the first sample).
	gone := exec.Command("true")
	require.NoError(t, gone.Run())
	proc.PID = gone.Process.Pid
	src, err = New(cfg, proc, sources.Settings{Logger: log})
	require.NoError(t, err)
	require.ErrorIs(t, src.Run(t.Context(), (&recorder{}).emit), ErrNoProcess)
	mu.Lock()
	defer mu.Unlock()
	require.NotContains(t, logs.String(), "not found under")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
