package collector

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
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
// twice. When the process exited while no collector watched it, attach
// finishes its unfinished runs that the state dir records (finishGoneRuns)
// instead.
func Attach(ctx context.Context, cfg config.Collector, io IO, log zerolog.Logger) error {
	pid := cfg.Attach.PID
	if pid <= 0 {
		return cli.Usage(errors.New("attach needs --pid PID (attach.pid)"))
	}
	procRoot := cfg.Sample.ProcRoot
	host := cfg.Host
	if host == "" {
		host, _ = os.Hostname()
	}
	stateDir := attachStateDir(cfg)
	start, err := procStartTime(procRoot, pid)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return cli.Usage(fmt.Errorf("attach: no process %d: %w", pid, err))
	}
	if err != nil {
		// The process exited while no collector watched it: its runs
		// that no attach finished are finished now.
		gone := goneRuns(stateDir, host, pid, 0, "", cfg.RunID)
		if len(gone) == 0 {
			what := "no unfinished run of pid " + strconv.Itoa(pid)
			if cfg.RunID != "" {
				what = fmt.Sprintf("no unfinished run %s of pid %d", cfg.RunID, pid)
			}
			return cli.Usage(fmt.Errorf("attach: no process %d (%w), and %s on host %s in the state dir %s", pid, err, what, host, stateDir))
		}
		_, err := finishGoneRuns(ctx, cfg, io, log, stateDir, gone)
		return err
	}
	runID := cfg.RunID
	if runID == "" {
		runID = fmt.Sprintf("%s-pid%d-%d", tokenSafe(host), pid, start)
	}
	// The pid was reused: a run of the earlier process of this pid that
	// no attach finished is finished first. Its process is gone for sure
	// (a pid and a start time name one process), so nothing else can
	// write to it but an attach finishing it at this very moment; the
	// two then send the same events (the same ids: the broker and the
	// fold keep one). It costs a look at the state dir's sent logs.
	if gone := goneRuns(stateDir, host, pid, start, runID, ""); len(gone) > 0 {
		stopped, err := finishGoneRuns(ctx, cfg, io, log, stateDir, gone)
		if err != nil {
			log.Error().Err(err).Int("pid", pid).Msg("an earlier process's run of this pid was not finished")
		}
		if stopped {
			return nil // by a signal, before this process was attached
		}
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
	logAbs := ""
	if cfg.Attach.Log != "" {
		logAbs, _ = filepath.Abs(cfg.Attach.Log)
	}
	if err := s.pipe.sent.identify(attachedRun{RunID: runID, Host: host, PID: pid, StartTicks: start, Log: logAbs}); err != nil {
		s.log.Warn().Err(err).Msg("could not save whose run the sent log counts; should this process exit while no collector watches it, a restarted attach will not find this run")
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
		tail, err := newLogTail(cfg.Attach.Log, stateDir, runID, done, false, set)
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
		s.finishAttached(sctx, time.Now())
		s.log.Info().Msg("the attached process exited")
	default:
		// Stopped by a signal: the process goes on; a restarted collector
		// resumes this run.
		s.log.Info().Msg("detached; run the same attach again to resume this run")
	}
	_, closeErr := s.close(sctx)
	return errors.Join(runErr, closeErr)
}

// attachStateDir is attach.state_dir, by default under the user's cache
// directory.
func attachStateDir(cfg config.Collector) string {
	if cfg.Attach.StateDir != "" {
		return cfg.Attach.StateDir
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return filepath.Join(cache, "gttsplit", "attach")
}

// newLogTail is the follower of an attached run's log: its read position
// is kept in stateDir under the run id; when done closes (the process
// exited) it reads the log to its end, a last line without newline too.
// gone: the process exited before this attach, so only the file it wrote
// is read (logtail's OnlyCheckpointedFile), not a file another process
// put at the path since.
func newLogTail(path, stateDir, runID string, done <-chan struct{}, gone bool, set sources.Settings) (sources.Source, error) {
	lc := logtail.DefaultConfig()
	lc.Path, lc.StateDir, lc.RunID, lc.Done = path, stateDir, runID, done
	lc.OnlyCheckpointedFile = gone
	return logtail.New(lc, set)
}

// finishAttached ends an attached run whose process exited, once the
// log follower read the log to its end: it publishes the run-finished
// event after everything before it (with what the publisher dropped of
// the run) and, once it is out, removes the run's sent log. An attach
// never knows the exit code.
func (s *session) finishAttached(ctx context.Context, finished time.Time) {
	fi := &split.FinishInfo{Finished: finished}
	if s.pipe.pub != nil {
		_ = s.pipe.pub.Flush(ctx)
		fi.DroppedEvents = s.pipe.pub.DroppedOf(s.origin.RunID)
	}
	if err := s.pipe.emit(ctx, sources.Record{Finished: fi}); err != nil {
		s.log.Error().Err(err).Msg("run-finished not published")
	} else {
		s.pipe.sent.remove()
	}
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
