// Package conservation holds what the conservation harnesses of the
// aggregator and the collector share: how many runs go through each fault,
// and the table they print (docs/reliability.md).
package conservation

import (
	"fmt"
	"os"
	"strings"
)

// Runs is the number of runs per fault: 100 with GTTSPLIT_CONSERVATION=long
// (the figures of docs/reliability.md), else 8, or 4 under -race.
func Runs(race bool) int {
	switch {
	case os.Getenv("GTTSPLIT_CONSERVATION") == "long":
		return 100
	case race:
		return 4
	}
	return 8
}

// Row is one line of the table.
type Row struct {
	Fault                                  string
	Runs, Sent, Folded, Lost, Dup, Flagged int
}

// Table renders rows as the Markdown table of docs/reliability.md.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| fault | runs | events sent | folded | lost | duplicated | flagged |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d |\n", r.Fault, r.Runs, r.Sent, r.Folded, r.Lost, r.Dup, r.Flagged)
	}
	return b.String()
}
