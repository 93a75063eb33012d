package fdinfo

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gttsplit/gttsplit/pkg/conf"
	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/rs/zerolog"
)

// component names the source in its log lines.
const component = "fdinfo"

// Config is the sample.* keys: how often and where the sampler reads.
type Config struct {
	// Interval is the time between samples.
	Interval time.Duration `mapstructure:"interval" flag:"interval" desc:"time between two fdinfo samples"`
	// ProcRoot and SysRoot are where procfs and sysfs are mounted.
	ProcRoot string `mapstructure:"proc_root" flag:"proc-root" desc:"root of the proc file system"`
	SysRoot  string `mapstructure:"sys_root" desc:"root of the sys file system, read for the GPU cards' GTT totals"`
	// RescanInterval is the least time between two searches for the
	// process tree, the DRM fds and the cards.
	RescanInterval time.Duration `mapstructure:"rescan_interval" desc:"time between rescans for new processes and file descriptors"`
	// TriggerMinGap is the least time between two samples SampleNow
	// asked for: one asked sooner is taken TriggerMinGap after the last.
	TriggerMinGap time.Duration `mapstructure:"trigger_min_gap" desc:"least time between two samples taken at once at memory-relevant log lines (one asked sooner is taken at that gap); the ticks of sample.interval do not count"`
}

// DefaultConfig returns the defaults of the sample.* keys.
func DefaultConfig() Config {
	return Config{
		Interval:       100 * time.Millisecond,
		ProcRoot:       "/proc",
		SysRoot:        "/sys",
		RescanInterval: time.Second,
		TriggerMinGap:  5 * time.Millisecond,
	}
}

// Validate reports every problem of c at once (conf.FieldError, keys
// relative to sample.*).
func (c Config) Validate() error {
	var p conf.Problems
	p.Positive("interval", c.Interval)
	p.NotEmpty("proc_root", c.ProcRoot)
	p.NotEmpty("sys_root", c.SysRoot)
	p.Positive("rescan_interval", c.RescanInterval)
	if c.TriggerMinGap < 0 {
		p.Add("trigger_min_gap", "must not be negative")
	}
	return p.Err()
}

// Process is what a Source samples and when, besides its ticks; the
// program sets it (no key does).
type Process struct {
	// PID is the root of the sampled process tree.
	PID int
	// PIDFunc, when PID is 0, returns the root PID; it may block until the
	// process exists (procwrap's WaitPID).
	PIDFunc func(ctx context.Context) (int, error)
}

// alive reports whether pid is a process of this PID namespace (signal 0
// reaches it, or would but for permissions).
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// ErrNoProcess matches (errors.Is) the error of a root PID that does not
// name a live process when Run starts.
var ErrNoProcess = errors.New("fdinfo: no such process")

// Source samples one process tree.
type Source struct {
	cfg  Config
	proc Process
	log  zerolog.Logger
	// readlink is os.Readlink; tests replace it to make ordinary fds of a
	// real process look like DRM fds.
	readlink func(string) (string, error)

	// now guards the sampler between Run's goroutine and the callers of
	// SampleNow. It is taken before mu.
	now now

	mu    sync.Mutex
	stats Stats
}

// now is the state SampleNow shares with Run.
type now struct {
	sync.Mutex
	sm *sampler // nil while Run does not sample
	// taken: samples SampleNow took, emitted by Run in their order.
	taken []*split.Sample
	// lastAt: when the last sample started; lastAsked: when the last
	// sample SampleNow asked for started (TriggerMinGap counts from it).
	lastAt, lastAsked time.Time
	// asked: a sample SampleNow asked for waits for the gap (zero: none).
	asked time.Time
	gone  bool // a sample found the root process gone
	// wake tells Run that taken, asked or gone changed.
	wake chan struct{}
}

// Stats is the sampling a Source did: its interval, how many samples it
// emitted, how many of them a trigger asked for, and the largest time
// between two consecutive samples.
type Stats struct {
	Interval   time.Duration
	Samples    uint64
	Triggered  uint64
	LargestGap time.Duration
	last       time.Time
}

// Stats returns the sampling so far; it is safe to call while Run runs.
func (s *Source) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Interval = s.cfg.Interval
	return st
}

func (s *Source) count(t time.Time, triggered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Samples++
	if triggered {
		s.stats.Triggered++
	}
	if !s.stats.last.IsZero() {
		s.stats.LargestGap = max(s.stats.LargestGap, t.Sub(s.stats.last))
	}
	s.stats.last = t
}

var _ sources.Source = (*Source)(nil)

// SampleNow takes a sample at once, in the caller's goroutine, before it
// returns: the collector calls it on reading a memory-relevant log line,
// so a short peak the line announces is read while it is resident, not
// when the sampler's goroutine gets to run. Run emits it (in order with
// its ticks). A sample asked for less than Config.TriggerMinGap after the
// last one asked for is taken by Run at that gap instead; one that a
// sample started since the call already covers is not taken again. It
// does nothing while Run does not sample; it is safe for concurrent use.
func (s *Source) SampleNow() {
	called := time.Now()
	n := &s.now
	n.Lock()
	defer n.Unlock()
	if n.sm == nil || n.gone || n.lastAt.After(called) {
		return
	}
	t := time.Now()
	if t.Sub(n.lastAsked) < s.cfg.TriggerMinGap || len(n.taken) >= maxTaken {
		if n.asked.IsZero() {
			n.asked = called
			n.signal()
		}
		return
	}
	n.asked = time.Time{}
	s.takeLocked(t, true)
	n.signal()
}

// maxTaken bounds the samples SampleNow took that Run has not emitted yet
// (its emit is slow): beyond it, Run takes the next one.
const maxTaken = 64

// takeLocked takes a sample at t into taken; n's lock is held.
func (s *Source) takeLocked(t time.Time, asked bool) {
	n := &s.now
	smp := n.sm.sample(t)
	if smp == nil {
		n.gone = true
		return
	}
	n.lastAt = t
	if asked {
		n.lastAsked = t
	}
	s.count(t, asked)
	n.taken = append(n.taken, smp)
}

// signal wakes Run; n's lock is held.
func (n *now) signal() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// New builds a Source that samples proc as cfg says.
func New(cfg Config, proc Process, set sources.Settings) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if proc.PID < 0 || proc.PID == 0 && proc.PIDFunc == nil {
		return nil, errors.New("pid: must be a process id")
	}
	return &Source{
		cfg:      cfg,
		proc:     proc,
		log:      set.Logger.With().Str("component", component).Logger(),
		readlink: os.Readlink,
		now:      now{wake: make(chan struct{}, 1)},
	}, nil
}

// Run samples until ctx is done or the root process is gone; both return
// nil. See the package documentation.
func (s *Source) Run(ctx context.Context, emit sources.Emit) error {
	pid := s.proc.PID
	if pid == 0 {
		var err error
		pid, err = s.proc.PIDFunc(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("fdinfo: root pid: %w", err)
		}
	}
	log := s.log.With().Int("pid", pid).Logger()
	sm, err := newSampler(s.cfg, s.readlink, log, pid)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && alive(pid) {
			// The process runs, but not where proc_root looks (a
			// container given the host's /proc, say): say so now rather
			// than let the split find no sample.
			log.Warn().Str("proc_root", s.cfg.ProcRoot).
				Msgf("pid %d not found under %s; no fdinfo will be sampled", pid, s.cfg.ProcRoot)
		}
		return err
	}
	n := &s.now
	n.Lock()
	n.sm = sm
	n.Unlock()
	defer func() {
		n.Lock()
		n.sm = nil
		n.Unlock()
		sm.close()
	}()
	log.Info().Dur("interval", s.cfg.Interval).Msg("sampling started")

	ticker := time.NewTicker(s.cfg.Interval)
	defer ticker.Stop()
	// deferred fires when a sample SampleNow asked for within the gap is
	// due (nil while none waits).
	var deferred <-chan time.Time
	take, due := true, false
	for {
		n.Lock()
		switch t := time.Now(); {
		case take:
			s.takeLocked(t, false)
		case due && !n.asked.IsZero():
			s.takeLocked(t, true)
		}
		if due {
			deferred = nil
		}
		if !n.asked.IsZero() && n.lastAt.After(n.asked) {
			n.asked = time.Time{} // a sample since covers it
		}
		if !n.asked.IsZero() && deferred == nil {
			deferred = time.After(s.cfg.TriggerMinGap - time.Since(n.lastAsked))
		}
		out, gone, readErrs := n.taken, n.gone, sm.readErrs
		n.taken = nil
		n.Unlock()
		for _, smp := range out {
			if err := emit(ctx, sources.Record{Sample: smp}); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("emit sample: %w", err)
			}
		}
		if gone {
			log.Info().Uint64("samples", s.Stats().Samples).Msg("root process gone; sampling stopped")
			return nil
		}
		take, due = false, false
		select {
		case <-ctx.Done():
			log.Info().Uint64("samples", s.Stats().Samples).Uint64("read_errors", readErrs).Msg("sampling stopped")
			return nil
		case <-ticker.C:
			take = true
		case <-n.wake:
		case <-deferred:
			due = true
		}
	}
}
