package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const composeFile = "deploy/compose/cluster.yml"

// compose is the part of the Compose file format cluster.yml uses; a key
// it does not know (a misspelt one) fails the decoding.
type compose struct {
	Name       string                    `yaml:"name"`
	Services   map[string]composeService `yaml:"services"`
	Volumes    map[string]*struct{}      `yaml:"volumes"`
	Extensions map[string]any            `yaml:",inline"` // x-* fragments
}

type composeService struct {
	Image           string            `yaml:"image"`
	Build           *composeBuild     `yaml:"build"`
	Command         []string          `yaml:"command"`
	Environment     map[string]string `yaml:"environment"`
	Ports           []string          `yaml:"ports"`
	Volumes         []string          `yaml:"volumes"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
	DependsOn       map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test     []string `yaml:"test"`
		Interval string   `yaml:"interval"`
		Timeout  string   `yaml:"timeout"`
		Retries  int      `yaml:"retries"`
	} `yaml:"healthcheck"`
	Restart string `yaml:"restart"`
}

type composeBuild struct {
	Context    string            `yaml:"context"`
	Dockerfile string            `yaml:"dockerfile"`
	Args       map[string]string `yaml:"args"`
}

func decodeCompose(data []byte) (compose, error) {
	var c compose
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(&c)
	return c, err
}

func readCompose(t testing.TB) compose {
	t.Helper()
	c, err := decodeCompose([]byte(readFile(t, composeFile)))
	if err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return c
}

// composeBinary is the gttsplit program a service runs ("" for none).
func composeBinary(s composeService) string {
	if len(s.Command) > 0 && (s.Command[0] == "aggregator" || s.Command[0] == "collector") {
		return s.Command[0]
	}
	return ""
}

// interpolate replaces ${VAR:-default} and ${VAR} as compose does with an
// empty environment.
func interpolate(s string) string {
	return regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}`).ReplaceAllString(s, "$1")
}

// TestComposeCluster decodes deploy/compose/cluster.yml and checks what
// `docker compose config` and `up` would need: the three nodes of
// deploy/nats with the passwords accounts.conf reads, two aggregators and
// a replaying collector, the files and directories it mounts and builds
// from, the services and volumes it names, and stop grace periods that
// outlast the aggregators' drain.
func TestComposeCluster(t *testing.T) {
	c := readCompose(t)
	base := filepath.Join(repo(t), "deploy/compose")
	for k := range c.Extensions {
		if !strings.HasPrefix(k, "x-") {
			t.Errorf("unknown top-level key %q", k)
		}
	}
	var aggs, collectors []string
	for name, s := range c.Services {
		if s.Image == "" && s.Build == nil {
			t.Errorf("%s: neither image nor build", name)
		}
		if s.Build != nil {
			ctx := filepath.Join(base, s.Build.Context)
			if _, err := os.Stat(filepath.Join(ctx, s.Build.Dockerfile)); err != nil {
				t.Errorf("%s: build: %v", name, err)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				if _, err := os.Stat(filepath.Join(base, src)); err != nil {
					t.Errorf("%s mounts %s: %v", name, src, err)
				}
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("%s mounts volume %s, which volumes: does not declare", name, src)
			}
		}
		for dep, cond := range s.DependsOn {
			d, ok := c.Services[dep]
			switch {
			case !ok:
				t.Errorf("%s depends on %s, which is no service", name, dep)
			case cond.Condition == "service_healthy" && d.Healthcheck == nil:
				t.Errorf("%s waits for %s to be healthy, which has no healthcheck", name, dep)
			}
		}
		switch composeBinary(s) {
		case "aggregator":
			aggs = append(aggs, name)
			drain := 30 * time.Second
			if v, ok := s.Environment["GTTSPLIT_SHUTDOWN_TIMEOUT"]; ok {
				drain, _ = time.ParseDuration(interpolate(v))
			}
			if g, err := time.ParseDuration(s.StopGracePeriod); err != nil || g <= drain {
				t.Errorf("%s: stop_grace_period %q does not outlast shutdown_timeout %v", name, s.StopGracePeriod, drain)
			}
		case "collector":
			collectors = append(collectors, name)
			if len(s.Command) < 3 || s.Command[1] != "replay" {
				t.Errorf("%s: not a collector replay: %q", name, s.Command)
				continue
			}
			// The image has testdata/runs at /testdata/runs (Dockerfile).
			for _, f := range s.Command[2:] {
				if _, err := os.Stat(filepath.Join(repo(t), strings.TrimPrefix(f, "/"))); err != nil {
					t.Errorf("%s replays %s: %v", name, f, err)
				}
			}
		}
	}
	if len(aggs) < 2 || len(collectors) != 1 {
		t.Errorf("aggregators %v and collectors %v: want two and one", aggs, collectors)
	}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("nats-%d", i)
		s, ok := c.Services[name]
		if !ok {
			t.Errorf("no service %s", name)
			continue
		}
		conf := fmt.Sprintf("/etc/nats/n%d.conf", i)
		if strings.Join(s.Command, " ") != "-c "+conf {
			t.Errorf("%s: command %q, want -c %s", name, s.Command, conf)
		}
		if !slices.Contains(s.Volumes, "../nats:/etc/nats:ro") {
			t.Errorf("%s does not mount deploy/nats at /etc/nats", name)
		}
		for _, v := range accountsEnv(t) {
			if interpolate(s.Environment[v]) == "" {
				t.Errorf("%s does not set %s, which accounts.conf reads", name, v)
			}
		}
	}
}

// TestComposeDecodingIsStrict shows that a misspelt key fails.
func TestComposeDecodingIsStrict(t *testing.T) {
	orig := readFile(t, composeFile)
	broken := strings.Replace(orig, "stop_grace_period:", "stop_grace_periods:", 1)
	if broken == orig {
		t.Fatal("the case changed nothing: update it with cluster.yml")
	}
	if _, err := decodeCompose([]byte(broken)); err == nil {
		t.Error("a misspelt key decoded")
	}
}
