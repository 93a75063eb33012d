// Package filesink writes each run's split as a Markdown report,
// DIR/<host>/<lane>/<run>.md, replacing it atomically on every write.
//
// Host, lane and run id come from the network; each becomes one path
// component that cannot leave DIR: unsafe bytes are replaced, dot-only and
// hidden names neutralised, long names capped, and a short hash of the
// original appended whenever anything was changed, so distinct ids never
// share a file while readable ids (letters, digits, '-', '_', '.') are kept
// as they are. A host named splits.jsonl is renamed too, so the file and
// JSON sinks can share a directory. The directory is opened as an os.Root,
// so symbolic links inside it cannot lead out either.
package filesink

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/internal/gate"
	"github.com/gttsplit/gttsplit/pkg/sinks/internal/safefs"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/present"
	"github.com/rs/zerolog"
)

const typeName = "file"

// Config is the sinks.file.* keys. The sink is on when Dir is set: the
// zero Config (the default) is off.
type Config struct {
	// Dir is the directory reports are written under; it is created if
	// missing.
	Dir string `mapstructure:"dir" flag:"file-dir" desc:"directory for one Markdown report per run; empty disables the file sink"`
}

// Enabled reports whether c switches the sink on.
func (c Config) Enabled() bool { return c.Dir != "" }

// New opens the file sink on cfg.Dir, which must be set (Enabled).
func New(cfg Config, set sinks.Settings) (*Sink, error) {
	if !cfg.Enabled() {
		return nil, errors.New("dir: must not be empty")
	}
	root, err := safefs.OpenRoot(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s := &Sink{
		root: root,
		log:  set.Logger.With().Str("component", "sink").Str("sink", typeName).Logger(),
	}
	s.gate = gate.New(root.Close)
	return s, nil
}

// Sink is the file sink.
type Sink struct {
	root *os.Root
	log  zerolog.Logger
	gate *gate.Gate
}

// Interface guard.
var _ sinks.BatchWriter = (*Sink)(nil)

// Write renders r as Markdown and atomically replaces its run's file.
func (s *Sink) Write(ctx context.Context, r split.Report) error {
	if err := s.gate.Enter(); err != nil {
		return err
	}
	defer s.gate.Exit()
	if err := ctx.Err(); err != nil {
		return err
	}
	name := safefs.RunPath(r.Run.Host, r.Run.Lane, r.Run.ID, ".md")
	if err := safefs.WriteAtomic(s.root, name, []byte(present.Markdown(r))); err != nil {
		return fmt.Errorf("run %q: %w", r.Run.ID, err)
	}
	s.log.Debug().Str("run_id", r.Run.ID).Str("path", name).Msg("report written")
	return nil
}

// WriteBatch renders every report as Markdown and atomically replaces
// their runs' files with one sync of the file system for the contents and
// one for the renames (sinks.BatchWriter).
func (s *Sink) WriteBatch(ctx context.Context, rs []split.Report, keep func(split.Report) bool) ([]bool, error) {
	if err := s.gate.Enter(); err != nil {
		return nil, err
	}
	defer s.gate.Exit()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	files := make([]safefs.File, len(rs))
	for i, r := range rs {
		files[i] = safefs.File{Name: safefs.RunPath(r.Run.Host, r.Run.Lane, r.Run.ID, ".md"), Data: []byte(present.Markdown(r))}
	}
	b, err := safefs.Stage(s.root, files)
	if err != nil {
		return nil, fmt.Errorf("%d reports: %w", len(rs), err)
	}
	kept := sinks.Kept(rs, keep)
	if err := b.Commit(kept); err != nil {
		return nil, fmt.Errorf("%d reports: %w", len(rs), err)
	}
	s.log.Debug().Int("reports", len(rs)).Msg("reports written")
	return kept, nil
}

// Close waits for writes in flight (bounded by ctx) and closes the
// directory. It is idempotent.
func (s *Sink) Close(ctx context.Context) error { return s.gate.Close(ctx) }
