package sinks

import (
	"math"
	"time"

	"github.com/gttsplit/gttsplit/pkg/conf"
)

// RetryPolicy is the capped exponential backoff with jitter a Fanout uses
// between attempts of one sink. It is the sinks.retry.* keys: Max is
// max_backoff; the other fields are no keys. A zero field takes
// DefaultRetryPolicy's value.
type RetryPolicy struct {
	// Initial is the delay after the first failure.
	Initial time.Duration `mapstructure:"-"`
	// Max caps every backoff delay, jitter included.
	Max time.Duration `mapstructure:"max_backoff" desc:"cap on the exponential backoff between retries of a sink write"`
	// Multiplier grows the delay after each further consecutive failure.
	Multiplier float64 `mapstructure:"-"`
	// Jitter spreads each delay uniformly over ±Jitter of itself (0.2 is
	// ±20%), so sinks that failed together do not retry in lockstep.
	Jitter float64 `mapstructure:"-"`
	// MaxHint caps a delay requested by the remote end (RetryAfter), so a
	// bogus Retry-After cannot park a sink for days.
	MaxHint time.Duration `mapstructure:"-"`
}

// DefaultRetryPolicy returns 1s doubling to at most 5m with ±20% jitter and
// remote hints honoured up to 1h.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{
		Initial:    time.Second,
		Max:        5 * time.Minute,
		Multiplier: 2,
		Jitter:     0.2,
		MaxHint:    time.Hour,
	}
}

// Validate reports a problem of the sinks.retry.* keys (conf.FieldError):
// a configured max_backoff is positive.
func (p RetryPolicy) Validate() error {
	var ps conf.Problems
	ps.Positive("max_backoff", p.Max)
	return ps.Err()
}

// withDefaults fills zero fields from DefaultRetryPolicy.
func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy()
	if p.Initial <= 0 {
		p.Initial = d.Initial
	}
	if p.Max <= 0 {
		p.Max = d.Max
	}
	if p.Multiplier < 1 {
		p.Multiplier = d.Multiplier
	}
	if p.Jitter < 0 || p.Jitter > 1 {
		p.Jitter = d.Jitter
	}
	if p.MaxHint <= 0 {
		p.MaxHint = d.MaxHint
	}
	return p
}

// Backoff returns the delay after the failures-th consecutive failure
// (1-based). rnd is a uniform random number in [0, 1); 0.5 means no jitter.
func (p RetryPolicy) Backoff(failures int, rnd float64) time.Duration {
	p = p.withDefaults()
	if failures < 1 {
		failures = 1
	}
	base := float64(p.Initial) * math.Pow(p.Multiplier, float64(failures-1))
	base = math.Min(base, float64(p.Max))
	d := base * (1 + p.Jitter*(2*rnd-1))
	if d > float64(p.Max) {
		d = float64(p.Max)
	}
	if d < 0 {
		d = 0
	}
	return time.Duration(d)
}

// Delay returns how long to wait after err, the failures-th consecutive
// failure: the remote end's RetryAfter delay (capped by MaxHint) when err
// carries one, otherwise Backoff.
func (p RetryPolicy) Delay(err error, failures int, rnd float64) time.Duration {
	p = p.withDefaults()
	if d, ok := RetryAfterDelay(err); ok {
		return min(d, p.MaxHint)
	}
	return p.Backoff(failures, rnd)
}
