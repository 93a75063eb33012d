package fdinfo

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseStat: no input panics, and a stat line built around any command
// name (spaces, parentheses, newlines) gives back its fields.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte(statLine(1, 0, "init", 1)), "llama-server", uint16(4), uint64(99))
	f.Add([]byte("9 (z) Z 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0"), "a) S 1 2 (b", uint16(0), uint64(0))
	f.Add([]byte(")"), ") (", uint16(65535), uint64(1<<63))
	f.Fuzz(func(t *testing.T, raw []byte, comm string, ppid uint16, start uint64) {
		if st, err := parseStat(raw); err == nil {
			require.NotContains(t, " \n", string(st.state), "a field never starts with a separator")
		}
		st, err := parseStat([]byte(statLine(7, int(ppid), comm, start)))
		require.NoError(t, err)
		require.Equal(t, procStat{state: 'S', ppid: int(ppid), start: start}, st)
	})
}

// FuzzClientID: the client id is the value of the first line that starts
// with the key, for any text.
func FuzzClientID(f *testing.F) {
	entries, err := os.ReadDir(filepath.Join("testdata", "fdinfo"))
	require.NoError(f, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("testdata", "fdinfo", e.Name()))
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		i := lineStart(text, keyClientID)
		v := value(text, keyClientID)
		if i < 0 {
			require.Nil(t, v)
			return
		}
		require.True(t, i == 0 || text[i-1] == '\n')
		require.True(t, bytes.HasPrefix(text[i:], keyClientID))
		require.NotContains(t, string(v), "\n")
		require.Equal(t, -1, lineStart(text[:i], keyClientID), "first occurrence")
	})
}
