package collector

import (
	"github.com/gttsplit/gttsplit/pkg/sources/fdinfo"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// newTrigger returns a channel that asks the fdinfo sampler for a sample at
// once, and the line hook that fills it: every memory-relevant log line (a
// buffer line, a trace line, a load or context marker) asks, without
// blocking; asks that come while one waits are merged. A transient peak (a
// packed copy built and freed between two ticks) is then sampled while it
// is resident.
func newTrigger() (chan struct{}, func([]byte)) {
	ch := make(chan struct{}, 1)
	return ch, func(text []byte) {
		if llamalog.MemoryLine(text) {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// samplingOf reports a sampler's sampling for the run-finished event.
func samplingOf(s *fdinfo.Source) func() *split.Sampling {
	return func() *split.Sampling {
		st := s.Stats()
		return &split.Sampling{Interval: st.Interval, Triggered: st.Triggered, LargestGap: st.LargestGap}
	}
}
