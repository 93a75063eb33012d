package collector

import (
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/pkg/sources/fdinfo"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// sampleTrigger is the line hook that asks the fdinfo sampler for a
// sample at every memory-relevant log line (a buffer line, a trace line, a
// load or context marker): the sample is taken in the goroutine that read
// the line, before it reads on (fdinfo.Source.SampleNow), so a transient
// peak (a packed copy built and freed between two ticks) is sampled while
// it is resident. Lines that come before the sampler is set ask nothing.
type sampleTrigger struct {
	src atomic.Pointer[fdinfo.Source]
}

// line looks at one captured line.
func (tr *sampleTrigger) line(text []byte) {
	if s := tr.src.Load(); s != nil && llamalog.MemoryLine(text) {
		s.SampleNow()
	}
}

// samplingOf reports a sampler's sampling for the run-finished event.
func samplingOf(s *fdinfo.Source) func() *split.Sampling {
	return func() *split.Sampling {
		st := s.Stats()
		return &split.Sampling{Interval: st.Interval, Triggered: st.Triggered, LargestGap: st.LargestGap}
	}
}

// llamaWatch notes whether a run's output held a llama.cpp line (a line
// llama.cpp's parser reads: a build, verbosity, model-load, context, buffer,
// breakdown, fit, trace or -v line). A command that printed none is not a
// llama.cpp run, or its log is elsewhere: its split says unknown for every
// log row, and the collector says why. Its hook is safe for concurrent use
// (the child's streams are read on their own goroutines) and stops looking
// once it saw one.
type llamaWatch struct {
	p    *llamalog.Parser
	seen atomic.Bool
}

func newLlamaWatch() *llamaWatch { return &llamaWatch{p: llamalog.MustParser()} }

// line looks at one captured line.
func (w *llamaWatch) line(text []byte) {
	if w.seen.Load() || !w.p.Relevant(text, true) {
		return
	}
	var scratch []byte
	if r, ok := w.p.Parse(0, llamalog.Payload(text, &scratch)); ok && r.Kind != llamalog.KindMalformed {
		w.seen.Store(true)
	}
}

// warnIfNone logs a warning naming command when no llama.cpp line was
// seen.
func (w *llamaWatch) warnIfNone(log zerolog.Logger, command, where string) {
	if w.seen.Load() {
		return
	}
	log.Warn().Str("command", command).
		Msgf("%s printed no llama.cpp line (no build, model load, buffer or -v line): %q does not look like a llama.cpp run, so its split says unknown for every log row", where, command)
}
