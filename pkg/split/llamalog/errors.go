package llamalog

import (
	"errors"
	"fmt"
)

var errOneGroup = errors.New("must have exactly one capture group")

// PatternError reports a bad configurable pattern.
type PatternError struct {
	Key     string
	Pattern string
	Err     error
}

func (e *PatternError) Error() string {
	return fmt.Sprintf("%s: %q: %v", e.Key, e.Pattern, e.Err)
}

func (e *PatternError) Unwrap() error { return e.Err }
