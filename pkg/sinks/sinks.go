package sinks

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/rs/zerolog"
)

// Sink delivers split reports.
//
// The aggregator (usually through a Fanout) calls Write once per report it
// wants delivered and Close once at shutdown. Implementations are safe for
// concurrent use. After Close returns, Write returns an error wrapping
// ErrClosed and no further output is produced.
type Sink interface {
	// Write delivers one report. It may be retried with the same report,
	// and writing a report again for the same run replaces the earlier one
	// (a file is rewritten, a comment edited), so a retry never duplicates
	// output. It returns ctx's error when ctx is done before delivery.
	// Errors that retrying cannot fix are marked with Permanent.
	Write(ctx context.Context, r split.Report) error
	// Close flushes buffered output, releases resources and honours ctx's
	// deadline. It is idempotent and safe to call without any Write.
	Close(ctx context.Context) error
}

// Settings are what the aggregator hands every sink and the Fanout besides
// their configs.
// The zero value is usable: see WithDefaults.
type Settings struct {
	// Logger is the parent logger; the zero value is disabled.
	Logger zerolog.Logger
	// Now returns the current time (rate-limit resets are absolute times).
	// Nil means time.Now.
	Now func() time.Time
	// Sleep waits for d or until ctx is done, returning ctx's error in the
	// latter case. Nil means SleepContext. Tests inject a recorder.
	Sleep func(ctx context.Context, d time.Duration) error
	// Stdout receives human-readable output such as a dry run's would-be
	// comments. Nil means os.Stdout.
	Stdout io.Writer
	// Lookup, if set, returns the current split of another run (for the
	// comment sink's control comparison); ok is false for an unknown run.
	// Nil means a sink knows only the splits it was given.
	Lookup func(ctx context.Context, runID string) (r split.Report, ok bool, err error)
}

// WithDefaults returns s with every nil field set to its default.
func (s Settings) WithDefaults() Settings {
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Sleep == nil {
		s.Sleep = SleepContext
	}
	if s.Stdout == nil {
		s.Stdout = os.Stdout
	}
	return s
}

// SleepContext waits for d or until ctx is done, whichever comes first, and
// returns ctx's error in the latter case.
func SleepContext(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
