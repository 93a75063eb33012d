// Package config holds the typed configuration of the two gttsplit binaries:
// [Collector] for the collector and [Aggregator] for the aggregator.
//
// # Keys
//
// Every setting is a leaf of one of the two structs. Its key is the dotted
// path of mapstructure tags (lower_snake_case, e.g. "nats.connect_timeout").
// The same key is a YAML key in a config file, an environment variable
// GTTSPLIT_<KEY> with dots as underscores (GTTSPLIT_NATS_CONNECT_TIMEOUT) and,
// for some keys, a command-line flag (struct tag "flag", e.g. --nats-url).
// A field's "desc" tag is its one-line description. [Keys] lists every key
// with its value, environment variable and flag; [SampleYAML] and
// [MarkdownTable] render that list for configs/ and the README.
//
// Durations are written with a unit ("100ms", "5s", "2m"); a bare number is
// an error, not nanoseconds.
//
// # Precedence
//
// [LoadCollector] and [LoadAggregator] resolve each key in this order, the
// first that is present wins:
//
//  1. a command-line flag that was explicitly set ([pflag.Flag.Changed]),
//  2. the environment variable (an empty variable counts as unset),
//  3. the YAML config file, when a path is given,
//  4. the default from [DefaultCollector] or [DefaultAggregator], the only
//     place defaults are written.
//
// A key in the file that no struct field has (a typo) is an error.
//
// # Validation
//
// Validate reports every problem at once, joined with [errors.Join]. Each
// problem is a [*FieldError] whose message starts with the key path
// ("nats.url: ..."), and the whole error wraps [ErrInvalid], so main can
// exit with status 2 when errors.Is(err, ErrInvalid). Load errors (an
// unreadable or malformed file, an unknown key, a value of the wrong type)
// are reported the same way, together with the validation problems.
// Validation is pure: it never touches the network or the file system.
//
// # Secrets
//
// Passwords and tokens have the type [Secret], whose String, GoString,
// MarshalText and MarshalJSON print "[redacted]", so a config dumped with
// fmt, encoding/json, YAML or a logger never shows them. [Secret.Reveal]
// returns the value for the one place that needs it. No secret has a flag:
// they come from the environment or a file.
package config
