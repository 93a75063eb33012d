package aggregator

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// The memory budget of `aggregator serve`, memory_limit_mib M (what the
// process's resident set may reach), is split three ways:
//
//   - what the Go runtime does not manage: the program's own code and
//     data mapped from its file, and the C library's (nonGoMemory, ~21
//     MiB); GoMemoryLimit gives the runtime M less that and an eighth of
//     M (the soft limit is passed while collections end behind a flood's
//     allocations) as its soft limit, so that the garbage collector holds
//     the heap where the resident set stays within M;
//   - the runs: runMemory, half of M, bounds the open runs held in memory
//     and what every run costs wherever its state is (its run index
//     summary, its cold entry, with the embedded server the server's
//     index of its keys: embeddedRunCost an open run,
//     embeddedClosedRunCost a closed run kept for store.retention); the
//     closed runs kept take at most 3/8 of it, past which those closed
//     first are deleted before store.retention (internal/runtable's
//     trim.go);
//   - the sinks' queues: sinkMemory, a sixteenth of M, bounds the splits
//     they hold while behind (by their JSON size); past it a split is
//     deferred, its run id kept and the split read back from the state
//     bucket in its turn, none lost;
//   - the embedded server's buffers: its memory streams are bounded to a
//     sixteenth of M (embeddedOptions); its file store's block caches
//     (a state bucket's block, 4 MiB, is read whole for one key) are not
//     bounded by any option the server has: they come and go with the
//     writes and reads, and the garbage collector frees them; the run
//     table holds its pulls and closes while the heap is past its share
//     (internal/runtable/hold.go), so that they drain;
//   - the rest of the process: the connections, events in flight, and
//     the collector's headroom.

// nonGoFallback is taken for nonGoMemory where /proc is not there.
const nonGoFallback = 32 << 20

// nonGoMargin is added to what nonGoMemory reads at the start: code pages
// first run later.
const nonGoMargin = 4 << 20

// collectorLag is the share of the limit kept for the runtime's soft
// limit being passed while collections end behind the allocations (a
// flood's first minute: 8 MiB over at 50,000 runs without it, load 33;
// 0.4 MiB over at 100,000 runs with a sixteenth, load 7).
const collectorLag = 1.0 / 8

// embeddedRunCost is what the embedded server takes in memory for a run in
// the state bucket: its keys' entries in the store's subject index
// (measured: 23 MB for 50,000 open runs with a summary each, 460 bytes a
// run; docs/capacity.md).
const embeddedRunCost = 512

// embeddedClosedRunCost is what the embedded server takes in memory for a
// closed run kept in the state bucket: its closed key's entry in the
// store's subject index (measured: ~680 bytes a run for 30,000 closed
// runs, docs/capacity.md).
const embeddedClosedRunCost = 680

// sinkShare is the share of M the sinks' queues may hold (sinkMemory).
const sinkShare = 16

// sinkMemory is what the sinks' queues may hold in memory, in bytes, for a
// limit of limitMiB MiB (0: no bound but sinks.max_pending).
func sinkMemory(limitMiB int) int64 { return int64(limitMiB) << 20 / sinkShare }

// nonGoMemory is what of this process's resident set the Go runtime does
// not manage: its resident pages mapped from files (the program, the C
// library) and shared memory, read from /proc/self/status, with a margin.
func nonGoMemory() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nonGoFallback
	}
	var n int64
	found := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 2 || (string(f[0]) != "RssFile:" && string(f[0]) != "RssShmem:") {
			continue
		}
		kb, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			return nonGoFallback
		}
		n += kb << 10
		found = true
	}
	if !found {
		return nonGoFallback
	}
	return n + nonGoMargin
}

// GoMemoryLimit is the Go runtime's soft memory limit for a process that
// must stay within limitMiB MiB: that less what the runtime does not
// manage and collectorLag of it, and at least half of it (0: no limit).
func GoMemoryLimit(limitMiB int) int64 {
	if limitMiB <= 0 {
		return 0
	}
	m := int64(limitMiB) << 20
	return max(m-nonGoMemory()-int64(collectorLag*float64(m)), m/2)
}
