package procwrap

import (
	"os"
	"slices"
	"strings"
)

// verbosityFlags are llama.cpp's flags that set the log verbosity, in any
// era; "-lv=N" style values are matched on the part before "=".
var verbosityFlags = []string{"-v", "--verbose", "--log-verbose", "-lv", "--log-verbosity", "--verbosity"}

// hasVerbosityFlag reports whether args (without the program name) already
// choose a log verbosity.
func hasVerbosityFlag(args []string) bool {
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if slices.Contains(verbosityFlags, name) {
			return true
		}
	}
	return false
}

// commandLine returns the argv to run: command, plus "-v" when addVerbose
// is set and no verbosity flag is present.
func commandLine(command []string, addVerbose bool) []string {
	argv := slices.Clone(command)
	if addVerbose && !hasVerbosityFlag(argv[1:]) {
		argv = append(argv, "-v")
	}
	return argv
}

// environment returns base (os.Environ() when nil) plus extra, plus
// GGML_HRX_HOST_WEIGHT_TRACE=1 when setTrace is set and neither defines it.
// A variable set more than once keeps its last value (as exec does).
func environment(base, extra []string, setTrace bool) []string {
	if base == nil {
		base = os.Environ()
	}
	env := make([]string, 0, len(base)+len(extra)+1)
	env = append(env, base...)
	env = append(env, extra...)
	if setTrace && !hasEnv(env, TraceEnv) {
		env = append(env, TraceEnv+"=1")
	}
	return env
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); ok && k == key {
			return true
		}
	}
	return false
}

// shellQuote joins argv into one line a POSIX shell would split back into
// the same words.
func shellQuote(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(quoteWord(a))
	}
	return b.String()
}

func quoteWord(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./_-", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
