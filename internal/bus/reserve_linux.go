package bus

import (
	"os"

	"golang.org/x/sys/unix"
)

// preallocate allocates the blocks of f up to size bytes on the disk
// (fallocate), extending it.
func preallocate(f *os.File, size int64) error {
	return unix.Fallocate(int(f.Fd()), 0, 0, size)
}
