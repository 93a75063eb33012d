//go:build !linux

package offline

import (
	"os"

	"github.com/gttsplit/gttsplit/pkg/split"
)

func readLogMappedKeep(feed *split.LogFeed, f *os.File, size int64, block, workers int) (uint64, error) {
	return readLogMapped(feed, f, size, block, workers)
}
