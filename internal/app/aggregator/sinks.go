package aggregator

import (
	"context"
	"fmt"
	"io"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/commentsink"
	"github.com/gttsplit/gttsplit/pkg/sinks/filesink"
	"github.com/gttsplit/gttsplit/pkg/sinks/jsonsink"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// Registry lists the sink types an aggregator can write (STYLE P4: the
// binary lists its plugins explicitly).
func Registry() (sinks.Registry, error) {
	return sinks.NewRegistry(filesink.NewFactory(), jsonsink.NewFactory(), commentsink.NewFactory())
}

// Reload gives a run's latest report again (see sinks.FanoutConfig.Reload).
type Reload = func(ctx context.Context, sink, runID string) (split.Report, bool, error)

// OpenSinks builds the sinks cfg enables, behind one Fanout that retries each
// independently. It returns nil (and no error) when none is enabled. With
// reload, a sink's full queue (sinks.max_pending) defers reports instead of
// dropping them.
func OpenSinks(cfg config.Sinks, stdout io.Writer, log zerolog.Logger, obs sinks.Observer, reload Reload) (*sinks.Fanout, error) {
	return openSinks(cfg, sinks.Settings{Logger: log, Stdout: stdout}, obs, reload, nil)
}

// openSinks is OpenSinks with the fleet's guard: keep, if not nil, is
// asked right before each write commits whether this aggregator still
// owns the report's run (sinks.FanoutConfig.Keep).
func openSinks(cfg config.Sinks, set sinks.Settings, obs sinks.Observer, reload Reload, keep func(split.Report) bool) (*sinks.Fanout, error) {
	reg, err := Registry()
	if err != nil {
		return nil, err
	}
	var targets []sinks.Target
	// add builds a sink from its factory's defaults with configure applied,
	// so a sink option the aggregator's config does not set keeps the
	// sink's own default instead of a zero value.
	add := func(typ string, configure func(cfg any)) error {
		f, ok := reg[typ]
		if !ok {
			return fmt.Errorf("sinks.%s: %w", typ, sinks.ErrUnknownType)
		}
		c := f.DefaultConfig()
		configure(c)
		s, err := reg.New(typ, c, set)
		if err != nil {
			for _, t := range targets {
				_ = t.Sink.Close(context.Background())
			}
			return fmt.Errorf("sinks.%s: %w", typ, err)
		}
		targets = append(targets, sinks.Target{Name: typ, Sink: s})
		return nil
	}
	if cfg.File.Dir != "" {
		if err := add("file", func(c any) { c.(*filesink.Config).Dir = cfg.File.Dir }); err != nil {
			return nil, err
		}
	}
	if cfg.JSON.Dir != "" {
		if err := add("json", func(c any) { c.(*jsonsink.Config).Dir = cfg.JSON.Dir }); err != nil {
			return nil, err
		}
	}
	if ic := cfg.IssueComment; ic.API != "" {
		err := add("issue_comment", func(c any) {
			cc := c.(*commentsink.Config)
			cc.API, cc.DefaultIssue, cc.DryRun = ic.API, ic.DefaultIssue, ic.DryRun
			cc.Token = sinks.Secret(ic.Token.Reveal())
			if ic.Timeout > 0 {
				cc.Timeout = ic.Timeout
			}
		})
		if err != nil {
			return nil, err
		}
	}
	if len(targets) == 0 {
		return nil, nil
	}
	pol := sinks.DefaultRetryPolicy()
	if cfg.Retry.MaxBackoff > 0 {
		pol.Max = cfg.Retry.MaxBackoff
	}
	return sinks.NewFanout(set, sinks.FanoutConfig{Retry: pol, Observer: obs, MaxPending: cfg.MaxPending, Reload: reload, Keep: keep}, targets...)
}
