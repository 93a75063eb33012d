//go:build !unix

package dirlock

import "os"

// Where flock is not available the lock is not enforced.
func lockExclusive(*os.File) error { return nil }

func unlock(*os.File) {}
