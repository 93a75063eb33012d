package fdinfo

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// naiveSample is the baseline the sampler is measured against: every tick
// it lists every fdinfo file of every process and reads them all, keeping
// those of a DRM driver.
func naiveSample(proc string, pids []int) []split.ProcFDs {
	out := make([]split.ProcFDs, 0, len(pids))
	for _, pid := range pids {
		dir := filepath.Join(proc, strconv.Itoa(pid), "fdinfo")
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		p := split.ProcFDs{PID: pid}
		for _, e := range entries {
			fd, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil || !bytes.Contains(b, keyDriver) {
				continue
			}
			p.FDs = append(p.FDs, split.FDInfo{FD: fd, Text: string(b)})
		}
		out = append(out, p)
	}
	return out
}

// benchFixture is a proc root whose process 100 has 100 fds, 3 of them DRM.
func benchFixture(b *testing.B) *tree {
	tr := newTree(b, false, true)
	tr.addProc(1, 0, "init", 1)
	tr.addProc(100, 1, "llama-server", 5000)
	others := []struct{ link, name string }{
		{"/dev/kfd", "kfd"}, {"/dmabuf:", "dmabuf"}, {"anon_inode:[eventfd]", "eventfd"}, {"/dev/pts/0", "tty"},
	}
	amd := fixture(b, "amdgpu-6.13")
	for fd := range 100 {
		switch fd {
		case 10, 11:
			tr.addFD(100, fd, "/dev/dri/renderD128", amd)
		case 50:
			tr.addFD(100, fd, "/dev/dri/card1", fixture(b, "amdgpu-6.4"))
		default:
			o := others[fd%len(others)]
			tr.addFD(100, fd, o.link, fixture(b, o.name))
		}
	}
	tr.addCard("card1", "amdgpu", 1<<30, 96<<30)
	return tr
}

// selfWithFiles opens n more files in this process and makes three of its
// fds look like DRM fds to the sampler; it returns that readlink.
func selfWithFiles(b *testing.B, n int) func(string) (string, error) {
	dir := b.TempDir()
	drm := map[string]bool{}
	self := strconv.Itoa(os.Getpid())
	for i := range n {
		f, err := os.Create(filepath.Join(dir, strconv.Itoa(i)))
		require.NoError(b, err)
		b.Cleanup(func() { _ = f.Close() })
		if i%40 == 0 {
			drm[filepath.Join("/proc", self, "fd", strconv.Itoa(int(f.Fd())))] = true
		}
	}
	require.Len(b, drm, 3)
	return func(name string) (string, error) {
		if drm[name] {
			return "/dev/dri/renderD128", nil
		}
		return os.Readlink(name)
	}
}

// BenchmarkSample compares one tick of the sampler with a naive full read
// of every fdinfo file, on a fixture tree and on this very process (/proc),
// each with about 100 open fds of which 3 are DRM.
//
// "sampler" advances the clock by the default 100 ms interval per tick, so
// one tick in ten (RescanInterval 1 s) includes the rescan: that is the
// amortised cost at the defaults. "sampler-steady" never rescans.
func BenchmarkSample(b *testing.B) {
	type target struct {
		name      string
		proc, sys string
		pid       int
		readlink  func(string) (string, error)
	}
	var targets []target
	fix := benchFixture(b)
	targets = append(targets, target{"fixture", fix.proc, fix.sys, 100, os.Readlink})
	targets = append(targets, target{"self", "/proc", b.TempDir(), os.Getpid(), selfWithFiles(b, 100)})

	for _, tg := range targets {
		cfg := DefaultConfig()
		cfg.ProcRoot, cfg.SysRoot = tg.proc, tg.sys
		for _, mode := range []struct {
			name string
			step time.Duration
		}{{"sampler", cfg.Interval}, {"sampler-steady", time.Nanosecond}} {
			b.Run(tg.name+"/"+mode.name, func(b *testing.B) {
				s, err := newSampler(cfg, tg.readlink, zerolog.Logger{}, tg.pid)
				require.NoError(b, err)
				defer s.close()
				now := time.Now()
				smp := s.sample(now)
				require.NotNil(b, smp)
				require.Len(b, smp.Procs[0].FDs, 3)
				b.ReportAllocs()
				n := 0
				for b.Loop() {
					now = now.Add(mode.step)
					if s.sample(now) == nil {
						b.Fatal("root gone")
					}
					n++
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(n), "µs/sample")
			})
		}
		b.Run(tg.name+"/naive", func(b *testing.B) {
			got := naiveSample(tg.proc, []int{tg.pid})
			if tg.name == "fixture" {
				require.Len(b, got[0].FDs, 3)
			}
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				naiveSample(tg.proc, []int{tg.pid})
				n++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(n), "µs/sample")
		})
	}
}
