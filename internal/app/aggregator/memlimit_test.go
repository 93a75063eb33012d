package aggregator

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// The runtime's soft limit leaves room for what it does not manage (the
// program's mapped code and data: read from /proc where it is there) and
// an eighth for collections that end late: the process, not only its
// heap, stays within memory_limit_mib. Before, the runtime got the limit
// whole and the resident set passed it by ~22 MiB.
func TestGoMemoryLimitLeavesWhatTheRuntimeDoesNotManage(t *testing.T) {
	require.Zero(t, GoMemoryLimit(0))
	const mib = 224
	// The program's mapped pages grow while other tests run (its code
	// paged in): the limit is read between two readings of them.
	before := nonGoMemory()
	limit := GoMemoryLimit(mib)
	nonGo := nonGoMemory()
	if _, err := os.Stat("/proc/self/status"); err == nil {
		require.NotEqual(t, int64(nonGoFallback), nonGo, "read from /proc/self/status")
	}
	require.Greater(t, nonGo, int64(nonGoMargin), "the program's own pages counted")
	lag := int64(collectorLag * float64(mib<<20))
	require.GreaterOrEqual(t, limit, int64(mib)<<20-nonGo-lag)
	require.LessOrEqual(t, limit, int64(mib)<<20-before-lag)
	require.Less(t, limit, int64(mib)<<20-int64(mib)<<20/8)
	// A small limit still leaves the runtime at least half of it.
	require.GreaterOrEqual(t, GoMemoryLimit(16), int64(8)<<20)
}
