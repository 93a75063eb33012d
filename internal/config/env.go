package config

import (
	"os"
	"slices"
	"strings"

	"github.com/gttsplit/gttsplit/pkg/conf"
)

// EnvExtra are the GTTSPLIT_* variables the project reads that set no key:
// the tests' (the browser, screenshots, the fleet and conservation
// harnesses, the fdinfo test's child, the measuring launcher of
// internal/perftest, the leak check's child of internal/natstest), the
// benchmarks' and the image build's. UnknownEnv
// lets them pass; a name ending in "_" is a prefix.
// TestEnvExtraIsComplete keeps the list in step with the repository.
var EnvExtra = []string{
	"GTTSPLIT_BROWSER", "GTTSPLIT_SCREENSHOTS",
	"GTTSPLIT_CONSERVATION", "GTTSPLIT_CONSERVATION_SEED",
	"GTTSPLIT_FLEET", "GTTSPLIT_FLEET_",
	"GTTSPLIT_BENCH_",
	"GTTSPLIT_FDINFO_TESTCHILD",
	"GTTSPLIT_PERFTEST_CHILD",
	"GTTSPLIT_NATSTEST_LEFT",
	"GTTSPLIT_VERSION",
}

// envNames are the variables that set a key of either binary (a shell or
// an env file may serve both: the other binary's are no typo), sorted.
var envNames = func() []string {
	seen := map[string]bool{}
	for _, cfg := range []any{DefaultCollector(), DefaultAggregator()} {
		for _, l := range leaves(cfg) {
			seen[l.Env] = true
			for _, a := range l.EnvAliases {
				seen[a] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}()

// UnknownEnv returns a problem for each GTTSPLIT_* variable of environ
// ("NAME=value", as os.Environ gives them) that sets no key of either
// binary and is not in EnvExtra (an empty one is unset, as a key's is): a misspelt variable is otherwise
// silently ignored (viper reads only the variables of the keys it knows).
// Each problem's key is the variable, with the variable it probably means.
func UnknownEnv(environ []string) []*conf.FieldError {
	var p conf.Problems
	var seen []string
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if value == "" || !strings.HasPrefix(name, EnvPrefix+"_") || slices.Contains(seen, name) || knownEnv(name) {
			continue
		}
		seen = append(seen, name)
		if s := nearestEnv(name); s != "" {
			p.Add(name, "sets no key (did you mean %s?)", s)
		} else {
			p.Add(name, "sets no key (the variables are GTTSPLIT_<KEY>, dots as underscores: docs/configuration.md)")
		}
	}
	slices.SortFunc(p, func(a, b *conf.FieldError) int { return strings.Compare(a.Key, b.Key) })
	return p
}

// CheckEnv is what `validate` checks beyond a load: err, the error of
// LoadCollector or LoadAggregator (or nil), with a problem for each
// variable of UnknownEnv(environ) added to its list.
func CheckEnv(err error, environ []string) error {
	unknown := UnknownEnv(environ)
	switch {
	case len(unknown) == 0:
		return err
	case err == nil:
		return invalid(unknown)
	case len(Problems(err)) > 0:
		return invalid(append(Problems(err), unknown...))
	}
	return err // the file could not be read: that alone
}

// UnknownEnvNow is UnknownEnv of the process's environment.
func UnknownEnvNow() []*conf.FieldError { return UnknownEnv(os.Environ()) }

func knownEnv(name string) bool {
	if _, ok := slices.BinarySearch(envNames, name); ok {
		return true
	}
	return slices.ContainsFunc(EnvExtra, func(e string) bool {
		return e == name || strings.HasSuffix(e, "_") && strings.HasPrefix(name, e)
	})
}

// nearestEnv returns the variable of a key nearest to name (at most three
// edits away), or "".
func nearestEnv(name string) string {
	best, bestD := "", 4
	for _, n := range envNames {
		if d := editDistance(name, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}
