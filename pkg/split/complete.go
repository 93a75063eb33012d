package split

import (
	"fmt"
	"sort"
)

// Missing says what the fold still lacks of what the run's collector sent,
// one phrase per missing part ("the run-finished event", "stream stderr:
// 120 of 4,000 lines", "samples: 3 of 412"); it is empty when the run is
// complete by content: its start and finish are folded, and every line and
// sample the run-finished event announces. A run-finished event from a
// collector that did not announce what it sent completes the run by
// itself. A fold that has neither a start nor a finish (a saved log) is
// not a run: it is never complete, and Missing is empty.
func (f *Fold) Missing() []string { return f.st.missing() }

// Complete reports whether the fold holds everything its run's collector
// sent (see Missing).
func (f *Fold) Complete() bool {
	return (f.st.HaveRun || f.st.HaveFinish) && len(f.st.missing()) == 0
}

func (st *state) missing() []string {
	if !st.HaveRun && !st.HaveFinish {
		return nil
	}
	var out []string
	if !st.HaveRun {
		out = append(out, "the run-started event")
	}
	if !st.HaveFinish || st.Finish.Incomplete {
		return append(out, "the run-finished event")
	}
	sent := st.Finish.Sent
	if sent == nil {
		return out
	}
	streams := append([]StreamSent(nil), sent.Streams...)
	sort.Slice(streams, func(i, j int) bool { return streams[i].Stream < streams[j].Stream })
	for _, s := range streams {
		have := st.Lines[s.Stream].count()
		if have < s.Lines {
			out = append(out, fmt.Sprintf("stream %s: %d of %d lines (the last at seq %d)", s.Stream, s.Lines-have, s.Lines, s.LastSeq))
		}
	}
	if have := st.Ticks.Seen.count(); have < sent.Samples {
		out = append(out, fmt.Sprintf("samples: %d of %d (the last at seq %d)", sent.Samples-have, sent.Samples, sent.LastSampleSeq))
	}
	return out
}

// open reports whether the run has started and its run-finished event has
// not come (nor an idle close): what the fold lacks may still arrive.
func (st *state) open() bool { return st.HaveRun && !st.HaveFinish }
