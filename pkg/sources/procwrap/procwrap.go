package procwrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/gttsplit/gttsplit/pkg/conf"
	"github.com/gttsplit/gttsplit/pkg/redact"
	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// TraceEnv is the environment variable that makes HRX print its host-weight
// trace; Config.SetTraceEnv sets it to "1" unless it is already set.
const TraceEnv = "GGML_HRX_HOST_WEIGHT_TRACE"

// component names the source in its log lines.
const component = "procwrap"

// Exit statuses that ExitCode reports besides the child's own.
const (
	// ExitCannotRun is the status of a command that could not be started.
	ExitCannotRun = 127
	// exitSignalBase plus N is the status after death by signal N.
	exitSignalBase = 128
)

// Config is the wrap.* keys: how `collector run` starts its child.
type Config struct {
	// SetTraceEnv sets GGML_HRX_HOST_WEIGHT_TRACE=1 unless it is set.
	SetTraceEnv bool `mapstructure:"set_trace_env" desc:"set GGML_HRX_HOST_WEIGHT_TRACE=1 for the child unless it is set"`
	// AddVerbose appends "-v" unless a verbosity flag is present.
	AddVerbose bool `mapstructure:"add_verbose" desc:"append -v to the child's arguments unless a verbosity flag is there"`
	// KillGrace is how long a child has between SIGTERM (context
	// cancelled, or a SIGTERM or SIGINT forwarded with Signal) and
	// SIGKILL, and how long Run waits for its output pipes to close after
	// it exited (a grandchild may hold them).
	KillGrace time.Duration `mapstructure:"kill_grace" desc:"time the child gets after a forwarded signal before it is killed"`
	// RedactFlags names the flags whose values are masked in the command
	// line the Started record reports (see pkg/redact; the child gets its
	// argv unchanged).
	RedactFlags string `mapstructure:"redact_flags" desc:"regexp on the names of flags (without dashes) and of NAME=VALUE arguments whose values are masked in the recorded command (--name VALUE, --name=VALUE, name=VALUE); Authorization credentials (Bearer, Basic) and URL credentials are always masked"`
}

// DefaultConfig returns the defaults of the wrap.* keys.
func DefaultConfig() Config {
	return Config{
		SetTraceEnv: true,
		AddVerbose:  true,
		KillGrace:   10 * time.Second,
		RedactFlags: redact.DefaultFlagPattern,
	}
}

// Validate reports every problem of c at once (conf.FieldError, keys
// relative to wrap.*).
func (c Config) Validate() error {
	var p conf.Problems
	p.Positive("kill_grace", c.KillGrace)
	if _, err := c.Redactor(); err != nil {
		p.Add("redact_flags", "does not compile: %w", err)
	}
	return p.Err()
}

// Redactor returns the Redactor of RedactFlags.
func (c Config) Redactor() (*redact.Redactor, error) { return redact.New(c.RedactFlags) }

// Options are what the program decides about the child (no key does).
type Options struct {
	// Command is the program and its arguments; Command[0] is looked up in
	// $PATH when it has no slash.
	Command []string
	// Env holds KEY=VALUE pairs added to the child's environment.
	Env []string
	// BaseEnv is the environment the child inherits; nil means os.Environ().
	BaseEnv []string
	// Dir is the child's working directory; "" means the collector's.
	Dir string
	// Run is copied into the Started record; Command and Started are filled
	// in by the source.
	Run split.RunInfo

	// Stdin is the child's standard input; nil means os.Stdin.
	Stdin io.Reader
	// Stdout and Stderr receive the child's output unchanged; nil means
	// os.Stdout and os.Stderr. Each is written from its own goroutine, so
	// one writer given for both must be safe for concurrent use.
	Stdout io.Writer
	Stderr io.Writer
	// OnLine, when set, is called with every captured line as it is read,
	// before it waits for its batch (the collector's sampler uses it to
	// sample at once at a memory-relevant line). It must not block and
	// must not keep text.
	OnLine func(text []byte)

	// DrainTimeout bounds emitting the last lines and the Finished record
	// after the context was cancelled; 0 is 5s.
	DrainTimeout time.Duration
	// BufferBytes bounds the captured lines waiting for the downstream
	// (text plus a fixed overhead per line); lines beyond it are dropped.
	// 0 is 16 MiB.
	BufferBytes int
	// MaxLineBytes is the longest line captured in one piece; 0 is
	// sources.MaxLineBytes.
	MaxLineBytes int
}

// withDefaults sets the zero fields of o to what their docs say.
func (o Options) withDefaults() Options {
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Stdin == nil {
		o.Stdin = os.Stdin
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = 5 * time.Second
	}
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = sources.MaxLineBytes
	}
	if o.BufferBytes <= 0 {
		o.BufferBytes = 16 << 20
	}
	return o
}

// ErrCannotRun matches (errors.Is) the error of a command that could not be
// started.
var ErrCannotRun = errors.New("procwrap: cannot run command")

// ErrNotStarted is returned by Signal and WaitPID before the child started
// or when it could not be started.
var ErrNotStarted = errors.New("procwrap: child not started")

// ErrAlreadyRun is returned by a second call of Run.
var ErrAlreadyRun = errors.New("procwrap: run called twice")

// StartError is the error of a command that could not be started. Its
// message is `cannot run "NAME": REASON`.
type StartError struct {
	Name string
	Err  error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("cannot run %q: %v", e.Name, e.Err)
}

// Unwrap returns the reason.
func (e *StartError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCannotRun) true.
func (e *StartError) Is(target error) bool { return target == ErrCannotRun }

// Source runs one child process. Its methods are safe for concurrent use.
type Source struct {
	cfg   Config
	opt   Options
	batch sources.BatchConfig
	red   *redact.Redactor
	log   zerolog.Logger
	argv  []string
	env   []string

	runOnce  sync.Once
	pidReady chan struct{} // closed once the child started or failed to

	mu       sync.Mutex
	proc     *os.Process
	reaped   chan struct{} // closed once the child was waited for
	killer   *time.Timer   // armed by a forwarded SIGTERM or SIGINT
	startErr error
	exitCode int

	q *lineQueue
}

var _ sources.Source = (*Source)(nil)

// New builds a Source that runs opt.Command as cfg says, batching its
// lines as set.Batch says: it decides the final command line and
// environment but starts nothing.
func New(cfg Config, opt Options, set sources.Settings) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(opt.Command) == 0 || opt.Command[0] == "" {
		return nil, errors.New("command: must not be empty")
	}
	opt = opt.withDefaults()
	if opt.BufferBytes < opt.MaxLineBytes+lineOverhead {
		return nil, errors.New("buffer_bytes: must hold at least one line of max_line_bytes")
	}
	red, err := cfg.Redactor()
	if err != nil {
		return nil, err
	}
	batch := set.Batch.OrDefault()
	s := &Source{
		cfg:      cfg,
		opt:      opt,
		batch:    batch,
		red:      red,
		argv:     commandLine(opt.Command, cfg.AddVerbose),
		env:      environment(opt.BaseEnv, opt.Env, cfg.SetTraceEnv),
		pidReady: make(chan struct{}),
		exitCode: -1,
		q:        newLineQueueHook(opt.BufferBytes, batch.MaxLines, opt.OnLine),
	}
	s.log = set.Logger.With().Str("component", component).Str("command", opt.Command[0]).Logger()
	return s, nil
}

// Argv returns the command line that Run executes (with "-v" when it was
// appended).
func (s *Source) Argv() []string { return append([]string(nil), s.argv...) }

// Env returns the environment the child gets.
func (s *Source) Env() []string { return append([]string(nil), s.env...) }

// CommandLine returns Argv quoted for a POSIX shell, secrets masked as
// Config.RedactFlags says, as reported in the Started record and logged.
func (s *Source) CommandLine() string { return shellQuote(s.red.Args(s.argv)) }

// WaitPID blocks until the child started and returns its PID; it returns
// ErrNotStarted (or the start error) when the child could not be started,
// and ctx's error when ctx is done first.
func (s *Source) WaitPID(ctx context.Context) (int, error) {
	select {
	case <-s.pidReady:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.startErr != nil {
		return 0, errors.Join(ErrNotStarted, s.startErr)
	}
	return s.proc.Pid, nil
}

// PID returns the child's PID, or 0 before it started.
func (s *Source) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid
}

// Signal sends sig to the child. It returns ErrNotStarted before the child
// started and os.ErrProcessDone after it was reaped. After a SIGTERM or
// SIGINT the child has KillGrace to exit; then it is sent SIGKILL.
func (s *Source) Signal(sig os.Signal) error {
	s.mu.Lock()
	p, reaped := s.proc, s.reaped
	s.mu.Unlock()
	if p == nil {
		return ErrNotStarted
	}
	if err := p.Signal(sig); err != nil {
		return fmt.Errorf("signal child: %w", err)
	}
	if sig == syscall.SIGTERM || sig == syscall.SIGINT {
		s.armKill(p, reaped, sig)
	}
	return nil
}

// armKill sends SIGKILL to p when it is still running KillGrace after sig.
// The first terminating signal arms it; later ones do not move it.
func (s *Source) armKill(p *os.Process, reaped <-chan struct{}, sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.killer != nil {
		return
	}
	grace := s.cfg.KillGrace
	s.killer = time.AfterFunc(grace, func() {
		select {
		case <-reaped:
			return
		default:
		}
		s.log.Warn().Int("pid", p.Pid).Str("signal", sig.String()).Dur("kill_grace", grace).
			Msg("child still running after the forwarded signal and kill_grace; sending SIGKILL")
		if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			s.log.Warn().Err(err).Int("pid", p.Pid).Msg("SIGKILL failed")
		}
	})
}

// ExitCode returns the child's exit status once Run returned: its exit code,
// 128+N after death by signal N, 127 when it could not be started, and -1
// before that.
func (s *Source) ExitCode() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitCode
}

// Dropped returns how many lines could not be captured because the
// downstream was slower than the child (or had failed).
func (s *Source) Dropped() uint64 { return s.q.droppedLines() }

// Run starts the child and emits its records until it exited and its output
// is drained. See the package documentation.
func (s *Source) Run(ctx context.Context, emit sources.Emit) error {
	err := ErrAlreadyRun
	s.runOnce.Do(func() { err = s.run(ctx, emit) })
	return err
}

func (s *Source) run(ctx context.Context, emit sources.Emit) error {
	if err := ctx.Err(); err != nil {
		// Cancelled before the start: nothing ran, nothing to report.
		s.mu.Lock()
		s.startErr = err
		s.mu.Unlock()
		close(s.pidReady)
		return nil
	}
	cmd := exec.CommandContext(ctx, s.argv[0], s.argv[1:]...)
	cmd.Env = s.env
	cmd.Dir = s.opt.Dir
	cmd.Stdin = s.opt.Stdin
	stdout := &capture{q: s.q, stream: "stdout", out: s.opt.Stdout, max: s.opt.MaxLineBytes, log: s.log}
	stderr := &capture{q: s.q, stream: "stderr", out: s.opt.Stderr, max: s.opt.MaxLineBytes, log: s.log}
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = s.cfg.KillGrace

	started := time.Now()
	if err := cmd.Start(); err != nil {
		serr := &StartError{Name: s.argv[0], Err: startReason(err)}
		s.mu.Lock()
		s.startErr = serr
		s.exitCode = ExitCannotRun
		s.mu.Unlock()
		close(s.pidReady)
		return serr
	}
	reaped := make(chan struct{})
	s.mu.Lock()
	s.proc = cmd.Process
	s.reaped = reaped
	s.mu.Unlock()
	close(s.pidReady)
	log := s.log.With().Int("pid", cmd.Process.Pid).Logger()
	log.Info().Str("command_line", s.CommandLine()).Msg("child started")

	waitDone := make(chan struct{})
	var waitErr error
	go func() {
		defer close(waitDone)
		waitErr = cmd.Wait()
		close(reaped)
		s.mu.Lock()
		if s.killer != nil {
			s.killer.Stop()
		}
		s.mu.Unlock()
		s.q.mu.Lock()
		stdout.flushLocked()
		stderr.flushLocked()
		s.q.mu.Unlock()
		s.q.close()
	}()

	info := s.opt.Run
	info.Command = s.CommandLine()
	info.Started = started
	p := &pump{q: s.q, emit: emit, batchLines: s.batch.MaxLines, batchDelay: s.batch.MaxDelay}
	p.pending = append(p.pending, sources.Record{Started: &info})

	err := p.run(ctx)
	if err != nil && ctx.Err() == nil {
		// The downstream refused a record: stop capturing, let the child run.
		s.q.refuse(p.pendingLines())
		<-waitDone
		s.finish(cmd.ProcessState)
		log.Error().Err(err).Int("exit_code", s.ExitCode()).Msg("child exited, records lost")
		return fmt.Errorf("emit: %w", err)
	}
	<-waitDone
	fin := s.finish(cmd.ProcessState)
	if waitErr != nil && errors.Is(waitErr, exec.ErrWaitDelay) {
		log.Warn().Dur("kill_grace", s.cfg.KillGrace).Msg("output still open after the child exited; closed it")
	}

	dctx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.opt.DrainTimeout)
		defer cancel()
	}
	if err != nil { // ctx was cancelled while lines were pending
		if err := p.run(dctx); err != nil {
			return fmt.Errorf("emit: %w", err)
		}
	}
	p.pending = append(p.pending, sources.Record{Finished: fin})
	if err := p.run(dctx); err != nil {
		return fmt.Errorf("emit: %w", err)
	}
	level := zerolog.InfoLevel
	if s.Dropped() > 0 {
		level = zerolog.WarnLevel
	}
	log.WithLevel(level).Int("exit_code", s.ExitCode()).Uint64("lines", s.q.lastSeq()).
		Uint64("dropped_lines", s.Dropped()).Msg("child finished")
	return nil
}

// finish records the exit status and returns the Finished record.
func (s *Source) finish(st *os.ProcessState) *split.FinishInfo {
	fin := &split.FinishInfo{Finished: time.Now()}
	code := -1
	if st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = exitSignalBase + int(ws.Signal())
			fin.Signal = unix.SignalName(ws.Signal())
			if fin.Signal == "" {
				fin.Signal = fmt.Sprintf("signal %d", int(ws.Signal()))
			}
		} else {
			code = st.ExitCode()
			c := code
			fin.ExitCode = &c
		}
	}
	s.mu.Lock()
	s.exitCode = code
	s.mu.Unlock()
	return fin
}

// startReason strips exec's wrapping so that StartError reads
// `cannot run "foo": executable file not found in $PATH`.
func startReason(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
