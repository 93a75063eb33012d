// Package config composes and loads the configuration of the two gttsplit
// binaries: [Collector] for the collector and [Aggregator] for the
// aggregator.
//
// # Sections
//
// Each binary's struct is a list of key sections, and each section is a
// struct declared by the package that reads it, with its keys' tags, its
// defaults and its Validate (see pkg/conf):
//
//	log.*                 cli.LogConfig            internal/cli
//	nats.*                bus.Config               internal/bus (both binaries)
//	spool.*               bus.SpoolConfig          internal/bus
//	sample.*              fdinfo.Config            pkg/sources/fdinfo
//	wrap.*                procwrap.Config          pkg/sources/procwrap
//	batch.*               sources.BatchConfig      pkg/sources
//	consumer.*            Consumer (squashed:)
//	  durable, lease_ttl  fleet.Config             internal/fleet
//	  partitions          bus.Partitioning         internal/bus
//	  ack_wait, ...       runtable.ConsumerConfig  internal/runtable
//	store.*               runtable.StoreConfig     internal/runtable
//	split.*               split.Config             pkg/split
//	sinks.file.*          filesink.Config          pkg/sinks/filesink
//	sinks.json.*          jsonsink.Config          pkg/sinks/jsonsink
//	sinks.issue_comment.* commentsink.Config       pkg/sinks/commentsink
//	sinks.retry.*         sinks.RetryPolicy        pkg/sinks
//
// The keys of the commands themselves are declared here, on the binary's
// struct: the root keys (a collector run's identity, out, format,
// shutdown_timeout, ...), attach.*, replay.*, embedded.*, http.* and
// sinks.max_pending. This package only adds to a section what depends on
// the binary: a shared section's field may name keys the binary does not
// have (omit:"max_in_flight,ack_timeout") and word a key for it
// (desc.url:"...": what an empty nats.url means), and the binary's Validate
// checks what spans sections (embedded.listen beyond loopback needs
// nats.token or nats.user). A section whose keys several packages read is
// composed of their structs, each a field tagged mapstructure:",squash"
// (its keys are the section's own): consumer.* is Consumer.
//
// To add a key, add a field to its section's struct, tagged with its key,
// its description and (if it has one) its flag, give it a default in the
// section's default function and check it in the section's Validate; then
// `go test ./internal/config -update` writes it into configs/*.yaml and the
// key tables of docs/configuration.md. Nothing else lists keys.
//
// # Keys
//
// Every setting is a leaf of one of the two structs. Its key is the dotted
// path of mapstructure tags (lower_snake_case, e.g. "nats.connect_timeout").
// The same key is a YAML key in a config file, an environment variable
// GTTSPLIT_<KEY> with dots as underscores (GTTSPLIT_NATS_CONNECT_TIMEOUT) and,
// for some keys, a command-line flag (struct tag "flag", e.g. --nats-url).
// A field's "desc" tag is its one-line description; a field tagged "-" is
// no key. [Keys] lists every key with its value, environment variable and
// flag; [SampleYAML] and [MarkdownTable] render that list for configs/ and
// docs/configuration.md.
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
//  4. the default from [DefaultCollector] or [DefaultAggregator], which
//     take each section's from its package.
//
// A key in the file that no struct field has (a typo) is an error.
//
// # Validation
//
// Validate reports every problem at once, joined with [errors.Join]: each
// section's own, prefixed with the section's key path, and the binary's.
// Each problem is a [*conf.FieldError] whose message starts with the key
// path ("nats.url: ..."), and the whole error wraps [ErrInvalid], so main
// can exit with status 2 when errors.Is(err, ErrInvalid). Load errors (an
// unreadable or malformed file, an unknown key, a value of the wrong type)
// are reported the same way, together with the validation problems.
// Validation is pure: it never touches the network or the file system.
//
// # Secrets
//
// Passwords and tokens have the type [conf.Secret], whose String, GoString,
// MarshalText and MarshalJSON print "[redacted]", so a config dumped with
// fmt, encoding/json, YAML or a logger never shows them. Reveal returns
// the value for the one place that needs it. No secret has a flag: they
// come from the environment or a file.
package config
