package collector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/pkg/redact"
	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/sources/fdinfo"
	"github.com/gttsplit/gttsplit/pkg/sources/procwrap"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// ExitCannotRun is the exit code of `collector run` when the child cannot
// be started.
const ExitCannotRun = procwrap.ExitCannotRun

// Run is `collector run -- CMD ARGS...`: it runs the command, passes its
// output through unchanged, samples its process tree's fdinfo, publishes
// both, and returns the child's exit code (128+N for a signal, 127 when it
// could not start); a child's 0 gives way to the session's deliveryCode
// (75 or 1) when the run's events did not all reach the broker.
func Run(ctx context.Context, cfg config.Collector, argv []string, io IO, log zerolog.Logger) (int, error) {
	s, err := newSession(ctx, cfg, cfg.RunID, false, log)
	if err != nil {
		return 1, err
	}
	s.provenance(ctx)

	red, err := cfg.Wrap.Redactor()
	if err != nil {
		_, _ = s.close(ctx)
		return 1, cli.Usage(fmt.Errorf("wrap.redact_flags: %w", err))
	}
	trigger := &sampleTrigger{}
	watch := newLlamaWatch()
	lineHook := func(text []byte) {
		trigger.line(text)
		watch.line(text)
	}
	// The child gets the collector's environment without the collector's
	// own secrets.
	opt := procwrap.Options{Command: argv, BaseEnv: childEnv(os.Environ()), Run: s.info, OnLine: lineHook,
		Stdin: io.Stdin, Stdout: io.Stdout, Stderr: io.Stderr}
	set := sources.Settings{Logger: s.log, Batch: cfg.Batch}
	pw, err := procwrap.New(cfg.Wrap, opt, set)
	if err != nil {
		_, _ = s.close(ctx)
		return 1, err
	}
	s.pipe.detail.Args = red.Args(pw.Argv())
	s.pipe.detail.VerboseAppended = len(pw.Argv()) > len(argv)
	s.pipe.detail.Env = map[string]string{}
	for _, kv := range pw.Env() {
		if k, v, ok := cutEnv(kv); ok && k == procwrap.TraceEnv {
			s.pipe.detail.Env[k] = v
			if _, set := os.LookupEnv(k); !set && cfg.Wrap.SetTraceEnv {
				s.pipe.detail.EnvAdded = []string{k}
			}
		}
	}

	sampler, err := fdinfo.New(cfg.Sample, fdinfo.Process{PIDFunc: pw.WaitPID}, set)
	if err != nil {
		_, _ = s.close(ctx)
		return 1, err
	}
	trigger.src.Store(sampler)
	s.pipe.sampling = samplingOf(sampler)

	// The child's Finished record is held back: it is published last,
	// after every line and sample, with the drop counts.
	var (
		mu       sync.Mutex
		finished *split.FinishInfo
	)
	emit := func(ctx context.Context, r sources.Record) error {
		if r.Started != nil {
			// procwrap emits Started once the child runs: name its pid
			// there, not when the sampler happens to learn it.
			s.pipe.mu.Lock()
			s.pipe.detail.PID = pw.PID()
			s.pipe.mu.Unlock()
			s.started()
		}
		if r.Finished != nil {
			mu.Lock()
			finished = r.Finished
			mu.Unlock()
			if r.Ack != nil {
				r.Ack()
			}
			return nil
		}
		return s.pipe.emit(ctx, r)
	}

	sigCtx, stopSignals := context.WithCancel(ctx)
	go forward(sigCtx, io, true, func(sig os.Signal) {
		if err := pw.Signal(sig); err != nil {
			s.log.Debug().Err(err).Str("signal", sig.String()).Msg("signal not forwarded")
		}
	})
	sampleCtx, stopSampler := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var sampleErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		sampleErr = sampler.Run(sampleCtx, emit)
		if errors.Is(sampleErr, fdinfo.ErrNoProcess) {
			sampleErr = nil // the child was gone before the first sample
		}
	}()
	runErr := pw.Run(ctx, emit)
	stopSignals()
	// The sampler ends by itself when the child's process is gone; a
	// grandchild that kept the tree alive is not waited for.
	go func() {
		select {
		case <-time.After(2 * cfg.Sample.Interval):
			stopSampler()
		case <-sampleCtx.Done():
		}
	}()
	wg.Wait()
	stopSampler()

	code := pw.ExitCode()
	var startErr *procwrap.StartError
	if errors.As(runErr, &startErr) {
		fmt.Fprintf(io.Stderr, "collector: %v\n", runErr)
		s.noSplit = true
		_, _ = s.close(ctx)
		return ExitCannotRun, nil
	}

	watch.warnIfNone(s.log, strings.Join(s.pipe.detail.Args, " "), "the command")

	sctx, cancel := s.shutdownCtx(ctx)
	defer cancel()
	fi := finished
	if fi == nil {
		fi = &split.FinishInfo{Finished: time.Now(), Incomplete: true}
	}
	fi.DroppedEvents += pw.Dropped()
	if s.pipe.pub != nil {
		if err := s.pipe.pub.Flush(sctx); err != nil {
			s.log.Warn().Err(err).Msg("flush before run-finished")
		}
		fi.DroppedEvents += s.pipe.pub.DroppedOf(s.origin.RunID)
	}
	if err := s.pipe.emit(sctx, sources.Record{Finished: fi}); err != nil {
		s.log.Error().Err(err).Msg("run-finished not published")
	}
	_, closeErr := s.close(sctx)
	err = errors.Join(runErr, sampleErr, closeErr)
	if err != nil && code < 0 {
		return 1, err
	}
	if code < 0 {
		code = 1
	}
	if err != nil {
		s.log.Error().Err(err).Msg("the run was measured with errors")
	}
	// A child that succeeded gives way to what became of the run's
	// events (a failed child's own code is kept: it says more).
	if dc := s.deliveryCode(); code == 0 {
		code = dc
	}
	return code, nil
}

func cutEnv(kv string) (k, v string, ok bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return "", "", false
}

// secretEnv names the collector's own secrets in the environment
// (GTTSPLIT_NATS_TOKEN, GTTSPLIT_NATS_PASSWORD, GTTSPLIT_NATS_CREDS_FILE,
// GTTSPLIT_NATS_NKEY_SEED_FILE, GTTSPLIT_COMMENT_TOKEN,
// GTTSPLIT_SINKS_ISSUE_COMMENT_TOKEN, ...): never passed to the child.
var secretEnv = regexp.MustCompile(`^GTTSPLIT_.*(TOKEN|PASSWORD|CREDS|NKEY|SEED|SECRET)`)

// childEnv returns env without the collector's secrets: the variables
// secretEnv names, and every GTTSPLIT_* variable whose value holds URL
// credentials (GTTSPLIT_NATS_URL=nats://TOKEN@host, a comment API URL
// with a user and password).
func childEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if secretEnv.MatchString(k) || strings.HasPrefix(k, config.EnvPrefix+"_") && redact.URLList(v) != v {
			continue
		}
		out = append(out, kv)
	}
	return out
}
