package split

// Input is what one event of a run brings to the run's fold: its start, a
// batch of its log lines, one sampling tick, or its end. The wire package
// (pkg/events) decodes an event into an Input; the fold folds it with
// Apply. One part is set; an Input with none brings nothing.
type Input struct {
	// Run describes the run (its run-started event).
	Run *RunInfo
	// Lines are log lines of one stream. With Span set they are the lines
	// a filter kept of the lines Span covers, and the others are counted
	// as read without being applied (see llamalog.LineFilter and MarkLines).
	Lines []Line
	Span  *LineSpan
	// Sample is one sampling tick.
	Sample *Sample
	// Finish is how the run ended, with the events its collector dropped.
	Finish *FinishInfo
}

// LineSpan is lines First..Last of a log stream.
type LineSpan struct {
	Stream      string
	First, Last uint64
}

// Apply folds one input: SetRun, AddLine for each line (and MarkLines for
// a span), AddSample or Finish. It reports whether the input brought
// anything new; an input folded before changes nothing.
func (f *Fold) Apply(in Input) (fresh bool) {
	switch {
	case in.Run != nil:
		fresh = f.SetRun(*in.Run)
	case in.Lines != nil || in.Span != nil:
		for _, l := range in.Lines {
			if f.AddLine(l) {
				fresh = true
			}
		}
		if s := in.Span; s != nil && f.MarkLines(s.Stream, s.First, s.Last) {
			fresh = true
		}
	case in.Sample != nil:
		fresh = f.AddSample(*in.Sample)
	case in.Finish != nil:
		fresh = f.Finish(*in.Finish)
	}
	return fresh
}
