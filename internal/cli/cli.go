// Package cli holds what both binaries' command lines share: exit codes,
// the root logger, the version string, and the --config flag.
package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/gttsplit/gttsplit/pkg/conf"
)

// Exit codes (the README lists them).
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
	// ExitTempFail (EX_TEMPFAIL): the work is not lost but not done
	// either, e.g. events left in the spool for a later run to deliver.
	ExitTempFail = 75
)

// ExitError carries the exit code a command wants.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Usage wraps err as a usage error (exit 2).
func Usage(err error) error { return &ExitError{Code: ExitUsage, Err: err} }

// Code maps an error to an exit code: ExitError's own, 2 for an invalid
// config, 1 otherwise.
func Code(err error) int {
	var e *ExitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &e):
		return e.Code
	case errors.Is(err, conf.ErrInvalid), errors.Is(err, conf.ErrConfigFile):
		return ExitUsage
	}
	return ExitFailure
}

// Execute runs a cobra root command and returns the process exit code. Usage
// errors (unknown flags, wrong arguments) exit 2; the error is printed once,
// to stderr, prefixed with the program name.
func Execute(root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	root.SilenceErrors = true
	root.SilenceUsage = true
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return Usage(fmt.Errorf("%w (see '%s --help')", err, c.CommandPath()))
	})
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	code := Code(err)
	var e *ExitError
	if errors.As(err, &e) && e.Err == nil {
		return code // the command already said why
	}
	msg := strings.TrimSpace(err.Error())
	if strings.HasPrefix(msg, "unknown command") {
		code = ExitUsage // cobra's own error for a mistyped subcommand
		msg = unknownCommand(root, msg)
	}
	fmt.Fprintf(stderr, "%s: %s\n", root.Name(), msg)
	return code
}

// unknownCommand rewrites cobra's error for a mistyped subcommand
// ("unknown command "pasre" for "aggregator"", then its suggestions on
// lines of their own) as one line that names the suggestions and where
// the commands are listed.
func unknownCommand(root *cobra.Command, msg string) string {
	first, rest, _ := strings.Cut(msg, "\n")
	var sugg []string
	if _, list, ok := strings.Cut(rest, "Did you mean this?"); ok {
		sugg = strings.Fields(list)
	}
	if len(sugg) > 0 {
		first += " (did you mean " + strings.Join(sugg, " or ") + "?)"
	}
	return fmt.Sprintf("%s (see '%s --help')", first, root.CommandPath())
}

// Args wraps a cobra positional-argument check so a violation exits 2.
func Args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return Usage(fmt.Errorf("%w (see '%s --help')", err, cmd.CommandPath()))
		}
		return nil
	}
}

// LogConfig is the log.* keys: the root logger that main builds. An empty
// Level is info, an empty Format console.
type LogConfig struct {
	Level  string `mapstructure:"level" flag:"log-level" desc:"minimum log level: debug, info, warn or error"`
	Format string `mapstructure:"format" desc:"log output format: console or json"`
}

// DefaultLogConfig returns the defaults of the log.* keys.
func DefaultLogConfig() LogConfig { return LogConfig{Level: "info", Format: "console"} }

// Validate reports every problem of c (conf.FieldError, keys relative to
// log.*).
func (c LogConfig) Validate() error {
	var p conf.Problems
	p.OneOf("level", c.Level, "debug", "info", "warn", "error")
	p.OneOf("format", c.Format, "console", "json")
	return p.Err()
}

// Logger builds the process's only root logger, on stderr, at level
// (LogConfig.Level) in format (LogConfig.Format).
func Logger(w io.Writer, level, format string) zerolog.Logger {
	return logger(w, level, format, nil)
}

// QuietLogger is Logger for a command that runs the fleet's machinery for
// one user on one machine (quickstart): an INFO record is written at
// DEBUG unless its component is one of keep (a record without a component
// counts as ""), so the partition mechanics of a one-member fleet (taken,
// handed over, member ids, lease revisions) and the plumbing's start and
// stop lines show only at --log-level debug. The WARN records of the
// components in hush are DEBUG too (a one-member fleet that is "not
// ready" while it takes its partitions on a slow machine). Errors are
// untouched.
func QuietLogger(w io.Writer, level, format string, keep []string, hush ...string) zerolog.Logger {
	lvl := parseLevel(level)
	return logger(w, level, format, func(next io.Writer) io.Writer {
		return &demoter{next: next, show: lvl <= zerolog.DebugLevel, keep: keep, hush: hush}
	})
}

func parseLevel(level string) zerolog.Level {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		lvl = zerolog.InfoLevel
	}
	return lvl
}

// logger builds a root logger; filter, if set, sits between the JSON
// records and the output (the console writer's, in console format).
func logger(w io.Writer, level, format string, filter func(io.Writer) io.Writer) zerolog.Logger {
	// Milliseconds in both formats (zerolog's default cuts to seconds);
	// durations as strings with units (100ms, not 100).
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	zerolog.DurationFieldFormat = zerolog.DurationFormatString
	if format != "json" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !IsTerminal(w)}
	}
	if filter != nil {
		w = filter(w)
	}
	return zerolog.New(w).Level(parseLevel(level)).With().Timestamp().Logger()
}

// demoter rewrites INFO records (one JSON object a Write) of the
// components not in keep, and WARN records of those in hush, as DEBUG
// ones, and drops them unless show.
type demoter struct {
	next io.Writer
	show bool
	keep []string
	hush []string
}

var (
	infoLevel  = []byte(`"level":"info"`)
	warnLevel  = []byte(`"level":"warn"`)
	debugLevel = []byte(`"level":"debug"`)
)

func (d *demoter) Write(p []byte) (int, error) {
	level := infoLevel
	if !bytes.Contains(p, infoLevel) {
		if len(d.hush) == 0 || !bytes.Contains(p, warnLevel) {
			return d.next.Write(p)
		}
		level = warnLevel
	}
	var rec struct {
		Level     string `json:"level"`
		Component string `json:"component"`
	}
	if err := json.Unmarshal(p, &rec); err != nil {
		return d.next.Write(p)
	}
	demote := rec.Level == "info" && !slices.Contains(d.keep, rec.Component) ||
		rec.Level == "warn" && slices.Contains(d.hush, rec.Component)
	if !demote {
		return d.next.Write(p)
	}
	if !d.show {
		return len(p), nil
	}
	if _, err := d.next.Write(bytes.Replace(p, level, debugLevel, 1)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// WarnUnknownEnv logs a WARN line, with the logger Logger builds from lc,
// for each problem of unknown (config.UnknownEnv of the environment): a
// misspelt GTTSPLIT_* variable is ignored, so a command says so at start;
// `validate` fails on it.
func WarnUnknownEnv(w io.Writer, lc LogConfig, unknown []*conf.FieldError) {
	if len(unknown) == 0 {
		return
	}
	log := Logger(w, lc.Level, lc.Format)
	for _, p := range unknown {
		log.Warn().Str("variable", p.Key).Msg("environment variable ignored: " + p.Err.Error())
	}
}

// IsTerminal reports whether v (a reader or writer) is a terminal. A
// character device that is not a terminal (/dev/null) is not one.
func IsTerminal(v any) bool {
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// InForeground reports whether the process is in the foreground process
// group of its controlling terminal, where a typed Ctrl-C reaches every
// process of the group. Without a controlling terminal it is false.
func InForeground() bool {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false
	}
	defer tty.Close()
	fg, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && fg == unix.Getpgrp()
}

// stamped is set at link time (-ldflags "-X ...cli.stamped=v1.2.3") by
// builds that name their version, such as the Docker image's.
var stamped string

// Version is the build's version: the stamped one, the module version, or
// the VCS revision the binary was built from (with "+dirty"), or "devel".
func Version() string {
	if stamped != "" {
		return stamped
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return "devel"
	}
	return "devel-" + rev + dirty
}

// NewValidate returns the `validate` command of a binary: it loads the
// configuration with load (defaults, --config, GTTSPLIT_* environment) and
// prints "config ok", or fails with every problem (exit 2).
func NewValidate(binary string, stdout io.Writer, load func(*cobra.Command) error) *cobra.Command {
	return &cobra.Command{
		Use:   "validate [--config FILE]",
		Short: "Check a configuration without touching the network",
		Long: `validate loads the configuration (defaults, --config file, GTTSPLIT_* environment)
and checks it. It exits 0 when it is valid, and 2 listing every problem with
its key path (an unknown key is a problem).`,
		Example: fmt.Sprintf("  %s validate --config configs/%s.yaml", binary, binary),
		Args:    Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := load(cmd); err != nil {
				return err
			}
			fmt.Fprintln(stdout, "config ok")
			return nil
		},
	}
}
