package config

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite configs/*.yaml from the defaults")

// configsDir is the repository's configs/ directory.
const configsDir = "../../configs"

// TestMain clears GTTSPLIT_* variables of the calling shell, so every test
// starts from defaults and only sees the environment it sets itself.
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, EnvPrefix+"_") {
			os.Unsetenv(name)
		}
	}
	os.Exit(m.Run())
}

// defaultsFor returns the defaults and a loader for a file in configs/.
func defaultsFor(t *testing.T, name string) (any, func(path string) (any, error)) {
	t.Helper()
	switch name {
	case "collector.yaml":
		return DefaultCollector(), func(p string) (any, error) { return LoadCollector(p, nil) }
	case "aggregator.yaml":
		return DefaultAggregator(), func(p string) (any, error) { return LoadAggregator(p, nil) }
	}
	t.Fatalf("configs/%s: no binary has this config file", name)
	return nil, nil
}

func configFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(configsDir, "*.yaml"))
	require.NoError(t, err)
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = filepath.Base(f)
	}
	slices.Sort(names)
	require.Equal(t, []string{"aggregator.yaml", "collector.yaml"}, names, "configs/ holds one file per binary")
	return files
}

func TestConfigFilesUpToDate(t *testing.T) {
	for _, name := range []string{"collector.yaml", "aggregator.yaml"} {
		def, _ := defaultsFor(t, name)
		want := SampleYAML(def)
		path := filepath.Join(configsDir, name)
		if *update {
			require.NoError(t, os.WriteFile(path, want, 0o644))
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("configs/%s is stale; run go test ./internal/config -update (-want +got):\n%s", name, diff)
		}
	}
}

func TestConfigFilesLoadToDefaults(t *testing.T) {
	for _, path := range configFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			def, load := defaultsFor(t, filepath.Base(path))
			got, err := load(path)
			require.NoError(t, err)
			if diff := cmp.Diff(def, got); diff != "" {
				t.Errorf("loading %s does not give the defaults (-want +got):\n%s", path, diff)
			}
		})
	}
}

// flatten lists the leaf keys of a decoded YAML document as dotted paths.
func flatten(prefix string, m map[string]any, out *[]string) {
	for k, v := range m {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok {
			flatten(key, sub, out)
			continue
		}
		*out = append(*out, key)
	}
}

func TestConfigFilesListExactlyTheKeys(t *testing.T) {
	for _, path := range configFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			def, _ := defaultsFor(t, filepath.Base(path))
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			var doc map[string]any
			require.NoError(t, yaml.Unmarshal(data, &doc))
			var got []string
			flatten("", doc, &got)
			slices.Sort(got)
			var want []string
			for _, k := range Keys(def) {
				want = append(want, k.Key)
			}
			slices.Sort(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s keys differ from the struct (-struct +file):\n%s", path, diff)
			}
			// Every key has its one-line comment right above it, naming its
			// environment variable (and its flag, when it has one).
			lines := strings.Split(string(data), "\n")
			for _, k := range Keys(def) {
				leafName := k.Key[strings.LastIndex(k.Key, ".")+1:]
				found := false
				for i := 1; i < len(lines); i++ {
					prev := strings.TrimSpace(lines[i-1])
					if strings.HasPrefix(strings.TrimSpace(lines[i]), leafName+":") &&
						strings.HasPrefix(prev, "#") && strings.Contains(prev, k.Env) &&
						(k.Flag == "" || strings.Contains(prev, "--"+k.Flag)) {
						found = true
						break
					}
				}
				require.Truef(t, found, "%s: key %s lacks a comment naming %s", path, k.Key, k.Env)
			}
		})
	}
}
