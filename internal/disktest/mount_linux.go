package disktest

import (
	"strconv"

	"golang.org/x/sys/unix"
)

func mount(dir string, size int64) error {
	return unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+strconv.FormatInt(size, 10))
}

// unmount detaches the mount at once, even with files still open in it (a
// failed test may not have closed them).
func unmount(dir string) error { return unix.Unmount(dir, unix.MNT_DETACH) }
