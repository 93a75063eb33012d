package collector

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/pkg/sources"
)

// finishGoneRuns finishes, one after the other, runs whose process exited
// while no collector watched it (killed collector, then the process
// exited, then the collector came back): each is finished as an attach
// that saw the exit would have (finishGoneRun). It stops at a signal (or
// when ctx ends), and then says so (stopped).
func finishGoneRuns(ctx context.Context, cfg config.Collector, io IO, log zerolog.Logger, stateDir string, gone []*sentLog) (stopped bool, err error) {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go forward(ctx, io, false, func(os.Signal) { stop() })
	var errs []error
	for _, sl := range gone {
		if ctx.Err() != nil {
			break
		}
		errs = append(errs, finishGoneRun(ctx, cfg, log, stateDir, sl))
	}
	return ctx.Err() != nil, errors.Join(errs...)
}

// finishGoneRun reads the run's log from its read position to its end
// (a last line without newline too, as at the process's exit), publishes
// those lines, then the run-finished event, and removes the sent log: the
// path of an attach that saw the process exit, without the samples (there
// is no process left to sample). A signal meanwhile leaves the run
// unfinished, its read position saved, for the next attach.
func finishGoneRun(ctx context.Context, cfg config.Collector, log zerolog.Logger, stateDir string, sl *sentLog) error {
	cfg.Host = sl.Host
	s, err := newSession(ctx, cfg, sl.RunID, true, log)
	if err != nil {
		return err
	}
	s.pipe.sent = sl
	s.log.Warn().Int("pid", sl.PID).Str("log", sl.Log).
		Msg("the attached process exited while no collector watched it: this attach finishes its run from the log (read on from where the last attach left it); the split has no fdinfo samples after that attach stopped, so its peaks may miss the process's last allocations")
	// The run's end: the last moment the process is known to have been
	// alive, the log's last modification or the last sample's time
	// (attach numbers samples by their time in ns), whichever is later;
	// now when neither is known. The process exited at or after it, but
	// when exactly nobody saw.
	var finished time.Time
	if sl.LastSample > 0 {
		finished = time.Unix(0, int64(sl.LastSample))
	}
	var runErr error
	if sl.Log != "" {
		done := make(chan struct{})
		close(done) // the process exited: read to the end
		tail, err := newLogTail(sl.Log, stateDir, sl.RunID, done, true, sources.Settings{Logger: s.log, Batch: cfg.Batch})
		if err != nil {
			_, _ = s.close(ctx)
			return err
		}
		runErr = tail.Run(ctx, s.pipe.emit)
		if fi, err := os.Stat(sl.Log); err == nil && fi.ModTime().After(finished) {
			finished = fi.ModTime()
		}
	}
	if finished.IsZero() {
		finished = time.Now()
	}
	sctx, cancel := s.shutdownCtx(ctx)
	defer cancel()
	switch {
	case ctx.Err() != nil:
		s.log.Info().Msg("stopped before the run was finished; run the same attach again to finish it")
	case runErr != nil:
		s.log.Error().Err(runErr).Msg("the run's log could not be read to its end: the run is left unfinished")
	default:
		s.finishAttached(sctx, finished)
		s.log.Info().Time("finished", finished).Msg("finished the run of a process that exited while no collector watched it")
	}
	_, closeErr := s.close(sctx)
	return errors.Join(runErr, closeErr)
}
