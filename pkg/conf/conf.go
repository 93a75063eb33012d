// Package conf is what the packages that own configuration keys share: the
// Secret type, the FieldError a section's Validate reports, and the checks
// of values that several sections take (a listen address, a stream name, a
// token-safe id).
//
// # Sections
//
// A key section is a plain struct, declared in the package that reads it:
// one field per key, tagged with its key name (`mapstructure:"max_bytes"`),
// its one-line description (`desc:"..."`) and, for some keys, a
// command-line flag (`flag:"spool-dir"`). Nested structs are sections of
// their own ("nats.tls"). A field tagged `mapstructure:"-"` is no key: the
// program sets it. Next to the struct are a function returning its
// defaults (the only place they are written) and a Validate method that
// reports every problem of the section's own keys at once, each a
// *FieldError whose Key is relative to the section ("url"; "" for the
// section as a whole); nested sections validate themselves. internal/config
// composes the sections into each binary's configuration and prefixes
// each problem with the section's key path ("nats.url: ...").
//
// conf is a leaf: the standard library and pkg/redact only, so every
// package of the module may use it.
package conf

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Secret is a string that is never printed: String, GoString, MarshalText
// and MarshalJSON return "[redacted]" when it is set and "" when it is
// empty. Use [Secret.Reveal] where the value itself is needed.
type Secret string

// Redacted is what a set Secret prints as.
const Redacted = "[redacted]"

// Reveal returns the secret value.
func (s Secret) Reveal() string { return string(s) }

// String returns "[redacted]", or "" for an empty secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return Redacted
}

// GoString is String, so %#v does not print the value either.
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// MarshalText is String, for YAML, TOML and other text encoders.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// MarshalJSON is String as a JSON string, for encoding/json and loggers.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(s.String())), nil }

// Placeholder returns the value when it is a placeholder the deploy files
// (or any sample) ship for an operator to replace, not a secret anyone
// chose: change-me and its kin (change-me-too, CHANGE_ME, changeme,
// replace-me), a <word> in angle brackets, or a bare "password", "secret"
// or "token". It returns "" otherwise. The placeholder is no secret: an
// error may name it.
func (s Secret) Placeholder() string {
	v := strings.TrimSpace(string(s))
	n := strings.Map(func(r rune) rune {
		switch r {
		case '-', '_', ' ', '.':
			return -1
		}
		return unicode.ToLower(r)
	}, v)
	switch {
	case n == "":
		return ""
	case strings.HasPrefix(n, "changeme"), strings.HasPrefix(n, "replaceme"),
		strings.HasPrefix(v, "<") && strings.HasSuffix(v, ">"),
		n == "password", n == "secret", n == "token":
		return v
	}
	return ""
}

// FieldError is one configuration problem, attached to the key it concerns.
type FieldError struct {
	// Key is the key path, relative to the section that reported it
	// ("url") until internal/config prefixes it ("nats.url"); "" or a
	// section's own path ("nats") for a problem that concerns several
	// keys of that section.
	Key string
	// Err says what is wrong.
	Err error
}

// Error returns "key: problem", or the problem alone when Key is "".
func (e *FieldError) Error() string {
	if e.Key == "" {
		return e.Err.Error()
	}
	return e.Key + ": " + e.Err.Error()
}

// Unwrap returns the problem without its key.
func (e *FieldError) Unwrap() error { return e.Err }

// Problems collects the problems of a section in the order they are found.
// The zero value is empty and ready to use.
type Problems []*FieldError

// Add records a problem of key; format and args say what is wrong (%w
// wraps an error).
func (p *Problems) Add(key, format string, args ...any) {
	*p = append(*p, &FieldError{Key: key, Err: fmt.Errorf(format, args...)})
}

// Check records err as a problem of key, unless it is nil.
func (p *Problems) Check(key string, err error) {
	if err != nil {
		*p = append(*p, &FieldError{Key: key, Err: err})
	}
}

// OneOf records a problem when value is none of allowed.
func (p *Problems) OneOf(key, value string, allowed ...string) {
	for _, a := range allowed {
		if value == a {
			return
		}
	}
	p.Add(key, "%q is not one of %s", value, strings.Join(allowed, ", "))
}

// Positive records a problem when d is not positive.
func (p *Problems) Positive(key string, d time.Duration) {
	if d <= 0 {
		p.Add(key, "must be a positive duration, got %s", d)
	}
}

// AtLeast records a problem when n is below min.
func (p *Problems) AtLeast(key string, n, min int64) {
	if n < min {
		p.Add(key, "must be at least %d, got %d", min, n)
	}
}

// NotEmpty records a problem when s is empty.
func (p *Problems) NotEmpty(key, s string) {
	if s == "" {
		p.Add(key, "must not be empty")
	}
}

// Err joins the problems into one error (errors.Join of the FieldErrors),
// or returns nil when there are none.
func (p Problems) Err() error {
	if len(p) == 0 {
		return nil
	}
	errs := make([]error, len(p))
	for i, fe := range p {
		errs[i] = fe
	}
	return errors.Join(errs...)
}

// Fields returns every *FieldError inside err, in the order they are
// reported, looking through errors.Join and wrapping. It returns nil for
// an error that holds none.
func Fields(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if fe, ok := e.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// Within returns the problems of err, reported by the section at path,
// with their keys prefixed by it ("url" becomes "nats.url", "" becomes
// "nats"). An error that is no FieldError becomes a problem of path.
func Within(path string, err error) []*FieldError {
	if err == nil {
		return nil
	}
	fields := Fields(err)
	if len(fields) == 0 {
		return []*FieldError{{Key: path, Err: err}}
	}
	out := make([]*FieldError, len(fields))
	for i, fe := range fields {
		key := path
		switch {
		case fe.Key == "":
		case path == "":
			key = fe.Key
		default:
			key = path + "." + fe.Key
		}
		out[i] = &FieldError{Key: key, Err: fe.Err}
	}
	return out
}

// ErrInvalid is wrapped by every error that reports an invalid
// configuration (internal/config's loaders and Validate methods); the
// binaries exit 2 on it.
var ErrInvalid = errors.New("config: invalid configuration")

// ErrConfigFile means the --config file cannot be read (it is missing,
// or not readable); the command line is wrong, so the binaries exit 2.
var ErrConfigFile = errors.New("cannot read the configuration file")
