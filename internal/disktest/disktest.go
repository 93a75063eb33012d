// Package disktest gives tests a real full disk: a small tmpfs the test
// mounts (as root, on Linux) and fills, so that writes fail with the
// kernel's own ENOSPC ("no space left on device"), not a simulated error.
package disktest

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a new temporary directory and
// unmounts it when the test ends. It skips the test, saying why, where it
// cannot mount one (not Linux, not root, no CAP_SYS_ADMIN).
func Tmpfs(t testing.TB, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := mount(dir, size); err != nil {
		t.Skipf("needs a tmpfs of its own for a real full disk (ENOSPC), which only root can mount: %v", err)
	}
	t.Cleanup(func() {
		if err := unmount(dir); err != nil {
			t.Errorf("unmount the test's tmpfs %s: %v", dir, err)
		}
	})
	return dir
}

// Fill writes a file named name in dir until the file system is full and
// returns its path; removing it frees the room again.
func Fill(t testing.TB, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for i := range buf {
		buf[i] = byte(i) // not zeros: every block is really used
	}
	for n := len(buf); n >= 1; {
		_, err := f.Write(buf[:n])
		switch {
		case err == nil:
		case errors.Is(err, syscall.ENOSPC):
			n /= 2 // fill the last partial blocks too
		default:
			t.Fatal(err)
		}
	}
	return path
}
