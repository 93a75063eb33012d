package plugin

import (
	"testing"

	"github.com/stretchr/testify/require"
)

type cfg struct{ Dir string }

func TestConfig(t *testing.T) {
	t.Parallel()
	c, err := Config[cfg]("file", cfg{Dir: "a"})
	require.NoError(t, err)
	require.Equal(t, "a", c.Dir)
	c, err = Config[cfg]("file", &cfg{Dir: "b"})
	require.NoError(t, err)
	require.Equal(t, "b", c.Dir)
	_, err = Config[cfg]("file", (*cfg)(nil))
	require.ErrorIs(t, err, ErrConfig, "a nil pointer is an error, not a panic")
	_, err = Config[cfg]("file", "dir")
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "file: wrong config type: string, want *plugin.cfg")
}
