package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/conf"
)

// TestUnknownEnv: a GTTSPLIT_* variable that sets no key of either binary
// is a problem naming the variable it probably means; the keys' variables
// (aliases too, and the other binary's), EnvExtra's and other prefixes
// are not.
func TestUnknownEnv(t *testing.T) {
	t.Parallel()
	env := []string{
		"PATH=/usr/bin",
		"GTTSPLIT_SINKS_JSON_DIRR=out",       // a typo
		"GTTSPLIT_SINKS_JSON_DIR=out",        // the aggregator's key
		"GTTSPLIT_SAMPLE_INTERVAL=50ms",      // the collector's key
		"GTTSPLIT_COMMENT_TOKEN=x",           // an alias
		"GTTSPLIT_BROWSER=/usr/bin/chromium", // the browser tests'
		"GTTSPLIT_BENCH_RUNS=20000",          // a benchmark's (a prefix)
		"GTTSPLIT_NATS_PASWORD=x",            // a typo of a secret's
		"GTTSPLIT_SOMETHING_ELSE_ENTIRELY=1", // nothing near
		"GTTSPLIT_SINKS_JSON_DIRR=again",     // once
		"NOT_GTTSPLIT_SINKS_JSON_DIRR=out",   // another prefix
		"GTTSPLITSINKS=1",                    // no underscore: not ours
		"GTTSPLIT_FLEET_PARTITIONS=4",        // the fleet harness's
		"GTTSPLIT_EMBEDDED_STORE=/data",      // as the image sets it
	}
	var got []string
	for _, p := range UnknownEnv(env) {
		got = append(got, p.Error())
	}
	require.Equal(t, []string{
		"GTTSPLIT_NATS_PASWORD: sets no key (did you mean GTTSPLIT_NATS_PASSWORD?)",
		"GTTSPLIT_SINKS_JSON_DIRR: sets no key (did you mean GTTSPLIT_SINKS_JSON_DIR?)",
		"GTTSPLIT_SOMETHING_ELSE_ENTIRELY: sets no key (the variables are GTTSPLIT_<KEY>, dots as underscores: docs/configuration.md)",
	}, got)
}

// TestCheckEnv: validate's error lists the unknown variables with the
// load's own problems, and a file that cannot be read is said alone.
func TestCheckEnv(t *testing.T) {
	t.Parallel()
	env := []string{"GTTSPLIT_SINKS_JSON_DIRR=out"}
	require.NoError(t, CheckEnv(nil, []string{"GTTSPLIT_SINKS_JSON_DIR=out"}))

	err := CheckEnv(nil, env)
	require.ErrorIs(t, err, ErrInvalid)
	require.Equal(t, []string{"GTTSPLIT_SINKS_JSON_DIRR"}, problemKeys(err))

	_, lerr := LoadAggregator(writeFile(t, "format: yaml\n"), nil)
	err = CheckEnv(lerr, env)
	require.ErrorIs(t, err, ErrInvalid)
	require.Equal(t, []string{"format", "GTTSPLIT_SINKS_JSON_DIRR"}, problemKeys(err))

	_, lerr = LoadAggregator(filepath.Join(t.TempDir(), "missing.yaml"), nil)
	require.ErrorIs(t, lerr, ErrConfigFile)
	require.Equal(t, lerr, CheckEnv(lerr, env))
}

// TestPlaceholderSecretsRefused: every secret key set to a placeholder
// the deploy files ship is a problem naming the key, the placeholder and
// its variables, wherever it comes from; a chosen secret passes.
func TestPlaceholderSecretsRefused(t *testing.T) {
	for _, v := range []string{"change-me", "change-me-too", "CHANGE_ME", "changeme", "replace-me", "<token>", "password"} {
		t.Run(v, func(t *testing.T) {
			t.Setenv("GTTSPLIT_NATS_USER", "aggregator")
			t.Setenv("GTTSPLIT_NATS_PASSWORD", v)
			t.Setenv("GTTSPLIT_HTTP_TOKEN", v)
			t.Setenv("GTTSPLIT_COMMENT_TOKEN", v)
			_, err := LoadAggregator("", nil)
			require.ErrorIs(t, err, ErrInvalid)
			require.Equal(t, []string{"nats.password", "http.token", "sinks.issue_comment.token"}, problemKeys(err))
			require.Contains(t, err.Error(), `nats.password: "`+v+`" is the placeholder the deploy files ship, not a secret: choose one (GTTSPLIT_NATS_PASSWORD)`)
			require.Contains(t, err.Error(), "(GTTSPLIT_SINKS_ISSUE_COMMENT_TOKEN or GTTSPLIT_COMMENT_TOKEN)")

			t.Setenv("GTTSPLIT_NATS_TOKEN", v)
			t.Setenv("GTTSPLIT_NATS_PASSWORD", "")
			t.Setenv("GTTSPLIT_NATS_USER", "")
			_, err = LoadCollector(writeFile(t, "http:\n  token: "+v+"\n"), nil)
			require.ErrorIs(t, err, ErrInvalid)
			require.Equal(t, []string{"nats.token", "http.token"}, problemKeys(err))
		})
	}
	for _, v := range []string{"", "hunter2-password", "4f9c2e0b7d1a", "changing-tides-42", "my-token-x"} {
		require.Empty(t, conf.Secret(v).Placeholder(), v)
	}
	t.Setenv("GTTSPLIT_NATS_USER", "aggregator")
	t.Setenv("GTTSPLIT_NATS_PASSWORD", "Zk3-chosen-by-the-operator")
	_, err := LoadAggregator("", nil)
	require.NoError(t, err)
}

// TestEnvExtraIsComplete: every GTTSPLIT_* variable the repository reads
// (os.Getenv and os.LookupEnv in Go, ${VAR} and VAR= in scripts and
// Compose files) sets a key or is in EnvExtra, so a command never warns of
// a variable the project itself documents.
func TestEnvExtraIsComplete(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	goReads := []*regexp.Regexp{
		regexp.MustCompile(`(?:Getenv|LookupEnv)\("(GTTSPLIT_[A-Z0-9_]+)"\)`),
		regexp.MustCompile(`const (?i:\w*env\w*) = "(GTTSPLIT_[A-Z0-9_]+)"`),
	}
	shReads := []*regexp.Regexp{
		regexp.MustCompile(`\$\{(GTTSPLIT_[A-Z0-9_]+)`),
		regexp.MustCompile(`(?m)(?:^|\s)(GTTSPLIT_[A-Z0-9_]+)=`),
	}
	found := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		base := filepath.Base(path)
		if !strings.HasSuffix(base, ".go") && !strings.HasSuffix(base, ".yml") && base != "run" && base != "bench" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		reads := shReads
		if strings.HasSuffix(base, ".go") {
			reads = goReads
		}
		for _, re := range reads {
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				found++
				if !knownEnv(m[1]) && !strings.Contains(path, "env_test.go") {
					t.Errorf("%s reads %s, which sets no key and is not in EnvExtra", path, m[1])
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, found, 10, "the scan found the repository's variables")
}
