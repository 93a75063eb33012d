//go:build unix

package aggregator

import "syscall"

// diskFree is the room dir's file system has left for an unprivileged
// writer.
func diskFree(dir string) (uint64, bool) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0, false
	}
	return uint64(fs.Bavail) * uint64(fs.Bsize), true
}
