package sinks

import (
	"errors"
	"time"
)

// ErrClosed is returned (possibly wrapped) by Write after Close. It is
// permanent: IsPermanent reports true for it.
var ErrClosed = errors.New("sinks: sink closed")

// ErrQueueFull is the reason a Fanout defers a report (FanoutConfig.Reload)
// or drops one when a sink's queue is full (see FanoutConfig.MaxPending).
var ErrQueueFull = errors.New("sinks: queue full")

// ErrUndelivered is the reason a Fanout gives for reports still queued when
// Close's context ended (or the sink kept failing while Close drained);
// the error it gives matches it with errors.Is and wraps the sink's last
// failure, if any.
var ErrUndelivered = errors.New("sinks: not delivered before close")

// undeliveredError is a report Close gave up on: ErrUndelivered, with
// the sink's last failure, whose text ends its own ("not delivered before
// close: issue o/r#1: POST ...: 500 Internal Server Error").
type undeliveredError struct{ last error }

func (e undeliveredError) Error() string {
	if e.last == nil {
		return "not delivered before close"
	}
	return "not delivered before close: " + e.last.Error()
}

func (e undeliveredError) Is(target error) bool { return target == ErrUndelivered }
func (e undeliveredError) Unwrap() error        { return e.last }

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: retrying the same write cannot succeed (a
// malformed report, a missing issue). A nil err stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was marked with
// Permanent or is ErrClosed. A nil error is not permanent.
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	var p permanentError
	return errors.As(err, &p) || errors.Is(err, ErrClosed)
}

// retryAfterError is a transient error that carries the delay the remote end
// asked for (HTTP Retry-After, a rate-limit reset).
type retryAfterError struct {
	err   error
	delay time.Duration
}

func (e retryAfterError) Error() string { return e.err.Error() }
func (e retryAfterError) Unwrap() error { return e.err }

// RetryAfter marks err as transient with a delay requested by the remote end;
// a runner waits that long (capped by RetryPolicy.MaxHint) instead of its
// own backoff before the next attempt. A nil err stays nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	if d < 0 {
		d = 0
	}
	return retryAfterError{err: err, delay: d}
}

// RetryAfterDelay returns the delay attached by RetryAfter to err or any
// error it wraps.
func RetryAfterDelay(err error) (time.Duration, bool) {
	var r retryAfterError
	if errors.As(err, &r) {
		return r.delay, true
	}
	return 0, false
}
