package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/cmd/internal/clitest"
	"github.com/gttsplit/gttsplit/internal/config"
)

// TestComposeCollector checks that the collector service of
// docker-compose.yml runs a command the collector accepts, parsed by its
// own command tree and config loader. cmd/aggregator checks the rest of the
// file.
func TestComposeCollector(t *testing.T) {
	t.Parallel()
	c, err := clitest.LoadCompose(filepath.Join(clitest.RepoRoot, "docker-compose.yml"))
	require.NoError(t, err)
	s, ok := c.Services["collector"]
	require.True(t, ok, "no collector service")
	require.NotEmpty(t, s.Command)
	require.Equal(t, "collector", s.Command[0])

	cmd, args, err := clitest.ParseCommand(newRoot(strings.NewReader(""), io.Discard, io.Discard, nil), s.Command[1:])
	require.NoError(t, err)
	require.Equal(t, "replay", cmd.Name(), "by default the collector replays a recorded run")
	require.Equal(t, []string{"/testdata/runs/4b/events.jsonl"}, args)
	cfg, err := config.LoadCollector("", cmd.Flags())
	require.NoError(t, err)
	require.Equal(t, "nats://nats:4222", cfg.NATS.URL, "publishes to the nats service")
}
