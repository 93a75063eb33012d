package sinks

import (
	"context"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// BatchWriter is a Sink that writes several reports with one commit to
// durable storage for them all (group commit): the Fanout hands it the
// reports waiting in its queue together instead of one Write each.
//
// WriteBatch prepares every report, then calls keep for each just before
// it becomes visible: a report keep refuses is not written (its run's
// partition moved to another aggregator, which writes it). It returns, for
// each report, whether it was written, and an error that is the batch's:
// on an error no report counts as written (a retry writes them again; the
// sink is idempotent). keep may be nil (keep all). It is called from one
// goroutine at a time per sink, like Write.
type BatchWriter interface {
	Sink
	WriteBatch(ctx context.Context, rs []split.Report, keep func(split.Report) bool) ([]bool, error)
}

// Kept calls keep for each report (all kept when keep is nil).
func Kept(rs []split.Report, keep func(split.Report) bool) []bool {
	out := make([]bool, len(rs))
	for i, r := range rs {
		out[i] = keep == nil || keep(r)
	}
	return out
}
