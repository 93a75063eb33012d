package fdinfo

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// fixture reads testdata/fdinfo/<name>.txt.
func fixture(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "fdinfo", name+".txt"))
	require.NoError(t, err)
	return string(b)
}

// tree is a proc root and a sys root in a temporary directory that a test
// changes between ticks. Files are rewritten in place (same inode), as the
// sampler keeps them open. procfs fails reads of a file whose process or fd
// is gone; a removed file here is truncated first, and the sampler treats
// an empty read as that failure.
type tree struct {
	t         testing.TB
	proc, sys string
	children  bool // write task/<pid>/children files
	links     bool // write fd/<n> links
	readlinks atomic.Int64
}

func newTree(t testing.TB, children, links bool) *tree {
	t.Helper()
	dir := t.TempDir()
	tr := &tree{t: t, proc: filepath.Join(dir, "proc"), sys: filepath.Join(dir, "sys"), children: children, links: links}
	require.NoError(t, os.MkdirAll(tr.proc, 0o755))
	return tr
}

// readlink counts the sampler's readlink calls.
func (tr *tree) readlink(name string) (string, error) {
	tr.readlinks.Add(1)
	return os.Readlink(name)
}

func (tr *tree) write(path, content string) {
	tr.t.Helper()
	require.NoError(tr.t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(tr.t, os.WriteFile(path, []byte(content), 0o644))
}

func (tr *tree) pidDir(pid int) string { return filepath.Join(tr.proc, strconv.Itoa(pid)) }

// statLine is a /proc/<pid>/stat line; comm may hold spaces and parentheses.
func statLine(pid, ppid int, comm string, start uint64) string {
	return fmt.Sprintf("%d (%s) S %d %d %d 0 -1 4194560 100 0 0 0 10 5 0 0 20 0 4 0 %d 1048576 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
		pid, comm, ppid, pid, pid, start)
}

// addProc writes (or rewrites) a process and, with children files, adds it
// to its parent's children.
func (tr *tree) addProc(pid, ppid int, comm string, start uint64) {
	tr.t.Helper()
	dir := tr.pidDir(pid)
	tr.write(filepath.Join(dir, "stat"), statLine(pid, ppid, comm, start))
	require.NoError(tr.t, os.MkdirAll(filepath.Join(dir, "fdinfo"), 0o755))
	if tr.links {
		require.NoError(tr.t, os.MkdirAll(filepath.Join(dir, "fd"), 0o755))
	}
	if tr.children {
		own := filepath.Join(dir, "task", strconv.Itoa(pid), "children")
		if _, err := os.Stat(own); err != nil {
			tr.write(own, "")
		}
		if ppid > 0 {
			// Children of a second thread of the parent, to check that every
			// task's file is read.
			path := filepath.Join(tr.pidDir(ppid), "task", strconv.Itoa(ppid+1000), "children")
			old, _ := os.ReadFile(path)
			tr.write(path, string(old)+strconv.Itoa(pid)+" ")
		}
	}
}

// removeProc makes a process vanish.
func (tr *tree) removeProc(pid int) {
	tr.t.Helper()
	dir := tr.pidDir(pid)
	require.NoError(tr.t, filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			return os.Truncate(path, 0)
		}
		return nil
	}))
	require.NoError(tr.t, os.RemoveAll(dir))
}

// addFD writes fd's fdinfo text and, with links, its fd link.
func (tr *tree) addFD(pid, fd int, link, text string) {
	tr.t.Helper()
	tr.write(filepath.Join(tr.pidDir(pid), "fdinfo", strconv.Itoa(fd)), text)
	if tr.links {
		l := filepath.Join(tr.pidDir(pid), "fd", strconv.Itoa(fd))
		_ = os.Remove(l)
		require.NoError(tr.t, os.Symlink(link, l))
	}
}

// setText rewrites fd's fdinfo in place.
func (tr *tree) setText(pid, fd int, text string) {
	tr.t.Helper()
	tr.write(filepath.Join(tr.pidDir(pid), "fdinfo", strconv.Itoa(fd)), text)
}

// relink points fd's link elsewhere (no-op without links).
func (tr *tree) relink(pid, fd int, link string) {
	tr.t.Helper()
	if tr.links {
		l := filepath.Join(tr.pidDir(pid), "fd", strconv.Itoa(fd))
		require.NoError(tr.t, os.Remove(l))
		require.NoError(tr.t, os.Symlink(link, l))
	}
}

func (tr *tree) removeFD(pid, fd int) {
	tr.t.Helper()
	path := filepath.Join(tr.pidDir(pid), "fdinfo", strconv.Itoa(fd))
	require.NoError(tr.t, os.Truncate(path, 0))
	require.NoError(tr.t, os.Remove(path))
	if tr.links {
		require.NoError(tr.t, os.Remove(filepath.Join(tr.pidDir(pid), "fd", strconv.Itoa(fd))))
	}
}

// addCard writes a /sys/class/drm card; driver "" means no driver link.
func (tr *tree) addCard(name, driver string, used, total int64) {
	tr.t.Helper()
	dev := filepath.Join(tr.sys, "class", "drm", name, "device")
	require.NoError(tr.t, os.MkdirAll(dev, 0o755))
	if driver != "" {
		require.NoError(tr.t, os.Symlink("../../../../bus/pci/drivers/"+driver, filepath.Join(dev, "driver")))
	}
	tr.setCard(name, used, total)
}

func (tr *tree) setCard(name string, used, total int64) {
	tr.t.Helper()
	dev := filepath.Join(tr.sys, "class", "drm", name, "device")
	tr.write(filepath.Join(dev, "mem_info_gtt_used"), strconv.FormatInt(used, 10)+"\n")
	tr.write(filepath.Join(dev, "mem_info_gtt_total"), strconv.FormatInt(total, 10)+"\n")
}

// withGTT returns an amdgpu 6.13 text whose GTT is mib MiB and client id.
func withGTT(text string, mib int, client string) string {
	r := strings.NewReplacer(
		"drm-total-gtt:\t20 MiB", fmt.Sprintf("drm-total-gtt:\t%d MiB", mib),
		"drm-resident-gtt:\t20 MiB", fmt.Sprintf("drm-resident-gtt:\t%d MiB", mib),
		"drm-memory-gtt: \t20480 KiB", fmt.Sprintf("drm-memory-gtt: \t%d KiB", mib*1024),
		"drm-client-id:\t30", "drm-client-id:\t"+client,
	)
	return r.Replace(text)
}
