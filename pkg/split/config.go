package split

import (
	"errors"
	"regexp"
	"regexp/syntax"

	"github.com/gttsplit/gttsplit/pkg/conf"
	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
)

// Config is the split.* keys of the aggregator: how events are folded into
// a split. Options turns it into a fold's Options.
type Config struct {
	// UnattributedThresholdPct is Options.UnattributedThresholdPct.
	UnattributedThresholdPct float64 `mapstructure:"unattributed_threshold_pct" flag:"threshold" desc:"unattributed share of peak GTT, in percent (0-100], above which the check is raised"`
	// TracePattern and TraceNamePattern are llamalog.NewParser's patterns.
	TracePattern     string `mapstructure:"trace_pattern" desc:"regexp with one capture group: the resident MiB of a host-weight trace line"`
	TraceNamePattern string `mapstructure:"trace_name_pattern" desc:"regexp with one capture group: the tensor name of a host-weight trace line"`
}

// DefaultConfig returns the defaults of the split.* keys: the core's own
// threshold and patterns.
func DefaultConfig() Config {
	return Config{
		UnattributedThresholdPct: DefaultThresholdPct,
		TracePattern:             DefaultTracePattern,
		TraceNamePattern:         DefaultTraceNamePattern,
	}
}

// Validate reports every problem of c (conf.FieldError, keys relative to
// split.*).
func (c Config) Validate() error {
	var p conf.Problems
	if t := c.UnattributedThresholdPct; !(t > 0 && t <= 100) {
		p.Add("unattributed_threshold_pct", "must be in (0, 100], got %v", t)
	}
	for _, f := range []struct{ key, pattern, trace, name string }{
		{"trace_pattern", c.TracePattern, c.TracePattern, DefaultTraceNamePattern},
		{"trace_name_pattern", c.TraceNamePattern, DefaultTracePattern, c.TraceNamePattern},
	} {
		if f.pattern == "" { // NewParser's default, but no pattern as a key
			p.Add(f.key, "%q must have exactly one capture group, has 0", f.pattern)
			continue
		}
		_, err := llamalog.NewParser(f.trace, f.name)
		var se *syntax.Error
		var pe *llamalog.PatternError
		switch {
		case err == nil:
		case errors.As(err, &se):
			p.Add(f.key, "does not compile: %w", se)
		case errors.As(err, &pe):
			p.Add(f.key, "%q must have exactly one capture group, has %d", f.pattern, regexp.MustCompile(f.pattern).NumSubexp())
		default:
			p.Check(f.key, err)
		}
	}
	return p.Err()
}

// Options returns the fold's options c sets.
func (c Config) Options() (Options, error) {
	parser, err := llamalog.NewParser(c.TracePattern, c.TraceNamePattern)
	if err != nil {
		return Options{}, err
	}
	return Options{Parser: parser, UnattributedThresholdPct: c.UnattributedThresholdPct}, nil
}
