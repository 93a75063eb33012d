package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/gttsplit/gttsplit/pkg/conf"
)

// EnvPrefix is the prefix of every environment variable that sets a key.
const EnvPrefix = "GTTSPLIT"

// ErrInvalid (conf.ErrInvalid) is wrapped by every error that
// [LoadCollector], [LoadAggregator] and the Validate methods return for a
// bad config.
var ErrInvalid = conf.ErrInvalid

// ErrConfigFile (conf.ErrConfigFile) means the --config file cannot be read
// (it is missing, or not readable); the command line is wrong, so the CLI
// exits 2.
var ErrConfigFile = conf.ErrConfigFile

// Problems returns every [*conf.FieldError] inside err, in the order they
// are reported. It returns nil for an error that holds none.
func Problems(err error) []*conf.FieldError { return conf.Fields(err) }

// invalid joins problems into one error that wraps [ErrInvalid], or returns
// nil when there are none.
func invalid(problems []*conf.FieldError) error {
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n%w", ErrInvalid, conf.Problems(problems).Err())
}

// validator is a key section that checks its own keys.
type validator interface{ Validate() error }

// sections returns the problems of every section of v, a config struct:
// each struct field whose type has a Validate method reports its own
// keys' problems, prefixed with the field's key path (a squashed field's
// with the path of the section holding it), and its nested sections are
// asked in turn.
func sections(v reflect.Value, prefix string) []*conf.FieldError {
	var out []*conf.FieldError
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, squash := tagName(f)
		if !f.IsExported() || (name == "" && !squash) || name == "-" || f.Type.Kind() != reflect.Struct {
			continue
		}
		path := name
		switch {
		case squash:
			path = prefix // its keys are the enclosing section's
		case prefix != "":
			path = prefix + "." + name
		}
		if s, ok := v.Field(i).Interface().(validator); ok {
			out = append(out, conf.Within(path, s.Validate())...)
		}
		out = append(out, sections(v.Field(i), path)...)
	}
	return out
}

// ParsePace parses a replay pace: "instant" (factor 0: no waiting),
// "original" (factor 1: the recorded gaps) or "<N>x" such as "10x" or
// "0.5x" (the recorded gaps divided by N).
func ParsePace(s string) (factor float64, err error) {
	switch s {
	case "instant":
		return 0, nil
	case "original":
		return 1, nil
	}
	num, ok := strings.CutSuffix(s, "x")
	if ok && num != "" && strings.Trim(num, "0123456789.") == "" {
		f, perr := strconv.ParseFloat(num, 64)
		if perr == nil && f > 0 {
			return f, nil
		}
	}
	return 0, fmt.Errorf("%q is not instant, original or <N>x with N > 0 (e.g. 10x)", s)
}
