package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/fleet"
	"github.com/gttsplit/gttsplit/pkg/conf"
	"github.com/gttsplit/gttsplit/pkg/sinks/commentsink"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

// problemKeys returns the key of every problem in err, in order.
func problemKeys(err error) []string {
	var keys []string
	for _, p := range Problems(err) {
		keys = append(keys, p.Key)
	}
	return keys
}

func TestDefaultsAreValid(t *testing.T) {
	t.Parallel()
	require.NoError(t, DefaultCollector().Validate())
	require.NoError(t, DefaultAggregator().Validate())
	c, err := LoadCollector("", nil)
	require.NoError(t, err)
	require.Equal(t, DefaultCollector(), c)
	a, err := LoadAggregator("", nil)
	require.NoError(t, err)
	require.Equal(t, DefaultAggregator(), a)
}

func TestEnvironmentOverrides(t *testing.T) {
	t.Setenv("GTTSPLIT_NATS_URL", "nats://broker.example:4222")
	t.Setenv("GTTSPLIT_SAMPLE_INTERVAL", "250ms")
	t.Setenv("GTTSPLIT_WRAP_ADD_VERBOSE", "false")
	t.Setenv("GTTSPLIT_SPOOL_MAX_BYTES", "1048576")
	t.Setenv("GTTSPLIT_NATS_TLS_CA_FILE", "ca.pem")
	t.Setenv("GTTSPLIT_SPLIT_UNATTRIBUTED_THRESHOLD_PCT", "12.5")
	t.Setenv("GTTSPLIT_SINKS_RETRY_MAX_BACKOFF", "90s")

	c, err := LoadCollector("", nil)
	require.NoError(t, err)
	want := DefaultCollector()
	want.NATS.URL = "nats://broker.example:4222"
	want.Sample.Interval = 250 * time.Millisecond
	want.Wrap.AddVerbose = false
	want.Spool.MaxBytes = 1 << 20
	want.NATS.TLS.CAFile = "ca.pem"
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("collector (-want +got):\n%s", diff)
	}

	a, err := LoadAggregator("", nil)
	require.NoError(t, err)
	wantA := DefaultAggregator()
	wantA.NATS.URL = "nats://broker.example:4222"
	wantA.NATS.TLS.CAFile = "ca.pem"
	wantA.Split.UnattributedThresholdPct = 12.5
	wantA.Sinks.Retry.Max = 90 * time.Second
	if diff := cmp.Diff(wantA, a); diff != "" {
		t.Errorf("aggregator (-want +got):\n%s", diff)
	}
}

func TestEnvironmentValueIsValidated(t *testing.T) {
	t.Setenv("GTTSPLIT_SAMPLE_INTERVAL", "soon")
	t.Setenv("GTTSPLIT_NATS_MAX_IN_FLIGHT", "0")
	_, err := LoadCollector("", nil)
	require.ErrorIs(t, err, ErrInvalid)
	require.Equal(t, []string{"nats.max_in_flight", "sample.interval"}, problemKeys(err))
}

// TestPrecedence sets keys at every layer and checks that a set flag beats
// the environment, the environment beats the file and the file beats the
// default, and that a declared but unset flag changes nothing.
func TestPrecedence(t *testing.T) {
	path := writeFile(t, `
lane: file-lane
run_id: file-run
issue: file/repo#1
sample:
  interval: 200ms
  proc_root: /file/proc
attach:
  pid: 7
`)
	t.Setenv("GTTSPLIT_LANE", "env-lane")
	t.Setenv("GTTSPLIT_RUN_ID", "env-run")
	t.Setenv("GTTSPLIT_SAMPLE_INTERVAL", "300ms")
	t.Setenv("GTTSPLIT_SOURCE_DIR", "env-src")

	fs := pflag.NewFlagSet("collector", pflag.ContinueOnError)
	require.NoError(t, AddFlags(fs, DefaultCollector()))
	require.NoError(t, fs.Parse([]string{"--lane=flag-lane", "--interval", "400ms", "--pid=42", "--out", "flag-out"}))

	c, err := LoadCollector(path, fs)
	require.NoError(t, err)
	got := map[string]any{
		"lane":             c.Lane,
		"run_id":           c.RunID,
		"issue":            c.Issue,
		"source_dir":       c.SourceDir,
		"out":              c.Out,
		"sample.interval":  c.Sample.Interval,
		"sample.proc_root": c.Sample.ProcRoot,
		"attach.pid":       c.Attach.PID,
		"log.level":        c.Log.Level,
	}
	want := map[string]any{
		"lane":             "flag-lane",                  // flag > env > file
		"run_id":           "env-run",                    // env > file; --run-id declared, not set
		"issue":            "file/repo#1",                // file > default; --issue declared, not set
		"source_dir":       "env-src",                    // env > default
		"out":              "flag-out",                   // flag > default
		"sample.interval":  400 * time.Millisecond,       // duration flag > env > file
		"sample.proc_root": "/file/proc",                 // file > declared flag default
		"attach.pid":       42,                           // int flag > file
		"log.level":        DefaultCollector().Log.Level, // nothing set
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("precedence (-want +got):\n%s", diff)
	}
}

func TestAggregatorFlags(t *testing.T) {
	t.Parallel()
	fs := pflag.NewFlagSet("aggregator", pflag.ContinueOnError)
	require.NoError(t, AddFlags(fs, DefaultAggregator(), "threshold", "comment-dry-run", "http", "format", "idle-timeout"))
	require.Nil(t, fs.Lookup("store"), "only the named flags are declared")
	require.NoError(t, fs.Parse([]string{"--threshold=2.5", "--comment-dry-run", "--http=", "--format=json", "--idle-timeout=90s"}))
	a, err := LoadAggregator("", fs)
	require.NoError(t, err)
	require.Equal(t, 2.5, a.Split.UnattributedThresholdPct)
	require.True(t, a.Sinks.IssueComment.DryRun)
	require.Empty(t, a.HTTP.Listen, "an explicitly empty flag overrides the default")
	require.Equal(t, "json", a.Format)
	require.Equal(t, 90*time.Second, a.IdleTimeout)

	// A flag value is validated like any other.
	fs = pflag.NewFlagSet("aggregator", pflag.ContinueOnError)
	require.NoError(t, AddFlags(fs, DefaultAggregator()))
	require.NoError(t, fs.Parse([]string{"--threshold=150", "--format=html"}))
	_, err = LoadAggregator("", fs)
	require.ErrorIs(t, err, ErrInvalid)
	require.Equal(t, []string{"split.unattributed_threshold_pct", "format"}, problemKeys(err))
}

func TestAddFlagsErrors(t *testing.T) {
	t.Parallel()
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	require.ErrorContains(t, AddFlags(fs, DefaultCollector(), "no-such-flag"), "--no-such-flag")
	require.NoError(t, AddFlags(fs, DefaultCollector(), "lane"))
	require.ErrorContains(t, AddFlags(fs, DefaultCollector(), "lane"), "already defined")

	fs = pflag.NewFlagSet("x", pflag.ContinueOnError)
	require.NoError(t, AddFlags(fs, DefaultCollector()))
	f := fs.Lookup("interval")
	require.Equal(t, "duration", f.Value.Type())
	require.Equal(t, "100ms", f.DefValue)
	require.Contains(t, f.Usage, "GTTSPLIT_SAMPLE_INTERVAL")
}

// TestFlagNames checks the flags against the command-line table of the
// product brief, so a renamed tag cannot silently change the CLI.
func TestFlagNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, map[string]string{
		"log-level":  "log.level",
		"host":       "host",
		"lane":       "lane",
		"run-id":     "run_id",
		"issue":      "issue",
		"control-of": "control_of",
		"source-dir": "source_dir",
		"out":        "out",
		"http":       "http.listen",
		"nats-url":   "nats.url",
		"spool-dir":  "spool.dir",
		"interval":   "sample.interval",
		"proc-root":  "sample.proc_root",
		"pid":        "attach.pid",
		"log":        "attach.log",
		"state-dir":  "attach.state_dir",
		"pace":       "replay.pace",
	}, FlagKeys(DefaultCollector()))
	require.Equal(t, map[string]string{
		"log-level":         "log.level",
		"nats-url":          "nats.url",
		"embedded-listen":   "embedded.listen",
		"store":             "embedded.store",
		"idle-timeout":      "idle_timeout",
		"http":              "http.listen",
		"threshold":         "split.unattributed_threshold_pct",
		"file-dir":          "sinks.file.dir",
		"change-thresholds": "lane_changes.thresholds",
		"json-dir":          "sinks.json.dir",
		"comment-api":       "sinks.issue_comment.api",
		"comment-issue":     "sinks.issue_comment.default_issue",
		"comment-dry-run":   "sinks.issue_comment.dry_run",
		"format":            "format",
	}, FlagKeys(DefaultAggregator()))
}

// TestStructTags checks what the reflection walk relies on: every field is
// tagged, keys are lower_snake_case, every key is described, and no secret
// has a flag.
func TestStructTags(t *testing.T) {
	t.Parallel()
	keyRE := regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)
	for _, cfg := range []any{DefaultCollector(), DefaultAggregator()} {
		var check func(typ reflect.Type)
		check = func(typ reflect.Type) {
			for i := range typ.NumField() {
				f := typ.Field(i)
				require.NotEmptyf(t, f.Tag.Get("mapstructure"), "%s.%s has no mapstructure tag", typ.Name(), f.Name)
				require.Falsef(t, f.Anonymous, "%s.%s is embedded; use a named field", typ.Name(), f.Name)
				if f.Type.Kind() == reflect.Struct {
					check(f.Type)
				}
			}
		}
		check(reflect.TypeOf(cfg))
		keys := Keys(cfg)
		require.NotEmpty(t, keys)
		seen := map[string]bool{}
		for _, k := range keys {
			require.Regexp(t, keyRE, k.Key)
			require.Falsef(t, seen[k.Key], "duplicate key %s", k.Key)
			seen[k.Key] = true
			require.NotEmptyf(t, k.Description, "%s has no desc tag", k.Key)
			require.Equal(t, "GTTSPLIT_"+strings.ToUpper(strings.ReplaceAll(k.Key, ".", "_")), k.Env)
			if k.Secret {
				require.Emptyf(t, k.Flag, "secret %s must not have a flag", k.Key)
			}
		}
	}
	require.Nil(t, Keys(42))
	require.Nil(t, Keys((*Collector)(nil)))
	require.Len(t, Keys(&Aggregator{}), len(Keys(DefaultAggregator())))
}

// TestAllProblemsAtOnce loads a file with a typo key and two invalid
// values and expects all three problems, each with its key path.
func TestAllProblemsAtOnce(t *testing.T) {
	t.Parallel()
	path := writeFile(t, `
log:
  level: verbose
nats:
  urll: nats://localhost:4222
sample:
  interval: fast
`)
	_, err := LoadCollector(path, nil)
	require.ErrorIs(t, err, ErrInvalid)
	require.Equal(t, []string{"log.level", "nats.urll", "sample.interval"}, problemKeys(err))
	msg := err.Error()
	for _, want := range []string{
		`log.level: "verbose" is not one of debug, info, warn, error`,
		`nats.urll: unknown key (did you mean nats.url?)`,
		`sample.interval: "fast" is not a duration`,
	} {
		require.Contains(t, msg, want)
	}
}

func TestAggregatorAllProblemsAtOnce(t *testing.T) {
	t.Parallel()
	path := writeFile(t, `
embedded:
  listen: localhost
split:
  trace_pattern: 'resident=[0-9]+ MiB'
sinks:
  issue_coment:
    api: https://api.github.com
`)
	_, err := LoadAggregator(path, nil)
	require.ErrorIs(t, err, ErrInvalid)
	require.Equal(t, []string{"embedded.listen", "split.trace_pattern", "sinks.issue_coment.api"}, problemKeys(err))
	require.Contains(t, err.Error(), "did you mean sinks.issue_comment.api?")
}

// The consumer.* section is composed of the sections of the packages that
// read its keys (squashed): each key still loads from a file and the
// environment into its reader's field, and a bad value is reported under
// its consumer.* key, once.
func TestConsumerSectionIsComposed(t *testing.T) {
	t.Setenv("GTTSPLIT_CONSUMER_LEASE_TTL", "20s")
	path := writeFile(t, `
consumer:
  durable: blue
  partitions: 8
  ack_wait: 30s
  lanes: gpu0
`)
	a, err := LoadAggregator(path, nil)
	require.NoError(t, err)
	want := DefaultAggregator()
	want.Consumer.Fleet = fleet.Config{Group: "blue", LeaseTTL: 20 * time.Second}
	want.Consumer.Stream.Partitions = 8
	want.Consumer.Table.AckWait, want.Consumer.Table.Lanes = 30*time.Second, "gpu0"
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("aggregator (-want +got):\n%s", diff)
	}
}

func TestConsumerSectionProblems(t *testing.T) {
	t.Parallel()
	_, err := LoadAggregator(writeFile(t, "consumer:\n  lease_ttl: 1s\n  partitions: 0\n  ack_wait: 30\n  durable: 'a b'\n"), nil)
	require.ErrorIs(t, err, ErrInvalid)
	require.Equal(t, []string{"consumer.durable", "consumer.lease_ttl", "consumer.partitions", "consumer.ack_wait"}, problemKeys(err))
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		body string
		keys []string
	}{
		"duration without unit":  {"sample:\n  interval: 100\n", []string{"sample.interval"}},
		"section given a value":  {"nats: localhost\n", []string{"nats"}},
		"wrong type":             {"nats:\n  max_in_flight: many\n", []string{"nats.max_in_flight"}},
		"unknown top-level key":  {"hots: gpu1\n", []string{"hots"}},
		"unknown section":        {"tracing:\n  enabled: true\n", []string{"tracing.enabled"}},
		"key below a leaf value": {"lane:\n  name: x\n", []string{"lane"}},
		"fraction for an int":    {"nats:\n  max_in_flight: 1.5\n", []string{"nats.max_in_flight"}},
		"null duration is unset": {"sample:\n  interval:\n", nil},
		"empty section is fine":  {"nats:\n# url: nats://localhost:4222\n", nil},
		"exponent int is fine":   {"spool:\n  max_bytes: 1e9\n", nil},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := LoadCollector(writeFile(t, tc.body), nil)
			if tc.keys == nil {
				require.NoError(t, err)
				want := DefaultCollector()
				want.Spool.MaxBytes = c.Spool.MaxBytes
				require.Equal(t, want, c, "the rest keeps its defaults")
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			keys := problemKeys(err)
			require.Subsetf(t, keys, tc.keys, "error: %v", err)
		})
	}

	_, err := LoadCollector(filepath.Join(t.TempDir(), "missing.yaml"), nil)
	require.ErrorIs(t, err, ErrConfigFile)
	require.ErrorIs(t, err, os.ErrNotExist)

	_, err = LoadAggregator(writeFile(t, "log: [unclosed\n"), nil)
	require.ErrorIs(t, err, ErrInvalid)
	require.Contains(t, err.Error(), "read config")
}

func TestValidate(t *testing.T) {
	t.Parallel()
	collector := []struct {
		name  string
		edit  func(*Collector)
		wants []string // problem keys; none means valid
	}{
		{"defaults", func(*Collector) {}, nil},
		{"log enums", func(c *Collector) { c.Log.Level, c.Log.Format = "trace", "xml" }, []string{"log.level", "log.format"}},
		{"empty lane", func(c *Collector) { c.Lane = "" }, []string{"lane"}},
		{"lane with dot", func(c *Collector) { c.Lane = "a.b" }, []string{"lane"}},
		{"run id with slash", func(c *Collector) { c.RunID = "../x" }, []string{"run_id"}},
		{"good run id", func(c *Collector) { c.RunID = "2024-05-01_run-7" }, nil},
		{"issue ok", func(c *Collector) { c.Issue = "ggml-org/llama.cpp#1234" }, nil},
		{"issue no number", func(c *Collector) { c.Issue = "owner/repo" }, []string{"issue"}},
		{"issue zero", func(c *Collector) { c.Issue = "owner/repo#0" }, []string{"issue"}},
		{"issue no owner", func(c *Collector) { c.Issue = "repo#3" }, []string{"issue"}},
		// One issue grammar for the key and the comment sink: a repo
		// named ".." would leave the API's path; a sink refused it only
		// when it was asked to post.
		{"issue repo dot-dot", func(c *Collector) { c.Issue = "acme/..#1" }, []string{"issue"}},
		{"issue number of 11 digits", func(c *Collector) { c.Issue = "acme/fleet#12345678901" }, []string{"issue"}},
		{"url list", func(c *Collector) { c.NATS.URL = "nats://a:4222, tls://b:4223,c:4224,localhost" }, nil},
		{"url scheme", func(c *Collector) { c.NATS.URL = "http://a:4222" }, []string{"nats.url"}},
		{"url port", func(c *Collector) { c.NATS.URL = "nats://a:99999" }, []string{"nats.url"}},
		{"url empty entry", func(c *Collector) { c.NATS.URL = "nats://a:4222," }, []string{"nats.url"}},
		{"token alone", func(c *Collector) { c.NATS.Token = "t" }, nil},
		{"user and password", func(c *Collector) { c.NATS.User, c.NATS.Password = "u", "p" }, nil},
		{"two auth methods", func(c *Collector) { c.NATS.Token, c.NATS.CredsFile = "t", "x.creds" }, []string{"nats"}},
		{"three auth methods", func(c *Collector) {
			c.NATS.Token, c.NATS.NKeySeedFile, c.NATS.User, c.NATS.Password = "t", "seed", "u", "p"
		}, []string{"nats"}},
		{"user without password", func(c *Collector) { c.NATS.User = "u" }, []string{"nats.password"}},
		{"password without user", func(c *Collector) { c.NATS.Password = "p" }, []string{"nats.user"}},
		{"tls cert without key", func(c *Collector) { c.NATS.TLS.CertFile = "c.pem" }, []string{"nats.tls.key_file"}},
		{"tls key without cert", func(c *Collector) { c.NATS.TLS.KeyFile = "k.pem" }, []string{"nats.tls.cert_file"}},
		{"tls pair and ca", func(c *Collector) { c.NATS.TLS = bus.TLSConfig{CAFile: "ca", CertFile: "c", KeyFile: "k"} }, nil},
		{"stream name", func(c *Collector) { c.NATS.Stream = "a.b" }, []string{"nats.stream"}},
		{"empty stream", func(c *Collector) { c.NATS.Stream = "" }, []string{"nats.stream"}},
		{"durations", func(c *Collector) {
			c.NATS.ConnectTimeout, c.Sample.Interval = 0, 0
			c.Sample.RescanInterval, c.Wrap.KillGrace, c.Batch.MaxDelay, c.ShutdownTimeout = 0, 0, 0, 0
		}, []string{"nats.connect_timeout", "sample.interval",
			"sample.rescan_interval", "wrap.kill_grace", "batch.max_delay", "shutdown_timeout"}},
		{"counts", func(c *Collector) {
			c.NATS.MaxInFlight, c.Spool.MaxBytes, c.Batch.MaxLines, c.Attach.PID = 0, 0, 0, -1
		}, []string{"nats.max_in_flight", "spool.max_bytes", "batch.max_lines", "attach.pid"}},
		{"max in flight 1", func(c *Collector) { c.NATS.MaxInFlight = 1 }, nil},
		{"roots", func(c *Collector) { c.Sample.ProcRoot, c.Sample.SysRoot = "", "" }, []string{"sample.proc_root", "sample.sys_root"}},
		{"pace 10x", func(c *Collector) { c.Replay.Pace = "10x" }, nil},
		{"pace 0.5x", func(c *Collector) { c.Replay.Pace = "0.5x" }, nil},
		{"pace original", func(c *Collector) { c.Replay.Pace = "original" }, nil},
		{"pace 0x", func(c *Collector) { c.Replay.Pace = "0x" }, []string{"replay.pace"}},
		{"pace x", func(c *Collector) { c.Replay.Pace = "x" }, []string{"replay.pace"}},
		{"pace fast", func(c *Collector) { c.Replay.Pace = "fast" }, []string{"replay.pace"}},
		{"pace -2x", func(c *Collector) { c.Replay.Pace = "-2x" }, []string{"replay.pace"}},
	}
	for _, tc := range collector {
		t.Run("collector/"+tc.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultCollector()
			tc.edit(&c)
			err := c.Validate()
			if tc.wants == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			require.Equal(t, tc.wants, problemKeys(err))
			for _, p := range Problems(err) {
				require.True(t, strings.HasPrefix(p.Error(), p.Key+": "))
			}
		})
	}

	aggregator := []struct {
		name  string
		edit  func(*Aggregator)
		wants []string
	}{
		{"defaults", func(*Aggregator) {}, nil},
		{"stream limits", func(a *Aggregator) { a.NATS.DuplicateWindow, a.NATS.StreamMaxAge = time.Minute, -time.Second },
			[]string{"nats.stream_max_age", "nats.duplicate_window"}},
		{"listen no port", func(a *Aggregator) { a.Embedded.Listen = "127.0.0.1" }, []string{"embedded.listen"}},
		{"listen bad port", func(a *Aggregator) { a.Embedded.Listen = "127.0.0.1:http" }, []string{"embedded.listen"}},
		{"listen any host without auth", func(a *Aggregator) { a.Embedded.Listen = ":0" }, []string{"embedded.listen"}},
		{"listen any host with a token", func(a *Aggregator) { a.Embedded.Listen, a.NATS.Token = ":0", "t" }, nil},
		{"listen beyond loopback with a user", func(a *Aggregator) {
			a.Embedded.Listen, a.NATS.User, a.NATS.Password = "10.0.0.1:4222", "u", "p"
		}, nil},
		{"listen localhost", func(a *Aggregator) { a.Embedded.Listen = "localhost:4222" }, nil},
		{"listen ::1", func(a *Aggregator) { a.Embedded.Listen = "[::1]:4222" }, nil},
		{"listen anywhere with a broker URL", func(a *Aggregator) { a.Embedded.Listen, a.NATS.URL = "0.0.0.0:4222", "nats://n:4222" }, nil},
		{"embedded token and user", func(a *Aggregator) { a.NATS.Token, a.NATS.User, a.NATS.Password = "t", "u", "p" }, []string{"nats"}},
		{"http disabled", func(a *Aggregator) { a.HTTP.Listen = "" }, nil},
		{"http ipv6", func(a *Aggregator) { a.HTTP.Listen = "[::1]:8080" }, nil},
		{"http bad", func(a *Aggregator) { a.HTTP.Listen = "8080" }, []string{"http.listen"}},
		{"store empty", func(a *Aggregator) { a.Embedded.Store = "" }, []string{"embedded.store"}},
		{"durable", func(a *Aggregator) { a.Consumer.Fleet.Group = "a b" }, []string{"consumer.durable"}},
		{"consumer numbers", func(a *Aggregator) { a.Consumer.Table.AckWait, a.Consumer.Table.MaxAckPending = 0, 0 },
			[]string{"consumer.ack_wait", "consumer.max_ack_pending"}},
		{"checkpoint interval 0", func(a *Aggregator) { a.Consumer.Table.CheckpointInterval = 0 }, []string{"consumer.checkpoint_interval"}},
		{"checkpoint interval over half the ack wait", func(a *Aggregator) { a.Consumer.Table.CheckpointInterval = 6 * time.Second },
			[]string{"consumer.checkpoint_interval"}},
		{"checkpoint interval half the ack wait", func(a *Aggregator) { a.Consumer.Table.CheckpointInterval = 5 * time.Second }, nil},
		{"idle timeout", func(a *Aggregator) { a.IdleTimeout = 0 }, []string{"idle_timeout"}},
		{"store negative", func(a *Aggregator) { a.Store.Retention, a.Store.CompactAfter = -time.Hour, -time.Second },
			[]string{"store.retention", "store.compact_after"}},
		{"store zero keeps", func(a *Aggregator) { a.Store.Retention, a.Store.CompactAfter = 0, 0 }, nil},
		{"threshold 0", func(a *Aggregator) { a.Split.UnattributedThresholdPct = 0 }, []string{"split.unattributed_threshold_pct"}},
		{"threshold 100", func(a *Aggregator) { a.Split.UnattributedThresholdPct = 100 }, nil},
		{"threshold 100.5", func(a *Aggregator) { a.Split.UnattributedThresholdPct = 100.5 }, []string{"split.unattributed_threshold_pct"}},
		{"pattern no group", func(a *Aggregator) { a.Split.TracePattern = `resident=[0-9]+` }, []string{"split.trace_pattern"}},
		{"pattern two groups", func(a *Aggregator) { a.Split.TraceNamePattern = `(name)=(\S+)` }, []string{"split.trace_name_pattern"}},
		{"pattern broken", func(a *Aggregator) { a.Split.TracePattern = `resident=([0-9]+` }, []string{"split.trace_pattern"}},
		{"pattern non-capturing ok", func(a *Aggregator) { a.Split.TraceNamePattern = `(?:name|tensor)=(\S+)` }, nil},
		{"api", func(a *Aggregator) { a.Sinks.IssueComment.API, a.Sinks.IssueComment.DryRun = "api.github.com", true }, []string{"sinks.issue_comment.api"}},
		{"api gitea", func(a *Aggregator) {
			a.Sinks.IssueComment.API, a.Sinks.IssueComment.Token = "http://127.0.0.1:3000/api/v1", "t"
		}, nil},
		{"api without token", func(a *Aggregator) { a.Sinks.IssueComment.API = "https://api.github.com" }, []string{"sinks.issue_comment.token"}},
		{"api dry run without token", func(a *Aggregator) {
			a.Sinks.IssueComment.API, a.Sinks.IssueComment.DryRun = "https://api.github.com", true
		}, nil},
		{"default issue", func(a *Aggregator) { a.Sinks.IssueComment.DefaultIssue = "#5" }, []string{"sinks.issue_comment.default_issue"}},
		{"default issue repo dot-dot", func(a *Aggregator) { a.Sinks.IssueComment.DefaultIssue = "acme/..#5" },
			[]string{"sinks.issue_comment.default_issue"}},
		// What the comment sink refuses to open with, validate refuses
		// too (before, only serve's start did).
		{"api with credentials", func(a *Aggregator) {
			a.Sinks.IssueComment.API, a.Sinks.IssueComment.Token = "https://bob:pw@api.github.com", "t"
		}, []string{"sinks.issue_comment.api"}},
		{"api with a query", func(a *Aggregator) {
			a.Sinks.IssueComment.API, a.Sinks.IssueComment.Token = "https://api.github.com/?x=1", "t"
		}, []string{"sinks.issue_comment.api"}},
		{"comment timeout", func(a *Aggregator) {
			a.Sinks.IssueComment.API, a.Sinks.IssueComment.Token, a.Sinks.IssueComment.Timeout = "https://api.github.com", "t", 0
		}, []string{"sinks.issue_comment.timeout"}},
		{"max backoff", func(a *Aggregator) { a.Sinks.Retry.Max = 0 }, []string{"sinks.retry.max_backoff"}},
		{"max pending", func(a *Aggregator) { a.Sinks.MaxPending = 0 }, []string{"sinks.max_pending"}},
		{"format", func(a *Aggregator) { a.Format = "markdown" }, []string{"format"}},
		{"format md", func(a *Aggregator) { a.Format = "md" }, nil},
		{"nats shared checks", func(a *Aggregator) { a.NATS.User, a.NATS.TLS.CertFile, a.NATS.ConnectTimeout = "u", "c", 0 },
			[]string{"nats.password", "nats.tls.key_file", "nats.connect_timeout"}},
	}
	for _, tc := range aggregator {
		t.Run("aggregator/"+tc.name, func(t *testing.T) {
			t.Parallel()
			a := DefaultAggregator()
			tc.edit(&a)
			err := a.Validate()
			if tc.wants == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			require.Equal(t, tc.wants, problemKeys(err))
		})
	}
}

func TestParsePaceAndIssue(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{"instant": 0, "original": 1, "10x": 10, "0.5x": 0.5, "1.25x": 1.25} {
		got, err := ParsePace(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "x", "10", "1e3x", "0x", "0.0x", "10X", " 10x", "..x"} {
		_, err := ParsePace(in)
		require.Error(t, err, in)
	}
	owner, repo, n, err := commentsink.ParseIssue("ggml-org/llama.cpp#42")
	require.NoError(t, err)
	require.Equal(t, []any{"ggml-org", "llama.cpp", 42}, []any{owner, repo, n})
	for _, in := range []string{"", "a/b", "a/b#", "a/b#x", "a#1", "a/b/c#1", "a/b#-1", "a/b#99999999999999999999"} {
		_, _, _, err := commentsink.ParseIssue(in)
		require.Error(t, err, in)
	}
}

// TestSecretsNeverPrinted loads tokens and a password from the
// environment, checks they reach the config, and checks that no way of
// dumping the config shows them.
func TestSecretsNeverPrinted(t *testing.T) {
	const (
		token    = "ghp_sEcReTtOkEn0123456789"
		natsTok  = "nats-s3cret-token"
		password = "hunter2-password"
	)
	t.Setenv("GTTSPLIT_SINKS_ISSUE_COMMENT_TOKEN", token)
	t.Setenv("GTTSPLIT_NATS_USER", "alice")
	t.Setenv("GTTSPLIT_NATS_PASSWORD", password)
	a, err := LoadAggregator("", nil)
	require.NoError(t, err)
	require.Equal(t, token, a.Sinks.IssueComment.Token.Reveal())
	require.Equal(t, password, a.NATS.Password.Reveal())

	c := DefaultCollector()
	c.NATS.Token = natsTok

	jsonA, err := json.Marshal(a)
	require.NoError(t, err)
	yamlA, err := yaml.Marshal(a)
	require.NoError(t, err)
	dumps := map[string]string{
		"String":        a.String(),
		"%v":            fmt.Sprintf("%v", a),
		"%+v":           fmt.Sprintf("%+v", a),
		"%#v":           fmt.Sprintf("%#v", a),
		"%+v sinks":     fmt.Sprintf("%+v", a.Sinks),
		"%#v sinks":     fmt.Sprintf("%#v", a.Sinks.IssueComment),
		"%s token":      fmt.Sprintf("%s %q %x", a.Sinks.IssueComment.Token, a.Sinks.IssueComment.Token, a.Sinks.IssueComment.Token),
		"json":          string(jsonA),
		"yaml":          string(yamlA),
		"SampleYAML":    string(SampleYAML(a)),
		"MarkdownTable": MarkdownTable(a),
		"Keys":          fmt.Sprint(Keys(a)),
		"collector %+v": fmt.Sprintf("%+v %#v", c, c.NATS),
	}
	for name, dump := range dumps {
		for _, secret := range []string{token, natsTok, password} {
			require.NotContainsf(t, dump, secret, "%s shows a secret", name)
		}
	}
	require.Contains(t, a.String(), "token: '[redacted]'")
	require.Contains(t, a.String(), "user: 'alice'", "non-secrets are shown")
	require.Contains(t, c.String(), "token: '[redacted]'")
	require.Contains(t, DefaultAggregator().String(), "token: ''", "an unset secret shows as empty")
}

func TestCommentTokenAlias(t *testing.T) {
	t.Setenv("GTTSPLIT_COMMENT_TOKEN", "alias-token")
	a, err := LoadAggregator("", nil)
	require.NoError(t, err)
	require.Equal(t, "alias-token", a.Sinks.IssueComment.Token.Reveal())

	t.Setenv("GTTSPLIT_SINKS_ISSUE_COMMENT_TOKEN", "primary-token")
	a, err = LoadAggregator("", nil)
	require.NoError(t, err)
	require.Equal(t, "primary-token", a.Sinks.IssueComment.Token.Reveal(), "the key's own variable wins over the alias")

	var info KeyInfo
	for _, k := range Keys(a) {
		if k.Key == "sinks.issue_comment.token" {
			info = k
		}
	}
	require.Equal(t, "GTTSPLIT_SINKS_ISSUE_COMMENT_TOKEN", info.Env)
	require.Equal(t, []string{"GTTSPLIT_COMMENT_TOKEN"}, info.EnvAliases)
	require.True(t, info.Secret)
	require.Equal(t, "[redacted]", info.Default)
}

func TestKeysAndTable(t *testing.T) {
	t.Parallel()
	keys := Keys(DefaultCollector())
	byKey := map[string]KeyInfo{}
	for _, k := range keys {
		byKey[k.Key] = k
	}
	require.Equal(t, KeyInfo{
		Key: "sample.interval", Type: "duration", Default: "100ms", Env: "GTTSPLIT_SAMPLE_INTERVAL",
		Flag: "interval", Description: byKey["sample.interval"].Description,
	}, byKey["sample.interval"])
	_, has := byKey["nats.duplicate_window"]
	require.False(t, has, "the collector creates no stream: it has no stream settings")
	require.Equal(t, "2m", keyInfo(t, DefaultAggregator(), "nats.duplicate_window").Default)
	require.Equal(t, "268435456", byKey["spool.max_bytes"].Default)
	require.Equal(t, "true", byKey["wrap.set_trace_env"].Default)
	require.Equal(t, "secret", byKey["nats.password"].Type)

	table := MarkdownTable(DefaultAggregator())
	lines := strings.Split(strings.TrimSpace(table), "\n")
	require.Len(t, lines, 2+len(Keys(DefaultAggregator())))
	require.Contains(t, table, "| `split.unattributed_threshold_pct` | `10` | `GTTSPLIT_SPLIT_UNATTRIBUTED_THRESHOLD_PCT` | `--threshold` |")
	require.Contains(t, table, "`GTTSPLIT_SINKS_ISSUE_COMMENT_TOKEN`, `GTTSPLIT_COMMENT_TOKEN`")
	require.Contains(t, table, "| `nats.url` | \"\" |")
}

// TestStringRoundTrips loads the redaction-free String output of a config
// with non-default values back and gets the same config.
func TestStringRoundTrips(t *testing.T) {
	t.Parallel()
	a := DefaultAggregator()
	a.Split.TracePattern = `it's=([0-9]+)`
	a.IdleTimeout = 90 * time.Minute
	a.Sinks.IssueComment.DryRun = true
	a.Split.UnattributedThresholdPct = 7.5
	got, err := LoadAggregator(writeFile(t, a.String()), nil)
	require.NoError(t, err)
	if diff := cmp.Diff(a, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestProblemsHelper(t *testing.T) {
	t.Parallel()
	require.Nil(t, Problems(nil))
	require.Nil(t, Problems(errors.New("plain")))
	err := fmt.Errorf("wrapped: %w", DefaultCollector().withLane("").Validate())
	require.Equal(t, []string{"lane"}, problemKeys(err))
	var fe *conf.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "lane", fe.Key)
}

func (c Collector) withLane(l string) Collector { c.Lane = l; return c }

// TestIDLimits: run ids, lanes and hosts are short, and the error quotes a
// long value clipped.
func TestIDLimits(t *testing.T) {
	t.Parallel()
	ok := DefaultCollector()
	ok.RunID, ok.Lane, ok.Host = strings.Repeat("r", conf.MaxRunIDLen), strings.Repeat("l", conf.MaxLaneLen), strings.Repeat("h", conf.MaxHostLen)
	require.NoError(t, ok.Validate())

	c := DefaultCollector()
	c.RunID = strings.Repeat("r", 70<<10)
	c.Lane = strings.Repeat("l", conf.MaxLaneLen+1)
	c.Host = "gpu host"
	err := c.Validate()
	require.ErrorIs(t, err, ErrInvalid)
	require.ElementsMatch(t, []string{"run_id", "lane", "host"}, problemKeys(err))
	require.Contains(t, err.Error(), "71680 bytes long, at most 128")
	require.Less(t, len(err.Error()), 1000, "the long value is clipped")

	c = DefaultCollector()
	c.Host = strings.Repeat("h", conf.MaxHostLen+1)
	require.Equal(t, []string{"host"}, problemKeys(c.Validate()))
	c.Host = "a\x01b"
	require.Equal(t, []string{"host"}, problemKeys(c.Validate()))
}

// TestURLCredentialsMasked: a token or password in a NATS URL or in the
// comment API URL is not echoed in a configuration error.
func TestURLCredentialsMasked(t *testing.T) {
	t.Parallel()
	c := DefaultCollector()
	c.NATS.URL = "http://tok-s3cret-9@h:4222"
	err := c.Validate()
	require.Error(t, err)
	require.NotContains(t, err.Error(), "tok-s3cret-9")
	require.Contains(t, err.Error(), "http://***@h:4222")

	a := DefaultAggregator()
	a.Sinks.IssueComment.API = "ftp://bob:pw-s3cret-8@api.example"
	err = a.Validate()
	require.Error(t, err)
	require.NotContains(t, err.Error(), "pw-s3cret-8")
}

// keyInfo is the key of cfg's keys named key.
func keyInfo(t *testing.T, cfg any, key string) KeyInfo {
	t.Helper()
	for _, k := range Keys(cfg) {
		if k.Key == key {
			return k
		}
	}
	t.Fatalf("no key %s", key)
	return KeyInfo{}
}
