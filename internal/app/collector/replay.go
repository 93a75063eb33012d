package collector

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// ReplayStats counts what a replay sent, delivered and skipped.
type ReplayStats struct {
	Sent    int // events read and handed to the publisher
	Skipped int // lines that are not valid events
	Invalid int // events that are no valid gttsplit event
	// Delivered counts the events a broker acknowledged (a spool left by
	// an earlier collector of the lane is delivered first and counts too).
	Delivered int
	// Left counts the events left undelivered in the spool (then Replay
	// returns an error with exit code 75), Dropped those neither
	// delivered nor spooled.
	Left    int
	Dropped int
	// Foreign counts the events of other hosts than the host key names
	// (when it is set): not sent, since a host's credential may publish
	// only its own.
	Foreign int
	// SpoolLost counts the bytes of corrupt spool records skipped: the
	// events in them are lost (then Replay returns an error, exit 1).
	SpoolLost int64
}

// Replay is `collector replay [FILE...]`: it delivers what waits in the
// lane's spool, then publishes recorded streams as they are, ids
// included, so a replay of events already in the stream is de-duplicated
// by JetStream and by the aggregator's fold. With no file it only
// delivers the spool. pace is instant, original (the events' own time
// deltas) or Nx (N times faster). A broker that acknowledges late is
// waited for (up to shutdown_timeout), not spooled for.
//
// With the host key set (--host), only that host's events are sent: a
// host's credential may publish no other host's, and its replies come on
// its own inbox (bus.InboxPrefix); the others are counted (Foreign) and
// said. Without it every event is sent, on the machine's host name's
// inbox.
//
// The error carries the exit code: 75 (cli.ExitTempFail) when events
// were left in the spool, 1 when some were dropped or not sent for being
// another host's, or the files held no event and the spool none either,
// 128+N when signal N stopped it.
func Replay(ctx context.Context, cfg config.Collector, files []string, io IO, log zerolog.Logger) (ReplayStats, error) {
	var st ReplayStats
	factor, err := replayArgs(cfg, files)
	if err != nil {
		return st, err
	}
	// replay sends other runs' events: its log names them, not a run of
	// its own.
	s := &session{cfg: cfg, log: log, backPressure: cfg.ShutdownTimeout}
	s.cfg.Out = ""
	host, err := hostOf(cfg)
	if err != nil {
		return st, err
	}
	// only is the host token whose events are sent ("": every host's).
	only := ""
	if cfg.Host != "" {
		only = events.Token(cfg.Host)
	}
	foreign := map[string]int{}
	pub, err := s.connect(ctx, host)
	if err != nil {
		return st, err
	}
	s.pipe = &pipeline{pub: pub, log: log}
	rlog := log.With().Str("component", "replay").Logger()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var caught atomic.Pointer[os.Signal]
	go forward(ctx, io, false, func(sig os.Signal) {
		caught.CompareAndSwap(nil, &sig)
		stop()
	})

	rp := &replayer{pub: pub, log: rlog, factor: factor, only: only, st: &st, all: map[string]int{}, foreign: foreign}
	all := rp.all
	var runErr error
	for _, name := range files {
		if end, err := rp.file(ctx, name); end || err != nil {
			runErr = err
			break
		}
	}
	sctx, cancel := s.shutdownCtx(ctx)
	defer cancel()
	if err := pub.Flush(sctx); err != nil && runErr == nil && ctx.Err() == nil {
		runErr = err
	}
	_, closeErr := s.close(sctx)
	ps, left := pub.Stats(), pub.Leftover()
	for run, n := range pub.DrainedRuns() {
		all[run] += n
	}
	st.Delivered, st.Left, st.Dropped = int(ps.Published+ps.Drained), left.Events, int(ps.Dropped)
	loss := pub.SpoolLoss()
	st.SpoolLost = loss.Bytes
	if st.Skipped+st.Invalid > 0 {
		rlog.Warn().Int("bad_lines", st.Skipped).Int("bad_events", st.Invalid).Msg("skipped what could not be replayed")
	}
	if st.Foreign > 0 {
		rlog.Warn().Int("events", st.Foreign).Strs("hosts", runIDs(foreign)).Str("host", cfg.Host).
			Msg("not sent: events of other hosts (a host's credential may publish only its own events; replay them with --host naming theirs, and their credentials)")
	}
	lev := rlog.Info()
	if st.Left > 0 || st.Dropped > 0 || st.SpoolLost > 0 || st.Delivered < st.Sent {
		lev = rlog.Warn()
	}
	lev.Int("sent", st.Sent).Int("delivered", st.Delivered).Int("left_in_spool", st.Left).Int("dropped", st.Dropped).
		Int64("spool_lost_bytes", st.SpoolLost).Strs("runs", runIDs(all)).Msg("replayed")
	if sig := caught.Load(); sig != nil {
		rlog.Warn().Str("signal", (*sig).String()).Msg("replay interrupted")
		return st, errors.Join(closeErr, &cli.ExitError{Code: 128 + signalNumber(*sig)})
	}
	if err := replayShortfall(st, left.Dir, loss.Runs, cfg.Host, len(files) > 0 && runErr == nil); err != nil {
		runErr = errors.Join(runErr, err)
	}
	return st, errors.Join(runErr, closeErr)
}

// replayArgs checks what Replay is given before it connects, and returns
// the pace's factor.
func replayArgs(cfg config.Collector, files []string) (float64, error) {
	if cfg.NATS.URL == "" {
		return 0, cli.Usage(errors.New("replay publishes to NATS: set --nats-url (GTTSPLIT_NATS_URL)"))
	}
	factor, err := config.ParsePace(cfg.Replay.Pace)
	if err != nil {
		return 0, cli.Usage(fmt.Errorf("replay.pace: %w", err))
	}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return 0, cli.Usage(fmt.Errorf("cannot read input: %w", err))
		}
		if fi.IsDir() {
			return 0, cli.Usage(fmt.Errorf("cannot read input: %s is a directory: give the recorded streams in it (%s/*.jsonl)", f, f))
		}
	}
	return factor, nil
}

// replayer sends the events of recorded streams, file by file, paced.
type replayer struct {
	pub    *bus.Publisher
	log    zerolog.Logger
	factor float64 // the pace (0: instant)
	only   string  // the host token whose events are sent ("": every host's)
	st     *ReplayStats
	all    map[string]int // events by run, in all
	// foreign counts the events not sent, by host.
	foreign map[string]int
	last    time.Time // the latest event time seen, for the pace
}

// file sends the events of one recorded stream; end says the replay
// ends here (ctx ended, or a publish or the file failed: err).
func (rp *replayer) file(ctx context.Context, name string) (end bool, err error) {
	st := rp.st
	f, err := os.Open(name)
	if err != nil {
		return true, err
	}
	defer f.Close()
	r := events.NewReader(f)
	runs := map[string]int{}
	sent := st.Sent
	for r.Next() {
		ev := r.Event()
		d, err := events.Decode(ev)
		if err != nil {
			st.Invalid++
			rp.log.Debug().Str("file", name).Int("line", r.Line()).Err(err).Msg("skipped an event")
			continue
		}
		if rp.only != "" && events.Token(d.Origin.Host) != rp.only {
			st.Foreign++
			rp.foreign[d.Origin.Host]++
			continue
		}
		runs[d.Origin.RunID]++
		rp.all[d.Origin.RunID]++
		if !rp.pace(ctx, ev.Time()) {
			return true, nil
		}
		if err := rp.pub.Publish(ctx, ev, nil); err != nil {
			if ctx.Err() != nil {
				err = nil // stopped by a signal
			}
			return true, err
		}
		st.Sent++
	}
	st.Skipped += r.Skipped()
	if err := r.Err(); err != nil {
		return true, err
	}
	rp.log.Info().Str("file", name).Int("events", st.Sent-sent).Strs("runs", runIDs(runs)).Msg("file replayed")
	return false, nil
}

// pace waits for an event stamped at: by the latest time seen, so that
// an event stamped earlier than the one before it (a log batch is stamped
// with its first line) goes at once and does not make the next one wait
// its gap again. It reports false when ctx ended meanwhile.
func (rp *replayer) pace(ctx context.Context, at time.Time) bool {
	if rp.factor <= 0 || !at.After(rp.last) {
		return true
	}
	if !rp.last.IsZero() {
		wait := time.Duration(float64(at.Sub(rp.last)) / rp.factor)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return false
		}
	}
	rp.last = at
	return true
}

// replayShortfall is the error of a replay that did not deliver all it
// read (nil when it did): events left in the spool dir (exit 75), dropped,
// of other hosts than host, lost in corrupt spool records (of the runs
// lost), or, with filesSent (files given and no error so far), no event
// at all.
func replayShortfall(st ReplayStats, dir string, lost []string, host string, filesSent bool) error {
	switch {
	case st.Left > 0:
		return &cli.ExitError{Code: cli.ExitTempFail,
			Err: fmt.Errorf("%d events left undelivered in the spool %s (the next collector of the lane delivers them)", st.Left, dir)}
	case st.Dropped > 0:
		return fmt.Errorf("%d events dropped: refused by the broker (set aside in %s) or the spool was full",
			st.Dropped, filepath.Join(dir, bus.RejectedDir))
	case st.Foreign > 0:
		return fmt.Errorf("%d events of other hosts than %s not sent", st.Foreign, host)
	case st.SpoolLost > 0:
		return fmt.Errorf("%d bytes of corrupt records in the spool %s were skipped: their events are lost (runs %s)",
			st.SpoolLost, dir, strings.Join(lost, ", "))
	case filesSent && st.Sent == 0 && st.Delivered == 0:
		return errors.New("no event was published: the files hold no event, and the spool none either")
	}
	return nil
}

// signalNumber is the number of a caught signal (its exit code is 128+N).
func signalNumber(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return int(n)
	}
	return int(syscall.SIGINT)
}

// runIDs lists the runs of a file, the first five then a count.
func runIDs(runs map[string]int) []string {
	ids := slices.Sorted(maps.Keys(runs))
	if len(ids) > 5 {
		ids = append(ids[:5], fmt.Sprintf("(and %d more)", len(ids)-5))
	}
	return ids
}
