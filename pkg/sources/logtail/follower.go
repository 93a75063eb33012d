package logtail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/rs/zerolog"
)

// Interface guard.
var _ sources.Source = (*follower)(nil)

// follower is the logtail source. Run may be called again after it
// returned (not concurrently); each call starts from the checkpoint.
type follower struct {
	cfg       Config
	batch     sources.BatchConfig
	log       zerolog.Logger
	absPath   string
	statePath string // "" when checkpointing is off
}

func newFollower(c Config, set sources.Settings) *follower {
	abs, err := filepath.Abs(c.Path)
	if err != nil {
		abs = filepath.Clean(c.Path)
	}
	fl := &follower{
		cfg:     c,
		batch:   set.Batch.OrDefault(),
		absPath: abs,
		log:     set.Logger.With().Str("component", component).Str("path", c.Path).Logger(),
	}
	if c.StateDir != "" {
		fl.statePath = filepath.Join(c.StateDir, stateFileName(c.RunID, abs))
	}
	return fl
}

// inflight is an emitted record waiting for its Ack.
type inflight struct {
	end   checkpoint
	acked atomic.Bool
}

// tail is the state of one Run call; only Run's goroutine touches it,
// except inflight.acked and ackCh, which Ack closures use.
type tail struct {
	cfg      Config
	batchCfg sources.BatchConfig
	log      zerolog.Logger
	path     string
	emit     sources.Emit
	now      func() time.Time

	// The file being read.
	f        *os.File
	fi       os.FileInfo // f's stat when opened
	dev, ino uint64
	name     string // the name f was opened under
	off      int64  // bytes of f consumed (complete lines plus pending)
	lineOff  int64  // end of the last complete line taken from f
	head     []byte // f's first bytes, up to headBytes
	pending  []byte // a partial line: the bytes from lineOff to off
	lastSize int64
	lastMod  time.Time
	buf      []byte

	nextSeq uint64

	batch      []split.Line
	batchStart time.Time

	inflight  []*inflight
	ackCh     chan struct{}
	acked     *checkpoint // end of the acknowledged prefix
	persisted *checkpoint // what the state file holds
	statePath string
	cpBase    checkpoint // Path, RunID, Version of every checkpoint

	nulBytes, cutLines uint64

	// onlyThis: only the checkpointed file, cpDev and cpIno, is read
	// (Config.OnlyCheckpointedFile).
	onlyThis     bool
	cpDev, cpIno uint64
}

// Run follows the file until ctx is cancelled (returns nil) or Done closes
// (drains the file, then returns nil). Before returning it persists the
// position of everything acknowledged so far.
func (fl *follower) Run(ctx context.Context, emit sources.Emit) error {
	if fl.statePath != "" {
		if err := os.MkdirAll(fl.cfg.StateDir, 0o755); err != nil {
			return fmt.Errorf("create state dir: %w", err)
		}
	}
	t := &tail{
		cfg:       fl.cfg,
		batchCfg:  fl.batch,
		log:       fl.log,
		path:      fl.cfg.Path,
		emit:      emit,
		now:       time.Now,
		buf:       make([]byte, 64<<10),
		nextSeq:   fl.cfg.FirstSeq,
		ackCh:     make(chan struct{}, 1),
		statePath: fl.statePath,
		cpBase:    checkpoint{Version: checkpointVersion, Path: fl.absPath, RunID: fl.cfg.RunID},
	}
	defer t.closeFile()
	if err := t.resume(fl.absPath); err != nil {
		return err
	}
	err := t.loop(ctx)
	t.collectAcks()
	t.log.Info().Uint64("next_seq", t.nextSeq).Int("unacked_records", len(t.inflight)).
		Uint64("nul_bytes_dropped", t.nulBytes).Uint64("long_lines_cut", t.cutLines).
		AnErr("error", err).Msg("log follower stopped")
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// resume positions the tail from the checkpoint, if there is one.
func (t *tail) resume(absPath string) error {
	var cp *checkpoint
	if t.statePath != "" {
		c, err := loadCheckpoint(t.statePath, absPath, t.cfg.RunID)
		if err != nil {
			if !errors.Is(err, errBadState) {
				return err
			}
			t.log.Warn().Err(err).Msg("ignoring state file; reading the log from the start")
		}
		cp = c
	}
	if cp == nil {
		opened, err := t.openPath()
		if err != nil {
			return err
		}
		t.log.Info().Bool("file_exists", opened).Uint64("next_seq", t.nextSeq).Msg("log follower started")
		return nil
	}
	t.nextSeq = cp.NextSeq
	t.persisted = cp
	t.onlyThis, t.cpDev, t.cpIno = t.cfg.OnlyCheckpointedFile, cp.Dev, cp.Ino

	// The path still names the checkpointed file.
	if f, err := os.Open(t.path); err == nil {
		fi, err := f.Stat()
		if err == nil {
			if head, ok := cp.matches(f, fi, true); ok {
				t.setFile(f, fi, t.path, cp.Offset, head)
				t.log.Info().Int64("offset", cp.Offset).Uint64("next_seq", t.nextSeq).Msg("log follower resumed")
				return nil
			}
		}
		_ = f.Close()
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("open log %s: %w", t.path, err)
	}
	// It was rotated: finish it under its new name, then the loop moves on
	// to the path.
	if f, name, head := findRotated(t.path, cp); f != nil {
		fi, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return fmt.Errorf("stat %s: %w", name, err)
		}
		t.setFile(f, fi, name, cp.Offset, head)
		t.log.Info().Str("rotated_to", name).Int64("offset", cp.Offset).Uint64("next_seq", t.nextSeq).
			Msg("log follower resumed in rotated file")
		return nil
	}
	if t.onlyThis && !t.checkpointed(t.path) {
		t.log.Warn().Int64("checkpoint_offset", cp.Offset).Uint64("next_seq", t.nextSeq).
			Msg("checkpointed log file not found (deleted, or replaced by another writer's since): nothing more is read")
		return nil
	}
	opened, err := t.openPath()
	if err != nil {
		return err
	}
	t.log.Warn().Bool("file_exists", opened).Int64("checkpoint_offset", cp.Offset).Uint64("next_seq", t.nextSeq).
		Msg("checkpointed log file not found; reading the current file from the start")
	return nil
}

// checkpointed reports whether name is the checkpointed file (its device
// and inode).
func (t *tail) checkpointed(name string) bool {
	fi, err := os.Stat(name)
	if err != nil {
		return false
	}
	dev, ino := identity(fi)
	return dev == t.cpDev && ino == t.cpIno
}

// openPath opens the path at offset 0; a missing file is (false, nil).
func (t *tail) openPath() (bool, error) {
	f, err := os.Open(t.path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open log %s: %w", t.path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return false, fmt.Errorf("stat log %s: %w", t.path, err)
	}
	t.setFile(f, fi, t.path, 0, nil)
	return true, nil
}

func (t *tail) setFile(f *os.File, fi os.FileInfo, name string, off int64, head []byte) {
	t.f, t.fi, t.name = f, fi, name
	t.dev, t.ino = identity(fi)
	t.off, t.lineOff = off, off
	t.head = append([]byte(nil), head...)
	t.pending = t.pending[:0]
	t.lastSize, t.lastMod = fi.Size(), fi.ModTime()
}

func (t *tail) closeFile() {
	if t.f != nil {
		_ = t.f.Close()
		t.f = nil
	}
}

func (t *tail) loop(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.cfg.Done:
			return t.finish(ctx)
		case <-t.ackCh:
			t.collectAcks()
			continue
		case <-timer.C:
		}
		if err := t.poll(ctx); err != nil {
			return err
		}
		wait := t.cfg.PollInterval
		if len(t.batch) > 0 {
			due := t.batchStart.Add(t.batchCfg.MaxDelay).Sub(t.now())
			if due <= 0 {
				if err := t.flushBatch(ctx); err != nil {
					return err
				}
			} else if due < wait {
				wait = due
			}
		}
		t.collectAcks()
		timer.Reset(wait)
	}
}

// finish is the end of the input: read what is left, emit it, and wait a
// while for its acknowledgement.
func (t *tail) finish(ctx context.Context) error {
	if err := t.poll(ctx); err != nil {
		return err
	}
	if t.cfg.FlushPartialOnDone && len(t.pending) > 0 {
		if err := t.takeLine(ctx); err != nil {
			return err
		}
	}
	if err := t.flushBatch(ctx); err != nil {
		return err
	}
	t.collectAcks()
	if len(t.inflight) == 0 || t.cfg.AckWait == 0 {
		return nil
	}
	deadline := time.NewTimer(t.cfg.AckWait)
	defer deadline.Stop()
	for len(t.inflight) > 0 {
		select {
		case <-ctx.Done():
			return nil
		case <-deadline.C:
			return nil
		case <-t.ackCh:
			t.collectAcks()
		}
	}
	return nil
}

// poll reads what was appended, following truncation and rotation.
func (t *tail) poll(ctx context.Context) error {
	if t.f == nil && t.onlyThis {
		return nil // the checkpointed file is gone
	}
	if t.f == nil {
		opened, err := t.openPath()
		if err != nil || !opened {
			return err
		}
	}
	// What the path names now; looked at before draining so that writes to
	// the old file up to this moment are read.
	pst, perr := os.Stat(t.path)
	if err := t.checkTruncated(ctx); err != nil {
		return err
	}
	if err := t.drain(ctx); err != nil {
		return err
	}
	if perr != nil || os.SameFile(pst, t.fi) {
		return nil
	}
	// The path names another file: ours was renamed away (or deleted), and
	// it is read to its end.
	if err := t.flushPending(ctx); err != nil {
		return err
	}
	old := t.name
	t.closeFile()
	if t.onlyThis && !t.checkpointed(t.path) {
		t.log.Info().Str("old_file", old).Msg("log file rotated; the new file is not followed (only the checkpointed file is read)")
		return nil
	}
	opened, err := t.openPath()
	if err != nil || !opened {
		return err
	}
	t.log.Info().Str("old_file", old).Msg("log file rotated; following the new file")
	return t.drain(ctx)
}

// checkTruncated notices a file cut below our offset, or rewritten from the
// start, and continues it at offset 0.
func (t *tail) checkTruncated(ctx context.Context) error {
	fi, err := t.f.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", t.name, err)
	}
	size, mod := fi.Size(), fi.ModTime()
	truncated := size < t.off
	if !truncated && (size != t.lastSize || !mod.Equal(t.lastMod)) {
		truncated = !sameHead(t.f, t.head)
	}
	t.lastSize, t.lastMod = size, mod
	if !truncated {
		return nil
	}
	if err := t.flushPending(ctx); err != nil {
		return err
	}
	t.log.Info().Str("file", t.name).Int64("offset", t.off).Int64("size", size).
		Msg("log file truncated; reading it from the start")
	t.off, t.lineOff, t.head = 0, 0, t.head[:0]
	return nil
}

// drain reads the current file from off to its end.
func (t *tail) drain(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := t.f.ReadAt(t.buf, t.off)
		if n > 0 {
			if perr := t.process(ctx, t.buf[:n]); perr != nil {
				return perr
			}
		}
		if n == 0 || errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", t.name, err)
		}
	}
}

// process splits the bytes read at off into lines.
func (t *tail) process(ctx context.Context, chunk []byte) error {
	if t.off < headBytes && int64(len(t.head)) == t.off {
		n := min(int64(len(chunk)), headBytes-t.off)
		t.head = append(t.head, chunk[:n]...)
	}
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		seg := chunk
		if i >= 0 {
			seg = chunk[:i]
		}
		if room := t.cfg.MaxLineBytes - len(t.pending); len(seg) > room {
			t.pending = append(t.pending, seg[:room]...)
			t.off += int64(room)
			chunk = chunk[room:]
			t.cutLines++
			t.log.Debug().Int64("offset", t.off).Msg("long line cut")
			if err := t.takeLine(ctx); err != nil {
				return err
			}
			continue
		}
		t.pending = append(t.pending, seg...)
		if i < 0 {
			t.off += int64(len(seg))
			return nil
		}
		t.off += int64(i + 1)
		chunk = chunk[i+1:]
		if err := t.takeLine(ctx); err != nil {
			return err
		}
	}
	return nil
}

// flushPending takes a partial line as a line of its own: its file is done.
func (t *tail) flushPending(ctx context.Context) error {
	if len(t.pending) == 0 {
		return nil
	}
	return t.takeLine(ctx)
}

// takeLine turns pending into the next line. NUL bytes (the hole a
// non-appending writer leaves after a copytruncate) are dropped; a line that
// was nothing but NULs is skipped without a number.
func (t *tail) takeLine(ctx context.Context) error {
	raw := t.pending
	t.pending = t.pending[:0]
	t.lineOff = t.off
	text := raw
	if k := bytes.Count(raw, []byte{0}); k > 0 {
		t.nulBytes += uint64(k)
		text = bytes.ReplaceAll(raw, []byte{0}, nil)
		if len(text) == 0 {
			t.log.Debug().Int64("offset", t.off).Int("nul_bytes", k).Msg("skipped line of NUL bytes")
			return nil
		}
	}
	now := t.now()
	if len(t.batch) == 0 {
		t.batchStart = now
	}
	t.batch = append(t.batch, split.Line{Stream: t.cfg.Stream, Seq: t.nextSeq, Text: string(text), Time: now})
	t.nextSeq++
	if len(t.batch) >= t.batchCfg.MaxLines {
		return t.flushBatch(ctx)
	}
	return nil
}

// position is the checkpoint after the last line taken.
func (t *tail) position() checkpoint {
	cp := t.cpBase
	cp.Dev, cp.Ino = t.dev, t.ino
	cp.Offset = t.lineOff
	cp.NextSeq = t.nextSeq
	h := t.head[:min(int64(len(t.head)), t.lineOff)]
	cp.HeadLen = len(h)
	cp.HeadSHA256 = hashHead(h)
	return cp
}

// flushBatch emits the batch as one record whose Ack moves the checkpoint
// to the position after its last line.
func (t *tail) flushBatch(ctx context.Context) error {
	if len(t.batch) == 0 {
		return nil
	}
	rec := &inflight{end: t.position()}
	ackCh := t.ackCh
	r := sources.Record{
		Lines: t.batch,
		Ack: func() {
			if rec.acked.CompareAndSwap(false, true) {
				select {
				case ackCh <- struct{}{}:
				default:
				}
			}
		},
	}
	t.batch = nil
	if err := t.emit(ctx, r); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("emit lines: %w", err)
	}
	t.inflight = append(t.inflight, rec)
	return nil
}

// collectAcks moves past the longest acknowledged prefix of the emitted
// records and persists the position after it. A failed write is logged and
// retried at the next call.
func (t *tail) collectAcks() {
	k := 0
	for k < len(t.inflight) && t.inflight[k].acked.Load() {
		end := t.inflight[k].end
		t.acked = &end
		k++
	}
	t.inflight = t.inflight[k:]
	if t.statePath == "" || t.acked == nil || (t.persisted != nil && *t.persisted == *t.acked) {
		return
	}
	if err := saveCheckpoint(t.statePath, *t.acked); err != nil {
		t.log.Warn().Err(err).Msg("checkpoint not saved")
		return
	}
	t.persisted = t.acked
}
