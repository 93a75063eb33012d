package safefs

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestComponent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string // want: exact, or a prefix when it ends in '+'
	}{
		{"run-1", "run-1"},
		{"2025-01-02T03_04_05.123", "2025-01-02T03_04_05.123"},
		{"a.b", "a.b"},
		{"", "unknown+"},
		{".", "_+"},
		{"..", "_.+"},
		{"...", "_..+"},
		{".hidden", "_hidden+"},
		{"../../etc/x", "_._.._etc_x+"},
		{"a/b", "a_b+"},
		{"nul\x00", "nul_+"},
		{"a+b", "a_b+"},
		{"é", "__+"},
	} {
		got := Component(tc.in)
		if strings.HasSuffix(tc.want, "+") && tc.in != "" {
			require.True(t, strings.HasPrefix(got, tc.want), "%q → %q, want prefix %q", tc.in, got, tc.want)
			require.Len(t, got, len(tc.want)+hashLen, "%q → %q", tc.in, got)
		} else {
			require.Equal(t, tc.want, got, "%q", tc.in)
		}
	}
	long := strings.Repeat("x", 1000)
	got := Component(long)
	require.Len(t, got, maxBase+1+hashLen)
	require.NotEqual(t, got, Component(long+"y"), "ids differing past the cap stay distinct")
	require.NotEqual(t, Component("a/b"), Component("a_b"), "a changed id never equals a clean one")
	require.NotEqual(t, Component("a/b"), Component("a:b"))
	require.Equal(t, "splits.jsonl", Component("splits.jsonl"))
	require.NotEqual(t, "splits.jsonl", Component("splits.jsonl", "splits.jsonl"), "reserved names are changed")
}

func FuzzComponent(f *testing.F) {
	for _, s := range []string{"", ".", "..", "run-1", "../x", "a/b", "\x00", strings.Repeat("é", 100), "a+b", "unknown+"} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ca, cb := Component(a), Component(b)
		for _, c := range []string{ca, cb} {
			require.True(t, filepath.IsLocal(c), "%q not local", c)
			require.NotContains(t, c, "/")
			require.NotContains(t, c, `\`)
			require.NotEqual(t, '.', rune(c[0]))
			require.LessOrEqual(t, len(c), maxBase+1+hashLen)
		}
		if a != b {
			require.NotEqual(t, ca, cb, "%q and %q share a name", a, b)
		}
	})
}

func TestWriteAtomic(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	root, err := OpenRoot(filepath.Join(dir, "out"))
	require.NoError(t, err)
	defer root.Close()

	// Concurrent writers of one file: every read sees one whole version.
	versions := []string{strings.Repeat("a", 1<<16), strings.Repeat("b", 1<<15)}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			require.NoError(t, WriteAtomic(root, "h/l/r.md", []byte(versions[i%2])))
		})
		wg.Go(func() {
			b, err := os.ReadFile(filepath.Join(dir, "out", "h", "l", "r.md"))
			if err == nil {
				require.Contains(t, versions, string(b), "torn read")
			}
		})
	}
	wg.Wait()
	entries, err := os.ReadDir(filepath.Join(dir, "out", "h", "l"))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left")

	require.Error(t, WriteAtomic(root, "../escape.md", []byte("x")), "the root refuses names outside it")
	_, err = os.Stat(filepath.Join(dir, "escape.md"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
