package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/conf"
)

func TestExitCodes(t *testing.T) {
	t.Parallel()
	require.Equal(t, ExitOK, Code(nil))
	require.Equal(t, ExitFailure, Code(errors.New("x")))
	require.Equal(t, ExitUsage, Code(Usage(errors.New("x"))))
	require.Equal(t, ExitUsage, Code(fmt.Errorf("load: %w", conf.ErrInvalid)))
	require.Equal(t, 3, Code(&ExitError{Code: 3}))
}

func TestExecute(t *testing.T) {
	t.Parallel()
	newRoot := func() *cobra.Command {
		root := &cobra.Command{Use: "prog"}
		root.AddCommand(&cobra.Command{Use: "ok", Args: Args(cobra.NoArgs), RunE: func(*cobra.Command, []string) error { return nil }},
			&cobra.Command{Use: "fail", RunE: func(*cobra.Command, []string) error { return errors.New("it broke") }},
			&cobra.Command{Use: "child", RunE: func(*cobra.Command, []string) error { return &ExitError{Code: 3} }})
		return root
	}
	var stderr bytes.Buffer
	require.Equal(t, 0, Execute(newRoot(), []string{"ok"}, &stderr))
	require.Equal(t, 2, Execute(newRoot(), []string{"ok", "extra"}, &stderr))
	require.Equal(t, 2, Execute(newRoot(), []string{"nope"}, &stderr))
	require.Equal(t, 2, Execute(newRoot(), []string{"ok", "--no-such-flag"}, &stderr))
	stderr.Reset()
	require.Equal(t, 1, Execute(newRoot(), []string{"fail"}, &stderr))
	require.Equal(t, "prog: it broke\n", stderr.String())
	stderr.Reset()
	require.Equal(t, 3, Execute(newRoot(), []string{"child"}, &stderr))
	require.Empty(t, stderr.String(), "a child's exit code is passed on silently")
}

func TestIsTerminal(t *testing.T) {
	t.Parallel()
	null, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer null.Close()
	require.False(t, IsTerminal(null), "/dev/null is a character device, not a terminal")
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal to check against: %v", err)
	}
	defer ptmx.Close()
	require.True(t, IsTerminal(ptmx))
	require.False(t, IsTerminal(&bytes.Buffer{}))
}

// TestQuietLogger: INFO records of components not kept are DEBUG (shown
// only at debug level), kept ones and warnings are untouched, in both
// formats.
func TestQuietLogger(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "console"} {
		for _, level := range []string{"info", "debug"} {
			var b bytes.Buffer
			log := QuietLogger(&b, level, format, []string{"quickstart"}, "fleet")
			log.Info().Str("component", "fleet").Int("partition", 3).Msg("partition taken")
			log.Info().Str("component", "quickstart").Msg("waiting for the splits")
			log.Warn().Str("component", "fleet").Msg("not ready")
			log.Warn().Str("component", "nats").Msg("lease lost")
			log.Info().Msg("split written")
			out := b.String()
			require.Contains(t, out, "waiting for the splits", format)
			require.Contains(t, out, "lease lost", format)
			if level == "info" {
				require.NotContains(t, out, "partition taken", format)
				require.NotContains(t, out, "split written", format)
				require.NotContains(t, out, "not ready", format)
				continue
			}
			want := map[string]string{"json": `{"level":"debug","component":"fleet","partition":3,`, "console": "DBG partition taken"}[format]
			require.Contains(t, out, want, format)
			require.NotContains(t, out, `"level":"info","component":"fleet"`, format)
		}
	}
}
