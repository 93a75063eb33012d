package collector

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/pkg/redact"
	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/sources/fdinfo"
	"github.com/gttsplit/gttsplit/pkg/sources/logtail"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// Attach is `collector attach --pid PID [--log FILE]`: it samples a running
// process (a llama-server) and follows its log file until the process
// exits or a signal stops the collector.
//
// A restarted collector resumes the same run: the run id is derived from
// the process (pid and start time) unless --run-id names one, the log's read
// position is checkpointed only after the broker acknowledged what was read,
// and samples are numbered by their time, so nothing is lost or counted
// twice.
func Attach(ctx context.Context, cfg config.Collector, io IO, log zerolog.Logger) error {
	pid := cfg.Attach.PID
	if pid <= 0 {
		return cli.Usage(errors.New("attach needs --pid PID (attach.pid)"))
	}
	procRoot := cfg.Sample.ProcRoot
	start, err := procStartTime(procRoot, pid)
	if err != nil {
		return cli.Usage(fmt.Errorf("attach: no process %d: %w", pid, err))
	}
	host := cfg.Host
	if host == "" {
		host, _ = os.Hostname()
	}
	runID := cfg.RunID
	if runID == "" {
		runID = fmt.Sprintf("%s-pid%d-%d", tokenSafe(host), pid, start)
	}
	stateDir := cfg.Attach.StateDir
	if stateDir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		stateDir = filepath.Join(cache, "gttsplit", "attach")
	}
	s, err := newSession(ctx, cfg, runID, true, log)
	if err != nil {
		return err
	}
	// What this run sent, over every attach of it: the run-finished
	// event announces it.
	if s.pipe.sent, err = openSentLog(filepath.Join(stateDir, sentLogName(runID))); err != nil {
		s.log.Warn().Err(err).Msg("what an earlier attach of this run sent is not known")
	}
	s.provenance(ctx)
	s.started() // the process runs already
	red, err := cfg.Wrap.Redactor()
	if err != nil {
		_, _ = s.close(ctx)
		return cli.Usage(fmt.Errorf("wrap.redact_flags: %w", err))
	}
	s.info.Command = readCmdline(procRoot, pid, red)
	s.info.Started = time.Now()
	// Without --log the split has the process's samples only: it says so
	// (no_log) instead of blaming a log it never had.
	s.info.NoLog = cfg.Attach.Log == ""
	s.pipe.detail.PID = pid

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go forward(ctx, io, false, func(os.Signal) { stop() })

	if err := s.pipe.emit(ctx, sources.Record{Started: &s.info}); err != nil {
		sctx, cancel := s.shutdownCtx(ctx)
		defer cancel()
		_, _ = s.close(sctx)
		if ctx.Err() != nil {
			return nil // stopped by a signal before anything was attached
		}
		return err
	}
	set := sources.Settings{Logger: s.log, Batch: cfg.Batch}
	trigger := &sampleTrigger{}
	sampler, err := fdinfo.New(cfg.Sample, fdinfo.Process{PID: pid}, set)
	if err != nil {
		_, _ = s.close(ctx)
		return err
	}
	trigger.src.Store(sampler)
	s.pipe.sampling = samplingOf(sampler)
	done := make(chan struct{}) // closed when the process exited
	d := &detacher{sourcesDone: make(chan struct{})}
	// Samples are numbered by their time: a restarted collector's samples
	// do not collide with the first one's.
	sampleEmit := func(ctx context.Context, r sources.Record) error {
		if r.Sample != nil {
			r.Sample.Seq = uint64(r.Sample.Time.UnixNano())
		}
		return s.pipe.emit(ctx, r)
	}
	srcs := []sources.Source{sourceFunc(func(ctx context.Context, _ sources.Emit) error {
		err := sampler.Run(ctx, sampleEmit)
		if errors.Is(err, fdinfo.ErrNoProcess) {
			err = nil
		}
		switch {
		case err != nil:
			stop() // a failed sampler detaches
		case ctx.Err() == nil:
			close(done) // the process exited: the run is finished
		}
		return err
	})}
	watch := newLlamaWatch()
	if cfg.Attach.Log == "" {
		s.log.Warn().Int("pid", pid).Msg("no --log: the split has this process's fdinfo samples only (no_log); give --log FILE (its -v log) for the rows")
	} else {
		lc := logtail.DefaultConfig()
		lc.Path, lc.StateDir, lc.RunID, lc.Done = cfg.Attach.Log, stateDir, runID, done
		tail, err := logtail.New(lc, set)
		if err != nil {
			_, _ = s.close(ctx)
			return cli.Usage(err)
		}
		srcs = append(srcs, sourceFunc(func(ctx context.Context, _ sources.Emit) error {
			emit := d.logEmit(s.pipe.emit)
			return tail.Run(ctx, func(ctx context.Context, r sources.Record) error {
				// A followed file's lines come in batches: each memory-
				// relevant one still asks for a sample when it arrives.
				for _, l := range r.Lines {
					b := []byte(l.Text)
					trigger.line(b)
					watch.line(b)
				}
				return emit(ctx, r)
			})
		}))
	}
	s.log.Info().Int("pid", pid).Str("log", cfg.Attach.Log).Msg("attached")
	srcCtx, stopSources := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSources()
	go d.run(ctx, s, stopSources)
	runErr := runSources(srcCtx, s.pipe.emit, srcs...)
	close(d.sourcesDone)

	sctx, cancel := s.shutdownCtx(ctx)
	defer cancel()
	select {
	case <-done:
		// The process exited: the run is finished.
		if cfg.Attach.Log != "" {
			watch.warnIfNone(s.log, s.info.Command, "the log "+cfg.Attach.Log)
		}
		fi := &split.FinishInfo{Finished: time.Now()}
		if s.pipe.pub != nil {
			_ = s.pipe.pub.Flush(sctx)
			fi.DroppedEvents = s.pipe.pub.DroppedOf(s.origin.RunID)
		}
		if err := s.pipe.emit(sctx, sources.Record{Finished: fi}); err != nil {
			s.log.Error().Err(err).Msg("run-finished not published")
		} else {
			s.pipe.sent.remove()
		}
		s.log.Info().Msg("the attached process exited")
	default:
		// Stopped by a signal: the process goes on; a restarted collector
		// resumes this run.
		s.log.Info().Msg("detached; run the same attach again to resume this run")
	}
	_, closeErr := s.close(sctx)
	return errors.Join(runErr, closeErr)
}

// detacher stops attach's sources when the collector detaches (ctx ends
// before the process exited), but only once what they emitted is durable.
// The log follower saves its read position when the broker acknowledged a
// record, and only while it runs: a record acknowledged after it stopped is
// read again by the next attach (as a batch of other bounds, so it gets its
// own id and the fold drops the lines it already has). Draining first keeps
// that re-read, and the duplicate traffic, small.
type detacher struct {
	// mu is held for reading while a log record is handed over: it is
	// taken before the pipeline's mu and the publisher's locks.
	mu          sync.RWMutex
	detaching   bool
	sourcesDone chan struct{} // closed when the sources returned
}

// logEmit wraps the log follower's emit: once detaching, records are held
// back (the next attach reads them again) until the sources stop.
func (d *detacher) logEmit(emit sources.Emit) sources.Emit {
	return func(ctx context.Context, r sources.Record) error {
		d.mu.RLock()
		if !d.detaching {
			defer d.mu.RUnlock()
			return emit(ctx, r)
		}
		d.mu.RUnlock()
		<-ctx.Done()
		return ctx.Err()
	}
}

// run waits for ctx to end; then it holds new log records back, waits until
// the publisher has every event handed to it acknowledged or spooled, all
// within the shutdown timeout, and stops the sources.
func (d *detacher) run(ctx context.Context, s *session, stopSources context.CancelFunc) {
	select {
	case <-d.sourcesDone:
		return
	case <-ctx.Done():
	}
	defer stopSources()
	sctx, cancel := s.shutdownCtx(ctx)
	defer cancel()
	held := make(chan struct{})
	go func() {
		d.mu.Lock() // a record being handed over goes first
		d.detaching = true
		d.mu.Unlock()
		close(held)
	}()
	select {
	case <-held:
	case <-sctx.Done():
		return
	}
	s.log.Debug().Msg("detaching: new log records are left to the next attach; waiting for the broker to acknowledge what was sent")
	if s.pipe.pub != nil {
		if err := s.pipe.pub.Flush(sctx); err != nil {
			s.log.Warn().Err(err).Msg("detaching before the broker acknowledged every event; the next attach sends them again")
		}
	}
}

type sourceFunc func(ctx context.Context, emit sources.Emit) error

func (f sourceFunc) Run(ctx context.Context, emit sources.Emit) error { return f(ctx, emit) }

// procStartTime reads field 22 of /proc/<pid>/stat (start time in clock
// ticks since boot): with the pid it names one process instance.
func procStartTime(procRoot string, pid int) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("malformed stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

func readCmdline(procRoot string, pid int, red *redact.Redactor) string {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return ""
	}
	argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	return strings.TrimSpace(strings.Join(red.Args(argv), " "))
}

// sentLogName is the file, in the attach state directory, that keeps what
// the attaches of a run sent.
func sentLogName(runID string) string {
	h := sha256.Sum256([]byte(runID))
	return "sent-" + hex.EncodeToString(h[:8]) + ".json"
}
