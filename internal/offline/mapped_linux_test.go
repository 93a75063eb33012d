package offline

import (
	"os"
	"syscall"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// readLogMappedKeep is readLogMapped keeping every page it touched mapped
// to the end (the file's size resident): what releasing the blocks costs.
func readLogMappedKeep(feed *split.LogFeed, f *os.File, size int64, block, workers int) (uint64, error) {
	m, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	defer syscall.Munmap(m)
	return readPieces(feed, &mapBlocks{m: m, block: block}, f, size, block, workers, 2*workers)
}
