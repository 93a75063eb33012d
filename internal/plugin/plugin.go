// Package plugin holds what every source and sink factory shares.
package plugin

import (
	"errors"
	"fmt"
)

// ErrConfig marks a factory handed a config of the wrong type.
var ErrConfig = errors.New("wrong config type")

// Config returns a factory's untyped cfg as a T: cfg may be a T or a
// non-nil *T (what the factory's DefaultConfig returns). kind names the
// plugin in the error.
func Config[T any](kind string, cfg any) (T, error) {
	var zero T
	switch v := cfg.(type) {
	case T:
		return v, nil
	case *T:
		if v != nil {
			return *v, nil
		}
	}
	return zero, fmt.Errorf("%s: %w: %T, want *%T", kind, ErrConfig, cfg, zero)
}
