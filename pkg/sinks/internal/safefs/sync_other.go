//go:build !linux

package safefs

import (
	"fmt"
	"os"
)

// syncAll makes the written files durable: an fsync each where there is
// no syncfs.
func syncAll(_ *os.Root, files []*os.File) error {
	for _, f := range files {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", f.Name(), err)
		}
	}
	return nil
}

// SyncFS makes the renames in dirs durable: an fsync of each directory.
func SyncFS(root *os.Root, dirs []string) error {
	for _, d := range dirs {
		if err := SyncDir(root, d); err != nil {
			return err
		}
	}
	return nil
}
