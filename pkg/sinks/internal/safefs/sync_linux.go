package safefs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// syncAll makes the written files durable: one syncfs(2) of the file
// system the root is on, however many files.
func syncAll(root *os.Root, _ []*os.File) error { return syncfs(root) }

// SyncFS makes the renames in dirs durable: one syncfs(2).
func SyncFS(root *os.Root, _ []string) error { return syncfs(root) }

func syncfs(root *os.Root) error {
	d, err := root.Open(".")
	if err != nil {
		return fmt.Errorf("open directory: %w", err)
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("sync file system: %w", err)
	}
	return nil
}
