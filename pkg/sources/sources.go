// Package sources defines what a collector's sources are: things that observe
// one llama.cpp process (its log lines, its fdinfo, its lifecycle) and hand
// records downstream until their input ends or their context is cancelled.
//
// # Lifecycle
//
// The caller owns the goroutine that calls Run. Run blocks until ctx is
// cancelled or the input ends; both return nil. Any other error is a failure
// of that source only.
//
// # Acknowledgement and checkpointing
//
// Emit hands one Record downstream and may block for back-pressure. The
// downstream calls Record.Ack (when set) once the record is durable: the
// broker acknowledged every event built from it, or it was written to the
// disk spool. A source MUST NOT advance a persisted checkpoint (a file
// offset) before Ack was called for every record up to that position.
package sources

import (
	"context"
	"errors"
	"fmt"

	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/rs/zerolog"
)

// Record is what a source hands downstream. Exactly one of Lines, Sample,
// Started and Finished is set.
type Record struct {
	// Lines is a batch of consecutive log lines of one stream; their Seq
	// values come from the run's single line counter.
	Lines []split.Line
	// Sample is one sampling tick of the process tree.
	Sample *split.Sample
	// Started announces the run (once, first).
	Started *split.RunInfo
	// Finished closes the run (once, last).
	Finished *split.FinishInfo
	// Ack, if not nil, is called exactly once by the downstream when the
	// record is durable. It must not block.
	Ack func()
}

// Emit hands one record downstream. It blocks for back-pressure and returns
// an error only when the record could not be accepted (ctx cancelled, the
// pipeline closed).
type Emit func(ctx context.Context, r Record) error

// Source observes one thing and emits records until ctx is done or its input
// ends.
type Source interface {
	// Run blocks until ctx is cancelled or the input ends; both return nil.
	Run(ctx context.Context, emit Emit) error
}

// Settings are what the collector hands every source factory.
type Settings struct {
	Logger zerolog.Logger
}

// Factory builds one type of source from its config.
type Factory struct {
	Type          string
	DefaultConfig func() any
	New           func(cfg any, set Settings) (Source, error)
}

// Registry maps a source type to its factory.
type Registry map[string]Factory

// ErrDuplicateType is returned by NewRegistry for two factories of one type.
var ErrDuplicateType = errors.New("sources: duplicate source type")

// NewRegistry builds a registry; a duplicate type is an error.
func NewRegistry(fs ...Factory) (Registry, error) {
	r := make(Registry, len(fs))
	for _, f := range fs {
		if _, ok := r[f.Type]; ok {
			return nil, fmt.Errorf("%w %q", ErrDuplicateType, f.Type)
		}
		r[f.Type] = f
	}
	return r, nil
}
