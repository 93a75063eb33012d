//go:build unix

package logtail

import (
	"os"
	"syscall"
)

// identity returns the device and inode of a file, the part of a checkpoint
// that survives a rename.
func identity(fi os.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), uint64(st.Ino) //nolint:unconvert // Dev is not uint64 on every unix
	}
	return 0, 0
}
