package config

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/gttsplit/gttsplit/pkg/conf"
)

// checker is a pointer to a config struct that can list its problems.
type checker interface {
	problems() []*conf.FieldError
}

// load fills cfg, which holds the defaults, from the file at path, the
// environment and the set flags of fs, then validates it.
func load(path string, fs *pflag.FlagSet, cfg checker) error {
	ls := leaves(cfg)
	v := viper.New()
	for _, l := range ls {
		// Every leaf gets a default: this is what lets AutomaticEnv values
		// reach Unmarshal, and what defines the set of known keys.
		v.SetDefault(l.Key, defaultValue(l.value))
		if len(l.EnvAliases) > 0 {
			// AutomaticEnv looks up l.Env first; the aliases come after it.
			if err := v.BindEnv(append([]string{l.Key, l.Env}, l.EnvAliases...)...); err != nil {
				return fmt.Errorf("bind env %s: %w", l.Key, err)
			}
		}
	}
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	if fs != nil {
		for _, l := range ls {
			if l.Flag == "" {
				continue
			}
			// viper uses a bound flag only when it was set (Changed).
			if f := fs.Lookup(l.Flag); f != nil {
				if err := v.BindPFlag(l.Key, f); err != nil {
					return fmt.Errorf("bind flag --%s: %w", l.Flag, err)
				}
			}
		}
	}
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			// Not an invalid configuration: there is none to read.
			return fmt.Errorf("%w: --config %s: %w", ErrConfigFile, path, pathCause(err))
		}
		v.SetConfigFile(path)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return fmt.Errorf("%w: read config %s: %w", ErrInvalid, path, err)
		}
	}

	found := unknownKeys(v.AllKeys(), ls)
	hook := viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		mapstructure.DecodeHookFuncType(durationHook),
		mapstructure.DecodeHookFuncType(wholeNumberHook),
	))
	if err := v.UnmarshalExact(cfg, hook); err != nil {
		found = append(found, decodeProblems(err, len(found) > 0)...)
	}
	bad := map[string]bool{}
	for _, p := range found {
		bad[p.Key] = true
	}
	for _, p := range cfg.problems() {
		if !bad[p.Key] { // a value that did not decode is reported once
			found = append(found, p)
		}
	}
	found = append(found, placeholders(ls, bad)...)
	rank := keyRank(ls)
	slices.SortStableFunc(found, func(a, b *conf.FieldError) int { return rank(a.Key) - rank(b.Key) })
	return invalid(found)
}

// defaultValue is the value given to viper.SetDefault for a leaf.
func defaultValue(v reflect.Value) any {
	if v.Type() == secretType {
		return v.String()
	}
	return v.Interface()
}

// durationHook decodes strings such as "100ms" into time.Duration and
// rejects bare numbers, which would silently mean nanoseconds.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType || from == durationType {
		return data, nil
	}
	switch from.Kind() {
	case reflect.String:
		s := strings.TrimSpace(reflect.ValueOf(data).String())
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration (e.g. \"100ms\", \"5s\", \"2m\")", s)
		}
		return d, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return nil, fmt.Errorf("duration %v needs a unit (e.g. \"100ms\", \"5s\", \"2m\")", data)
	}
	return data, nil
}

// wholeNumberHook rejects a fractional number for an integer key, which
// would otherwise be truncated.
func wholeNumberHook(from, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
	default:
		return data, nil
	}
	if from.Kind() != reflect.Float32 && from.Kind() != reflect.Float64 {
		return data, nil
	}
	if f := reflect.ValueOf(data).Float(); f != math.Trunc(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("%v is not a whole number", data)
	}
	return data, nil
}

// unknownKeys reports every key viper holds that is no leaf of the config,
// with the nearest known key as a suggestion.
func unknownKeys(keys []string, ls []leaf) []*conf.FieldError {
	known := map[string]bool{}
	sections := map[string]bool{}
	for _, l := range ls {
		known[l.Key] = true
		for k := l.Key; strings.Contains(k, "."); {
			k = k[:strings.LastIndex(k, ".")]
			sections[k] = true
		}
	}
	var p conf.Problems
	slices.Sort(keys)
	for _, k := range keys {
		switch {
		case known[k]:
		case sections[k]:
			// An empty section ("nats:" with its keys commented out) is
			// fine; a section given a value fails to decode, which reports it.
		default:
			if s := suggest(k, ls); s != "" {
				p.Add(k, "unknown key (did you mean %s?)", s)
			} else {
				p.Add(k, "unknown key")
			}
		}
	}
	return p
}

// suggest returns the known key closest to an unknown one, or "".
func suggest(key string, ls []leaf) string {
	best, bestD := "", 4 // at most three edits away
	for _, l := range ls {
		if d := editDistance(key, l.Key); d < bestD {
			best, bestD = l.Key, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// decodeProblems turns mapstructure's decode errors into key problems. The
// "has invalid keys" errors are dropped when unknownKeys has reported them.
func decodeProblems(err error, unknownReported bool) []*conf.FieldError {
	var p conf.Problems
	var walk func(error)
	walk = func(e error) {
		switch x := e.(type) {
		case *mapstructure.DecodeError:
			inner := x.Unwrap()
			if j, ok := inner.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					walk(e)
				}
				return
			}
			if unknownReported && strings.HasPrefix(inner.Error(), "has invalid keys") {
				return
			}
			key := x.Name()
			if key == "" {
				key = "config"
			}
			var pe *mapstructure.ParseError
			if errors.As(inner, &pe) {
				inner = fmt.Errorf("cannot parse %q as %s", fmt.Sprint(pe.Value), typeName(pe.Expected))
			}
			p = append(p, &conf.FieldError{Key: key, Err: inner})
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			if u := x.Unwrap(); u != nil {
				walk(u)
				return
			}
			p = append(p, &conf.FieldError{Key: "config", Err: e})
		default:
			p = append(p, &conf.FieldError{Key: "config", Err: e})
		}
	}
	walk(err)
	return p
}

// keyRank orders keys as the struct does, for sorting problems; a key that
// is unknown sorts with its section.
func keyRank(ls []leaf) func(key string) int {
	return func(key string) int {
		for k := key; k != ""; {
			i := slices.IndexFunc(ls, func(l leaf) bool { return l.Key == k || strings.HasPrefix(l.Key, k+".") })
			if i >= 0 {
				return i
			}
			j := strings.LastIndex(k, ".")
			if j < 0 {
				break
			}
			k = k[:j]
		}
		return len(ls)
	}
}

// pathCause drops the operation and path of a *fs.PathError.
func pathCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// placeholders reports each secret set to a placeholder a deploy file
// ships (conf.Secret.Placeholder), naming it and where it comes from: a
// deployment that was never given its own would let in whoever read the
// repository.
func placeholders(ls []leaf, bad map[string]bool) []*conf.FieldError {
	var p conf.Problems
	for _, l := range ls {
		if l.value.Type() != secretType || bad[l.Key] {
			continue
		}
		if v := conf.Secret(l.value.String()).Placeholder(); v != "" {
			p.Add(l.Key, "%q is the placeholder the deploy files ship, not a secret: choose one (%s)", v, strings.Join(append([]string{l.Env}, l.EnvAliases...), " or "))
		}
	}
	return p
}
