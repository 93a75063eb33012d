package sinks

import (
	"context"
	"fmt"
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

// Settings are what the aggregator hands every sink factory and the Fanout.
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

// Factory builds one type of sink from its config.
type Factory struct {
	// Type is the sink's config key in lower_snake_case ("file", "json",
	// "issue_comment").
	Type string
	// DefaultConfig returns a pointer to a new config struct holding every
	// default; the config loader decodes the user's keys into it.
	DefaultConfig func() any
	// New validates cfg (as returned by DefaultConfig, pointer or value) and
	// builds the sink.
	New func(cfg any, set Settings) (Sink, error)
}

// Registry maps a sink type to its factory.
type Registry map[string]Factory

// NewRegistry builds a registry; a duplicate or empty type is an error.
func NewRegistry(fs ...Factory) (Registry, error) {
	r := make(Registry, len(fs))
	for _, f := range fs {
		if f.Type == "" || f.New == nil || f.DefaultConfig == nil {
			return nil, fmt.Errorf("sinks: incomplete factory for type %q", f.Type)
		}
		if _, ok := r[f.Type]; ok {
			return nil, fmt.Errorf("%w %q", ErrDuplicateType, f.Type)
		}
		r[f.Type] = f
	}
	return r, nil
}

// New builds a sink of type typ from cfg.
func (r Registry) New(typ string, cfg any, set Settings) (Sink, error) {
	f, ok := r[typ]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, typ)
	}
	s, err := f.New(cfg, set)
	if err != nil {
		return nil, err // the caller names the sink (its config key)
	}
	return s, nil
}

// Secret is a config string that must never be printed: fmt, JSON and text
// marshalling show "[redacted]" (or "" when empty). Reveal returns the value.
type Secret string

const redacted = "[redacted]"

// Reveal returns the secret's value, for the one place that sends it.
func (s Secret) Reveal() string { return string(s) }

// String returns "[redacted]", or "" for an empty secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString is String, so %#v does not print the value either.
func (s Secret) GoString() string { return fmt.Sprintf("%q", s.String()) }

// MarshalJSON writes the redacted form.
func (s Secret) MarshalJSON() ([]byte, error) { return fmt.Appendf(nil, "%q", s.String()), nil }

// MarshalText writes the redacted form (YAML, zerolog and friends).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
