// Package dirlock takes an exclusive, advisory lock on a directory, so two
// processes cannot use one store at once. The lock is an flock(2) on a file
// in the directory; the kernel releases it when its holder exits, however
// it exits, so a crash never leaves a stale lock behind. The file holds the
// holder's pid, for the message another process gets.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrLocked is wrapped by Acquire's error when another holder has the lock.
var ErrLocked = errors.New("in use by another process")

// FileName is the lock file Acquire creates in the directory.
const FileName = ".gttsplit.lock"

// Lock is a held lock; Release gives it back.
type Lock struct {
	f *os.File
}

// Acquire creates dir if needed and locks it without waiting. When another
// process (or another Acquire in this one) holds it, the error wraps
// ErrLocked and names the holder's pid when it is known.
func Acquire(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", path, err)
	}
	if err := lockExclusive(f); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = fmt.Sprintf(" (pid %d)", pid)
			}
		}
		f.Close()
		return nil, fmt.Errorf("%s: %w%s", dir, ErrLocked, holder)
	}
	// Best effort: the pid only improves another process's message.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Release unlocks. It is idempotent.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	unlock(l.f)
	_ = l.f.Close()
	l.f = nil
}
