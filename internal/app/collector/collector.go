// Package collector wires a collector: sources (a wrapped child, an
// attached process, a recorded stream) into the pipeline that records,
// folds and publishes their events.
//
//	collector run -- CMD        collector attach --pid P [--log F]     collector replay FILE...
//	  procwrap ─┐                 fdinfo ─┐                              events.jsonl
//	  fdinfo  ──┼─▶ pipeline       logtail ┼─▶ pipeline                    └─▶ publisher (ids kept)
//	            │     ├─ pkg/events: records → CloudEvents
//	            │     ├─ --out: split.log, gtt.txt, events.jsonl, split.md, split.json
//	            │     └─ internal/bus: JetStream publish, disk spool when the broker is away
//
// A record's Ack reaches its source only when every event built from it is
// durable (broker ack, spool, or --out offline), so checkpoints never run
// ahead of what was delivered.
package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/httpguard"
	"github.com/gttsplit/gttsplit/internal/provenance"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// IO is what a collector command talks to besides the network.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Signals delivers the signals main caught (SIGINT, SIGTERM, SIGHUP).
	// `run` forwards them to the child; `attach` and `replay` stop on them.
	Signals <-chan os.Signal
	// InForeground is true when the collector is in the foreground process
	// group of its controlling terminal: then a typed Ctrl-C already
	// reached run's child (same process group) and is not forwarded a
	// second time. attach and replay have no child and stop on it.
	InForeground bool
}

// ErrNoDestination means neither a NATS URL nor --out was given.
var ErrNoDestination = errors.New("nowhere to send events: set --nats-url (GTTSPLIT_NATS_URL) or --out")

// session is what every mode sets up: the run's identity, the pipeline and
// what must be closed.
type session struct {
	cfg    config.Collector
	log    zerolog.Logger
	origin events.Origin
	info   split.RunInfo
	pipe   *pipeline
	// noSplit: the command could not be started; --out gets no split.
	noSplit bool
	// backPressure is the publisher's BackPressure: replay waits for a
	// slow broker, run and attach spool.
	backPressure time.Duration
	// note, when set, logs what provenance found once the run started.
	note func()
	// http serves /metrics (http.listen); nil when not configured.
	http *http.Server
}

// started says, once, what is worth saying only about a run that started.
func (s *session) started() {
	if s.note != nil {
		s.note()
		s.note = nil
	}
}

// newSession sets up a run's pipeline. resume is set by attach: a restarted
// attach continues the same run, so --out is appended to.
func newSession(ctx context.Context, cfg config.Collector, runID string, resume bool, log zerolog.Logger) (*session, error) {
	if cfg.NATS.URL == "" && cfg.Out == "" {
		return nil, cli.Usage(ErrNoDestination)
	}
	// The HTTP port is taken first: a busy one is said before --out is
	// written or the broker dialled.
	var ln net.Listener
	var loop bool
	if cfg.HTTP.Listen != "" {
		var err error
		if ln, loop, err = httpguard.Listen(cfg.HTTP.Listen); err != nil {
			return nil, err
		}
	}
	closeLn := func() {
		if ln != nil {
			_ = ln.Close()
		}
	}
	host, err := hostOf(cfg)
	if err != nil {
		closeLn()
		return nil, err
	}
	if runID == "" {
		runID = GenerateRunID(host, time.Now())
	}
	s := &session{cfg: cfg, origin: events.Origin{RunID: runID, Host: host, Lane: cfg.Lane}}
	s.log = log.With().Str("run_id", runID).Str("host", host).Str("lane", cfg.Lane).Logger()
	s.info = split.RunInfo{ID: runID, Host: host, Lane: cfg.Lane, Issue: cfg.Issue, ControlOf: cfg.ControlOf, CollectorVersion: cli.Version()}
	s.pipe = &pipeline{origin: s.origin, maxLines: cfg.Batch.MaxLines, log: s.log, fold: split.NewFold(split.Options{})}
	if cfg.Out != "" {
		resumeRun := ""
		if resume {
			resumeRun = runID
		}
		rec, err := newRecorder(cfg.Out, resumeRun, s.pipe.fold)
		if err != nil {
			closeLn()
			return nil, err
		}
		s.pipe.out = rec
	}
	if cfg.NATS.URL != "" {
		pub, err := s.connect(ctx, host)
		if err != nil {
			closeLn()
			if s.pipe.out != nil {
				_ = s.pipe.out.close()
			}
			return nil, err
		}
		s.pipe.pub = pub
	}
	if ln != nil {
		s.http = startHTTP(cfg.HTTP, ln, loop, registry(s.pipe, cfg.Spool), s.log)
	}
	return s, nil
}

// provenance records the measured tree's commit and cleanliness.
func (s *session) provenance(ctx context.Context) {
	dir := s.cfg.SourceDir
	if dir == "" {
		if wd, err := os.Getwd(); err == nil {
			dir = wd
		}
	}
	t, err := provenance.ReadTree(ctx, dir)
	if err != nil {
		if s.cfg.SourceDir != "" {
			// The user named it: a typo must not pass as "unknown".
			if _, serr := os.Stat(dir); serr != nil {
				s.log.Warn().Str("source_dir", dir).Err(serr).Msg("--source-dir does not exist: the split's source tree is unknown")
			} else {
				s.log.Warn().Str("source_dir", dir).Err(err).Msg("--source-dir is not a git checkout: the split's source tree is unknown")
			}
			return
		}
		// Said once the run started (note): a command that cannot start
		// has nothing to say about it.
		s.note = func() {
			s.log.Info().Str("source_dir", dir).Msg("the working directory is not a git checkout: the split's source tree is unknown (set --source-dir)")
		}
		return
	}
	s.info.SourceCommit, s.info.SourceDirty, s.info.SourceCommitTime = t.Commit, t.Dirty, t.CommitTime
	s.pipe.detail.SourceDir = dir
}

// hostOf is the host the events are published as: the host key, else the
// machine's host name.
func hostOf(cfg config.Collector) (string, error) {
	if cfg.Host != "" {
		return cfg.Host, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("host name: %w", err)
	}
	return h, nil
}

// connect dials the broker (bus.Dial: a broker that is away is waited
// for, the events go to the spool meanwhile; the replies come on the
// host's own inbox, the only one its credential may read) and opens the
// publisher on the lane's spool.
func (s *session) connect(ctx context.Context, host string) (*bus.Publisher, error) {
	nc, _, err := bus.Dial(ctx, s.cfg.NATS, bus.DialOptions{Name: "gttsplit-collector", Host: host}, s.log)
	if err != nil {
		return nil, err
	}
	pc := bus.PublisherConfig{NATS: s.cfg.NATS, Spool: s.cfg.Spool, BackPressure: s.backPressure}
	// One spool per lane, so a crashed collector's events are drained by the
	// next collector of its lane; a second concurrent collector of the lane
	// gets its own.
	lane := s.spoolLane()
	var pub *bus.Publisher
	for _, name := range []string{lane, fmt.Sprintf("%s-%d", lane, os.Getpid())} {
		pc.Name = name
		pub, err = bus.NewPublisher(nc, pc, s.log)
		if err == nil {
			return pub, nil
		}
		s.log.Debug().Err(err).Str("spool", pc.Dir()).Msg("spool not usable")
	}
	nc.Close()
	return nil, fmt.Errorf("spool: %w", err)
}

// close flushes and closes the publisher and the --out files, writing the
// local split there. It returns how many events were dropped.
func (s *session) close(ctx context.Context) (uint64, error) {
	var errs []error
	var dropped uint64
	if s.pipe.pub != nil {
		if err := s.pipe.pub.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close publisher: %w", err))
		}
		dropped = s.pipe.pub.Dropped()
		left := s.pipe.pub.Leftover()
		s.warnLeftover(left)
		if left.Events == 0 && filepath.Base(left.Dir) != s.spoolLane() {
			// This process's own spool (the lane's was in use), empty.
			if err := bus.RemoveSpool(left.Dir); err != nil {
				s.log.Debug().Err(err).Str("spool", left.Dir).Msg("could not remove this process's empty spool")
			}
		}
	}
	if s.pipe.out != nil && s.noSplit {
		// Nothing ran: a split would describe no run at all.
		if err := s.pipe.out.abandon(); err != nil {
			errs = append(errs, err)
		}
		s.log.Warn().Str("out", s.cfg.Out).Msg("nothing written under --out: the command could not be started")
	} else if s.pipe.out != nil {
		r := s.pipe.fold.Report()
		if err := s.pipe.out.finish(r); err != nil {
			errs = append(errs, err)
		} else {
			s.log.Info().Str("out", s.cfg.Out).Msg("wrote split.log, gtt.txt, events.jsonl, split.md and split.json")
		}
	}
	if s.http != nil {
		_ = s.http.Close()
	}
	return dropped, errors.Join(errs...)
}

// deliveryCode says at exit what became of this run's events when they
// did not all reach the broker, and returns the exit code that says it:
// 1 when the run's start or finish was lost (no consumer will ever see
// the run), else 75 (cli.ExitTempFail) when events wait in the spool (a
// later collector of the lane delivers them), else 1 when some were
// dropped (the split is flagged events_dropped) or corrupt spool records
// lost events (of this run or an earlier one); 0 when every event was
// delivered. Offline (no broker) it is 0.
func (s *session) deliveryCode() int {
	pub := s.pipe.pub
	if pub == nil {
		return 0
	}
	run := s.origin.RunID
	dropped, left := pub.DroppedOf(run), pub.Leftover()
	switch {
	case pub.RunLost(run):
		s.log.Warn().Uint64("dropped", dropped).
			Msg("this run is lost: its start or finish could be neither delivered nor spooled (the spool's disk was full and the broker away)")
		return cli.ExitFailure
	case dropped > 0:
		s.log.Warn().Uint64("dropped", dropped).Int("waiting_in_spool", left.Events).
			Msg("events of this run were dropped (the spool was full, its disk was full, or the broker refused them): its split will be flagged events_dropped")
		if left.Events > 0 {
			return cli.ExitTempFail
		}
		return cli.ExitFailure
	case left.Events > 0:
		return cli.ExitTempFail
	}
	if loss := pub.SpoolLoss(); loss.Bytes > 0 {
		s.log.Warn().Int64("bytes_lost", loss.Bytes).Strs("runs", loss.Runs).Str("spool", left.Dir).
			Msg("corrupt records in the spool were skipped: the events in them are lost")
		return cli.ExitFailure
	}
	return 0
}

// warnLeftover says at exit what waits in the spool and what delivers it.
func (s *session) warnLeftover(left bus.Leftover) {
	if left.Events == 0 {
		return
	}
	base, name := filepath.Dir(left.Dir), filepath.Base(left.Dir)
	how := fmt.Sprintf("the next collector (run, attach or replay) of lane %q with spool.dir %s delivers them first, once it reaches a broker", name, base)
	if name != s.spoolLane() {
		// A second concurrent collector's own spool: only a collector
		// naming it as its lane opens it again.
		how = fmt.Sprintf("this spool is this process's own (the lane's was in use): a collector with --lane %s and --spool-dir %s delivers them, e.g. collector replay --lane %s --spool-dir %s --nats-url URL", name, base, name, base)
	}
	s.log.Warn().Int("events", left.Events).Int64("bytes", left.Bytes).Str("spool", left.Dir).Str("delivered_by", how).
		Msg("events left undelivered in the spool")
}

// spoolLane is the name of the lane's spool directory.
func (s *session) spoolLane() string {
	if s.cfg.Lane == "" {
		return "default"
	}
	return s.cfg.Lane
}

// shutdownCtx bounds the work left at shutdown by shutdown_timeout.
func (s *session) shutdownCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
}

// GenerateRunID makes a run id from the host and the time: readable,
// sortable, and unique enough per host (a random suffix).
func GenerateRunID(host string, t time.Time) string {
	var b [3]byte
	_, _ = io.ReadFull(randReader, b[:])
	return fmt.Sprintf("%s-%s-%x", tokenSafe(host), t.UTC().Format("20060102T150405"), b)
}

var randReader io.Reader = cryptoRand{}

// tokenSafe keeps letters, digits, '-' and '_' (what a run id may hold).
func tokenSafe(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	if b.Len() == 0 {
		return "host"
	}
	out := b.String()
	if len(out) > 40 {
		out = out[:40]
	}
	return out
}

// forward sends the caught signals to fn until ctx ends. With child set, a
// SIGINT is not forwarded when the collector is in its terminal's
// foreground group: the typed Ctrl-C already reached the child, which
// shares the collector's process group.
func forward(ctx context.Context, io IO, child bool, fn func(os.Signal)) {
	for {
		select {
		case <-ctx.Done():
			return
		case sig, ok := <-io.Signals:
			if !ok {
				return
			}
			if child && sig == syscall.SIGINT && io.InForeground {
				continue
			}
			fn(sig)
		}
	}
}

// runSources runs sources concurrently with one emit and waits for them.
func runSources(ctx context.Context, emit sources.Emit, srcs ...sources.Source) error {
	var wg sync.WaitGroup
	errs := make([]error, len(srcs))
	for i, src := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = src.Run(ctx, emit)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
