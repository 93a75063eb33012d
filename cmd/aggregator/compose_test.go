package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/cmd/internal/clitest"
	"github.com/gttsplit/gttsplit/internal/config"
)

// TestComposeFile checks docker-compose.yml without docker: its services,
// images and builds, and that the aggregator service's command is one the
// aggregator accepts, parsed by its own command tree and config loader.
// cmd/collector checks the collector service's command the same way.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	c, err := clitest.LoadCompose(filepath.Join(clitest.RepoRoot, "docker-compose.yml"))
	require.NoError(t, err)
	names := make([]string, 0, len(c.Services))
	for name := range c.Services {
		names = append(names, name)
	}
	require.ElementsMatch(t, []string{"nats", "aggregator", "collector"}, names)

	nats := c.Services["nats"]
	require.Regexp(t, `^nats:2\.[0-9]+(\.[0-9]+)?-alpine`, nats.Image)
	require.Nil(t, nats.Build)
	require.Subset(t, nats.Command, []string{"-js", "-sd", "/data"})
	sd := slices.Index(nats.Command, "-sd")
	require.Equal(t, "/data", nats.Command[sd+1], "the JetStream store is the volume")
	requireNamedVolume(t, c, nats, "/data")
	require.Contains(t, nats.Ports, "4222:4222", "collectors on GPU hosts publish to it")

	// The aggregator and the collector run the image built from the
	// repository's Dockerfile.
	for _, name := range []string{"aggregator", "collector"} {
		s := c.Services[name]
		require.NotNil(t, s.Build, "%s: build", name)
		require.Equal(t, ".", s.Build.Context, "%s: build context", name)
		df := s.Build.Dockerfile
		if df == "" {
			df = "Dockerfile"
		}
		require.FileExists(t, filepath.Join(clitest.RepoRoot, df), "%s: dockerfile", name)
		require.NotEmpty(t, s.Command, "%s: command", name)
		require.Equal(t, name, s.Command[0], "%s: the command names its binary", name)
	}
	require.Equal(t, c.Services["aggregator"].Image, c.Services["collector"].Image, "one image for both binaries")

	agg := c.Services["aggregator"]
	require.Contains(t, agg.DependsOn, "nats")
	require.Contains(t, agg.Ports, "127.0.0.1:8080:8080", "the page with its default token is published on this machine only")
	requireNamedVolume(t, c, agg, "/out")
	require.Contains(t, c.Services["collector"].DependsOn, "aggregator")
	for name, s := range c.Services {
		for dep, cond := range s.DependsOn {
			require.Contains(t, c.Services, dep, "%s depends on an unknown service", name)
			if cond == "service_healthy" {
				require.NotNil(t, c.Services[dep].Healthcheck, "%s waits for %s to be healthy, which has no healthcheck", name, dep)
			}
		}
	}

	cmd, args, err := clitest.ParseCommand(newRoot(io.Discard, io.Discard), agg.Command[1:])
	require.NoError(t, err)
	require.Equal(t, "serve", cmd.Name())
	require.Empty(t, args)
	cfg, err := config.LoadAggregator("", cmd.Flags())
	require.NoError(t, err)
	require.Equal(t, "nats://nats:4222", cfg.NATS.URL, "uses the nats service, not the embedded server")
	require.Equal(t, "/out/json", cfg.Sinks.JSON.Dir)
	require.Equal(t, "/out/reports", cfg.Sinks.File.Dir)
	require.Equal(t, "0.0.0.0:8080", cfg.HTTP.Listen, "reachable through the published port")

	// The health check asks the aggregator's own /readyz.
	require.NotNil(t, agg.Healthcheck)
	require.Contains(t, strings.Join(agg.Healthcheck.Test, " "), "127.0.0.1:8080/readyz")
}

// TestComposeHTTPToken: the aggregator service listens on 0.0.0.0 in its
// container, not loopback, so its page needs a token: the file sets one
// (without it http://localhost:8080/ answered 403), with a default the
// user can override, and says how to open the page with it.
func TestComposeHTTPToken(t *testing.T) {
	c, err := clitest.LoadCompose(filepath.Join(clitest.RepoRoot, "docker-compose.yml"))
	require.NoError(t, err)
	agg := c.Services["aggregator"]
	tok := agg.Environment["GTTSPLIT_HTTP_TOKEN"]
	require.Regexp(t, `^\$\{GTTSPLIT_HTTP_TOKEN:-[^}]+\}$`, tok, "a default token the user can override")
	def := strings.TrimSuffix(strings.TrimPrefix(tok, "${GTTSPLIT_HTTP_TOKEN:-"), "}")
	t.Setenv("GTTSPLIT_HTTP_TOKEN", def) // as compose passes it
	cmd, _, err := clitest.ParseCommand(newRoot(io.Discard, io.Discard), agg.Command[1:])
	require.NoError(t, err)
	cfg, err := config.LoadAggregator("", cmd.Flags())
	require.NoError(t, err)
	require.Equal(t, def, cfg.HTTP.Token.Reveal())
	compose, err := os.ReadFile(filepath.Join(clitest.RepoRoot, "docker-compose.yml"))
	require.NoError(t, err)
	require.Contains(t, string(compose), "http://localhost:8080/?token="+def)
}

// requireNamedVolume requires s to mount a named volume, declared at the
// top level, at target.
func requireNamedVolume(t *testing.T, c clitest.Compose, s clitest.Service, target string) {
	t.Helper()
	for _, v := range s.Volumes {
		src, dst, ok := strings.Cut(v, ":")
		if ok && strings.SplitN(dst, ":", 2)[0] == target {
			require.Contains(t, c.Volumes, src, "volume %q is not declared", src)
			return
		}
	}
	t.Fatalf("no volume mounted at %s in %v", target, s.Volumes)
}

// TestDockerfile checks that the Dockerfile builds both binaries
// statically with Go 1.26 in a builder stage, and ships them with the
// recorded runs the collector service replays; and that .dockerignore
// keeps what the build needs.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(clitest.RepoRoot, "Dockerfile"))
	require.NoError(t, err)
	// Join continued lines, drop comments.
	var lines []string
	for _, l := range strings.Split(strings.ReplaceAll(string(b), "\\\n", " "), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	var froms []string
	for _, l := range lines {
		if strings.HasPrefix(l, "FROM ") {
			froms = append(froms, l)
		}
	}
	require.Len(t, froms, 2, "a builder stage and a runtime stage")
	require.Regexp(t, `^FROM golang:1\.26\S* AS build$`, froms[0])
	require.Regexp(t, `^FROM (alpine:|gcr\.io/distroless/static)`, froms[1])

	text := strings.Join(lines, "\n")
	build := regexp.MustCompile(`(?m)^RUN CGO_ENABLED=0 go build .*$`).FindString(text)
	require.NotEmpty(t, build, "a static go build")
	require.Contains(t, build, "./cmd/collector")
	require.Contains(t, build, "./cmd/aggregator")
	require.Regexp(t, `(?m)^COPY --from=build \S*/collector \S*/aggregator /usr/local/bin/$`, text)
	require.Regexp(t, `(?m)^COPY testdata/runs /testdata/runs$`, text)
	require.Regexp(t, `(?m)^USER \S+$`, text, "not root")
	// The version is stamped (a build arg, else the commit from .git), and
	// quickstart can write where the image starts.
	require.Contains(t, build, "-X github.com/gttsplit/gttsplit/internal/cli.stamped=${VERSION}")
	require.NotContains(t, build, "-buildvcs=false", "the commit is the version when VERSION is not given")
	require.Regexp(t, `(?m)^ARG VERSION=`, text)
	require.Regexp(t, `(?m)^WORKDIR /home/gttsplit$`, text, "a directory the user may write (quickstart-out/)")
	require.Contains(t, text, "ln -s /testdata /home/gttsplit/testdata", "quickstart finds testdata/runs from there")

	// The collector service replays a file the image holds.
	c, err := clitest.LoadCompose(filepath.Join(clitest.RepoRoot, "docker-compose.yml"))
	require.NoError(t, err)
	for _, arg := range c.Services["collector"].Command {
		if rel, ok := strings.CutPrefix(arg, "/testdata/runs/"); ok {
			require.FileExists(t, filepath.Join(clitest.RepoRoot, "testdata", "runs", rel))
		}
	}

	ignore := filepath.Join(clitest.RepoRoot, ".dockerignore")
	for _, p := range []string{".git/HEAD", "go.mod", "go.sum", "cmd/collector/main.go", "cmd/aggregator/main.go", "internal/config/load.go", "pkg/split/fold.go", "testdata/runs/4b/events.jsonl"} {
		ignored, err := clitest.DockerIgnored(ignore, p)
		require.NoError(t, err)
		require.False(t, ignored, ".dockerignore excludes %s, which the build needs", p)
	}
}
