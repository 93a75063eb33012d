// Package jsonsink writes each run's split as a JSON document,
// DIR/<host>/<lane>/<run>.json (replaced atomically on every write), and
// appends it as one line to DIR/splits.jsonl.
//
// Path components are made safe as in filesink; a host named like the
// splits.jsonl file gets a hashed name.
//
// # splits.jsonl
//
// Each line is one split, the compact form of the JSON document, written
// with a single write on a file opened with O_APPEND and then fsynced, so
// concurrent writers (goroutines, or several processes sharing DIR) never
// interleave inside a line. A write whose line is identical to the last line
// appended for the same run is not appended again; the index of last lines
// (host, lane and run id → SHA-256 of the line) is rebuilt from the file
// when the sink opens. A line left unterminated by a crash is closed with a
// newline before the next append, so it cannot corrupt the next line.
package jsonsink

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/internal/gate"
	"github.com/gttsplit/gttsplit/pkg/sinks/internal/safefs"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/rs/zerolog"
)

const (
	typeName  = "json"
	linesFile = safefs.LinesFile
)

// LinesFile is the name of the append-only file of every split under the
// sink's directory.
const LinesFile = linesFile

// Config is the sinks.json.* keys. The sink is on when Dir is set: the
// zero Config (the default) is off.
type Config struct {
	// Dir is the directory documents and splits.jsonl are written under;
	// it is created if missing.
	Dir string `mapstructure:"dir" flag:"json-dir" desc:"directory for one JSON report per run and splits.jsonl; empty disables the JSON sink"`
}

// Enabled reports whether c switches the sink on.
func (c Config) Enabled() bool { return c.Dir != "" }

// New opens the JSON sink on cfg.Dir, which must be set (Enabled), and
// rebuilds its index from splits.jsonl.
func New(cfg Config, set sinks.Settings) (*Sink, error) {
	if !cfg.Enabled() {
		return nil, errors.New("dir: must not be empty")
	}
	root, err := safefs.OpenRoot(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s := &Sink{
		root:  root,
		log:   set.Logger.With().Str("component", "sink").Str("sink", typeName).Logger(),
		index: make(map[runKey][sha256.Size]byte),
	}
	if err := s.load(); err != nil {
		_ = root.Close()
		return nil, fmt.Errorf("directory %q: %w", cfg.Dir, err)
	}
	f, err := root.OpenFile(linesFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		_ = root.Close()
		return nil, fmt.Errorf("cannot open %q for appending: %w", filepath.Join(cfg.Dir, linesFile), pathCause(err))
	}
	s.lines = f
	s.gate = gate.New(s.release)
	return s, nil
}

// Sink is the JSON sink.
type Sink struct {
	root *os.Root
	log  zerolog.Logger
	gate *gate.Gate

	mu    sync.Mutex // serialises appends and guards index and torn
	lines *os.File   // splits.jsonl, O_APPEND
	index map[runKey][sha256.Size]byte
	torn  bool // the file may end inside a line
}

// Interface guard.
var _ sinks.BatchWriter = (*Sink)(nil)

type runKey struct{ host, lane, id string }

// lineRun is the part of a line the index needs.
type lineRun struct {
	Run struct {
		ID   string `json:"id"`
		Host string `json:"host"`
		Lane string `json:"lane"`
	} `json:"run"`
}

// load rebuilds the index from an existing splits.jsonl.
func (s *Sink) load() error {
	f, err := s.root.Open(linesFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", linesFile, err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	lines, skipped := 0, 0
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] != '\n' {
			s.torn = true // unterminated tail: not a complete line
			skipped++
		} else if len(line) > 0 {
			var lr lineRun
			if jerr := json.Unmarshal(line, &lr); jerr != nil {
				skipped++
			} else {
				lines++
				s.index[runKey{lr.Run.Host, lr.Run.Lane, lr.Run.ID}] = sha256.Sum256(line)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", linesFile, err)
		}
	}
	ev := s.log.Debug()
	if skipped > 0 {
		ev = s.log.Warn()
	}
	ev.Int("lines", lines).Int("skipped", skipped).Msg("splits index rebuilt")
	return nil
}

func (s *Sink) release() error {
	var errs []error
	if err := s.lines.Sync(); err != nil {
		errs = append(errs, fmt.Errorf("json sink: sync %s: %w", linesFile, err))
	}
	if err := s.lines.Close(); err != nil {
		errs = append(errs, fmt.Errorf("json sink: close %s: %w", linesFile, err))
	}
	if err := s.root.Close(); err != nil {
		errs = append(errs, fmt.Errorf("json sink: close directory: %w", err))
	}
	return errors.Join(errs...)
}

// Write replaces the run's JSON document and appends its line to
// splits.jsonl unless that exact line is already the run's last one.
func (s *Sink) Write(ctx context.Context, r split.Report) error {
	if err := s.gate.Enter(); err != nil {
		return err
	}
	defer s.gate.Exit()
	if err := ctx.Err(); err != nil {
		return err
	}
	doc, err := split.JSON(r)
	if err != nil {
		return sinks.Permanent(fmt.Errorf("json sink: render run %q: %w", r.Run.ID, err))
	}
	name := safefs.RunPath(r.Run.Host, r.Run.Lane, r.Run.ID, ".json")
	if err := safefs.WriteAtomic(s.root, name, doc); err != nil {
		return fmt.Errorf("json sink: run %q: %w", r.Run.ID, err)
	}
	var line bytes.Buffer
	if err := json.Compact(&line, doc); err != nil {
		return sinks.Permanent(fmt.Errorf("json sink: compact run %q: %w", r.Run.ID, err))
	}
	line.WriteByte('\n')
	if err := s.append(ctx, runKey{r.Run.Host, r.Run.Lane, r.Run.ID}, line.Bytes()); err != nil {
		return fmt.Errorf("json sink: run %q: %w", r.Run.ID, err)
	}
	s.log.Debug().Str("run_id", r.Run.ID).Str("path", name).Msg("report written")
	return nil
}

// WriteBatch writes every report as Write does, with one commit for them
// all (sinks.BatchWriter): the documents' contents are synced together,
// then, for the reports keep takes, the documents are renamed into place
// and their lines appended to splits.jsonl in one write, and one more sync
// makes both durable.
func (s *Sink) WriteBatch(ctx context.Context, rs []split.Report, keep func(split.Report) bool) ([]bool, error) {
	if err := s.gate.Enter(); err != nil {
		return nil, err
	}
	defer s.gate.Exit()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	files := make([]safefs.File, len(rs))
	lines := make([][]byte, len(rs))
	for i, r := range rs {
		doc, err := split.JSON(r)
		if err != nil {
			return nil, sinks.Permanent(fmt.Errorf("json sink: render run %q: %w", r.Run.ID, err))
		}
		var line bytes.Buffer
		if err := json.Compact(&line, doc); err != nil {
			return nil, sinks.Permanent(fmt.Errorf("json sink: compact run %q: %w", r.Run.ID, err))
		}
		line.WriteByte('\n')
		files[i] = safefs.File{Name: safefs.RunPath(r.Run.Host, r.Run.Lane, r.Run.ID, ".json"), Data: doc}
		lines[i] = line.Bytes()
	}
	b, err := safefs.Stage(s.root, files)
	if err != nil {
		return nil, fmt.Errorf("json sink: %d reports: %w", len(rs), err)
	}
	kept := sinks.Kept(rs, keep)
	// The lines first: the renames' sync makes them durable too (a crash
	// before it leaves at most lines of splits whose documents are the
	// old ones, which a retry writes again, byte for byte).
	s.mu.Lock()
	var out bytes.Buffer
	if s.torn {
		out.WriteByte('\n')
	}
	sums := make([][sha256.Size]byte, len(rs))
	appended := map[runKey][sha256.Size]byte{}
	for i, r := range rs {
		if !kept[i] {
			continue
		}
		k := runKey{r.Run.Host, r.Run.Lane, r.Run.ID}
		sums[i] = sha256.Sum256(lines[i])
		last, ok := appended[k]
		if !ok {
			last, ok = s.index[k]
		}
		if ok && last == sums[i] {
			continue
		}
		out.Write(lines[i])
		appended[k] = sums[i]
	}
	if out.Len() > 0 && !(out.Len() == 1 && s.torn) {
		n, err := s.lines.Write(out.Bytes())
		if err != nil {
			if n > 0 {
				s.torn = true
			}
			s.mu.Unlock()
			b.Abort()
			return nil, fmt.Errorf("json sink: append to %s: %w", linesFile, err)
		}
		s.torn = false
	}
	s.mu.Unlock()
	if err := b.Commit(kept); err != nil {
		return nil, fmt.Errorf("json sink: %d reports: %w", len(rs), err)
	}
	// Durable now: indexed.
	s.mu.Lock()
	for k, sum := range appended {
		s.index[k] = sum
	}
	s.mu.Unlock()
	s.log.Debug().Int("reports", len(rs)).Msg("reports written")
	return kept, nil
}

// append writes line (ending in '\n') to splits.jsonl in one write call.
func (s *Sink) append(ctx context.Context, k runKey, line []byte) error {
	sum := sha256.Sum256(line)
	s.mu.Lock()
	defer s.mu.Unlock()
	if last, ok := s.index[k]; ok && last == sum {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	data := line
	if s.torn {
		data = append([]byte{'\n'}, line...)
	}
	n, err := s.lines.Write(data)
	if err != nil {
		if n > 0 {
			s.torn = true
		}
		return fmt.Errorf("append to %s: %w", linesFile, err)
	}
	s.torn = false
	if err := s.lines.Sync(); err != nil {
		// Not indexed: a retry appends the line again rather than risk
		// losing it.
		return fmt.Errorf("sync %s: %w", linesFile, err)
	}
	s.index[k] = sum
	return nil
}

// Close waits for writes in flight (bounded by ctx), then syncs and closes
// splits.jsonl and the directory. It is idempotent.
func (s *Sink) Close(ctx context.Context) error { return s.gate.Close(ctx) }

// pathCause drops the operation and path of a *fs.PathError (the message
// that wraps it names the file).
func pathCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
