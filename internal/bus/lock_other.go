//go:build !unix

package bus

import "os"

// lockFileExclusive does nothing where flock is not available.
func lockFileExclusive(*os.File) error { return nil }

func unlockFile(*os.File) {}
