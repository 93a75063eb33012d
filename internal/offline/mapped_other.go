//go:build !linux

package offline

import (
	"os"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// readLogMapped maps files on Linux only: elsewhere it returns errNoMap.
func readLogMapped(*split.LogFeed, *os.File, int64, int, int) (uint64, error) {
	return 0, errNoMap
}

func dontNeed([]byte) {}
