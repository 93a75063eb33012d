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
	"time"

	"github.com/gttsplit/gttsplit/pkg/conf"
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

// Settings are what the collector hands every source besides its own
// config. The zero value is usable: a disabled logger, DefaultBatchConfig.
type Settings struct {
	Logger zerolog.Logger
	// Batch is how a source groups log lines into Records; a zero field
	// takes DefaultBatchConfig's.
	Batch BatchConfig
}

// MaxLineBytes is the longest piece of a log line a source emits: a longer
// line is cut into pieces of this size, each emitted as a line of its own
// (consecutive Seq values), so that any line, even one whose every byte
// needs a six-byte JSON escape, fits in one event under the smallest
// max_payload a broker may have (1 MiB; see events.MaxEventBytes).
const MaxLineBytes = 160 << 10

// BatchConfig is the batch.* keys: how log lines are grouped into records, and
// so into events.
type BatchConfig struct {
	// MaxLines is the most lines one Record carries.
	MaxLines int `mapstructure:"max_lines" desc:"maximum log lines in one event"`
	// MaxDelay is the longest a line waits for its batch to fill before
	// the batch is emitted anyway.
	MaxDelay time.Duration `mapstructure:"max_delay" desc:"maximum time a log line waits for its batch to be published"`
}

// DefaultBatchConfig returns the defaults of the batch.* keys.
func DefaultBatchConfig() BatchConfig {
	return BatchConfig{MaxLines: 256, MaxDelay: 50 * time.Millisecond}
}

// Validate reports every problem of b (conf.FieldError, keys relative to
// batch.*).
func (b BatchConfig) Validate() error {
	var p conf.Problems
	p.AtLeast("max_lines", int64(b.MaxLines), 1)
	p.Positive("max_delay", b.MaxDelay)
	return p.Err()
}

// OrDefault returns b with each zero field (or a negative one) set to
// DefaultBatchConfig's.
func (b BatchConfig) OrDefault() BatchConfig {
	d := DefaultBatchConfig()
	if b.MaxLines <= 0 {
		b.MaxLines = d.MaxLines
	}
	if b.MaxDelay <= 0 {
		b.MaxDelay = d.MaxDelay
	}
	return b
}
