package aggregator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/commentsink"
	"github.com/gttsplit/gttsplit/pkg/sinks/filesink"
	"github.com/gttsplit/gttsplit/pkg/sinks/jsonsink"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// Reload gives a run's latest report again (see sinks.FanoutConfig.Reload).
type Reload = func(ctx context.Context, sink, runID string) (split.Report, bool, error)

// OpenSinks builds the sinks cfg enables, behind one Fanout that retries each
// independently. It returns nil (and no error) when none is enabled. With
// reload, a sink's full queue (sinks.max_pending) defers reports instead of
// dropping them.
func OpenSinks(cfg config.Sinks, stdout io.Writer, log zerolog.Logger, obs sinks.Observer, reload Reload) (*sinks.Fanout, error) {
	return openSinks(cfg, sinks.Settings{Logger: log, Stdout: stdout}, fanoutConfig(cfg, obs, reload, nil))
}

// fanoutConfig is the Fanout's config from the sinks.* keys, with its
// observer, its reload and its guard: keep, if not nil, is asked right
// before each write commits whether this aggregator still owns the
// report's run (sinks.FanoutConfig.Keep).
func fanoutConfig(cfg config.Sinks, obs sinks.Observer, reload Reload, keep func(split.Report) bool) sinks.FanoutConfig {
	return sinks.FanoutConfig{Retry: cfg.Retry, Observer: obs, MaxPending: cfg.MaxPending, Reload: reload, Keep: keep}
}

// openSinks opens the sinks cfg enables behind a Fanout of config fc (nil
// when none is enabled).
func openSinks(cfg config.Sinks, set sinks.Settings, fc sinks.FanoutConfig) (*sinks.Fanout, error) {
	var targets []sinks.Target
	// add opens one sink (name is its key under sinks.*); a failure closes
	// the ones opened before it.
	add := func(name string, open func() (sinks.Sink, error)) error {
		s, err := open()
		if err != nil {
			for _, t := range targets {
				_ = t.Sink.Close(context.Background())
			}
			return fmt.Errorf("sinks.%s: %w", name, err)
		}
		targets = append(targets, sinks.Target{Name: name, Sink: s})
		return nil
	}
	if cfg.File.Enabled() {
		if err := add("file", func() (sinks.Sink, error) { return filesink.New(cfg.File, set) }); err != nil {
			return nil, err
		}
	}
	if cfg.JSON.Enabled() {
		if err := add("json", func() (sinks.Sink, error) { return jsonsink.New(cfg.JSON, set) }); err != nil {
			return nil, err
		}
	}
	if cfg.IssueComment.Enabled() {
		if err := add("issue_comment", func() (sinks.Sink, error) { return commentsink.New(cfg.IssueComment, set) }); err != nil {
			return nil, err
		}
	}
	if len(targets) == 0 {
		return nil, nil
	}
	return sinks.NewFanout(set, fc, targets...)
}

// CloseOneShot ends the sinks of a one-shot command (replay, quickstart).
// Nothing comes after it to send what its sinks still hold (serve's
// partitions have a next owner), so it does not close them at once: they
// keep retrying with their backoff (sinks.retry.*), as they do while serve
// runs, until every report is delivered or timeout (shutdown_timeout)
// passes or ctx ends; then they are closed, and what is still queued is
// undelivered, each sink's last failure named.
func CloseOneShot(ctx context.Context, fan *sinks.Fanout, timeout time.Duration) error {
	if fan == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := fan.Flush(ctx); err == nil {
		return fan.Close(ctx)
	}
	// Close gives up at once on what is queued; its "delivery cut short"
	// is said by the line's end instead.
	var errs []error
	for _, e := range unjoin(fan.Close(ctx)) {
		if !errors.Is(e, sinks.ErrUndelivered) && (errors.Is(e, context.DeadlineExceeded) || errors.Is(e, context.Canceled)) {
			continue
		}
		errs = append(errs, e)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w (after retrying for shutdown_timeout, %s)", errors.Join(errs...), timeout)
}

// unjoin lists the errors errors.Join joined (err itself when it is not a
// join, none when nil).
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// laneChanges is what the run table needs to keep each lane's changes
// comment on its tracker issue: on where the comment sink is on and
// lane_changes.comment is set (nil otherwise), through a comment sink of
// its own (its close is the func returned).
func laneChanges(cfg config.Aggregator, set sinks.Settings) (*runtable.LaneChanges, func(), error) {
	if !cfg.Sinks.IssueComment.Enabled() || !cfg.LaneChanges.Comment {
		return nil, func() {}, nil
	}
	th, err := regress.ParseThresholds(cfg.LaneChanges.Thresholds)
	if err != nil {
		return nil, nil, fmt.Errorf("lane_changes.thresholds: %w", err)
	}
	s, err := commentsink.New(cfg.Sinks.IssueComment, set)
	if err != nil {
		return nil, nil, fmt.Errorf("sinks.issue_comment: %w", err)
	}
	return &runtable.LaneChanges{Thresholds: th, PageURL: cfg.LaneChanges.PageURL, DefaultIssue: cfg.Sinks.IssueComment.DefaultIssue,
			Retry: cfg.Sinks.Retry, Post: s.Sticky},
		func() { _ = s.Close(context.Background()) }, nil
}
