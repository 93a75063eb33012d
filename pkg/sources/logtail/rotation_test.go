package logtail_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRotationByRename rotates three times: once after the follower caught
// up, twice while it may still be behind, the last time leaving a partial
// last line in the old file. The writer keeps writing the old file after the
// rename until it reopens the path, as a logger does.
func TestRotationByRename(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "llama.log")
	cfg, done := config(t, path, t.TempDir())
	s := &sink{}
	r := start(t, cfg, s)

	var want []string
	w := appender(t, path)
	for gen := range 3 {
		lines := numbered(fmt.Sprintf("gen%d", gen), 0, 60)
		// The follower must have opened this file before it is renamed:
		// a file renamed away between two polls is never seen.
		write(t, w, joinLines(lines[:20]))
		s.waitLines(t, len(want)+1)
		for i := 20; i < len(lines); i += 20 {
			write(t, w, joinLines(lines[i:i+20]))
		}
		want = append(want, lines...)
		if gen == 0 {
			s.waitLines(t, len(want)) // caught up before the rename
		}
		require.NoError(t, os.Rename(path, fmt.Sprintf("%s.%d", path, gen+1)))
		after := numbered(fmt.Sprintf("gen%d-after-rename", gen), 0, 5)
		write(t, w, joinLines(after))
		want = append(want, after...)
		if gen == 2 {
			write(t, w, "gen2-partial")
			want = append(want, "gen2-partial")
		}
		require.NoError(t, w.Close())
		w = appender(t, path)
	}
	last := numbered("current", 0, 30)
	write(t, w, joinLines(last))
	want = append(want, last...)
	s.waitLines(t, len(want))
	close(done)
	require.NoError(t, r.wait(t))

	ls := s.lines()
	require.Equal(t, want, texts(ls))
	requireSeqs(t, ls, 1)
}

// copyFile copies src to dst, as logrotate's copytruncate does before it
// truncates src.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.Create(dst)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

// TestCopyTruncate copies the file, truncates it to 0 and writes on. The
// follower has read everything before the copy (lines written between the
// copy and the truncate are lost by copytruncate itself).
func TestCopyTruncate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// after is how many lines follow the truncate: fewer than before
		// (the file stays shorter than our offset), or more, written at once
		// (it may regrow past our offset before the next poll; only its
		// first bytes tell).
		after int
		// appendMode false: the writer keeps its offset and leaves a hole of
		// NUL bytes.
		appendMode bool
	}{
		{"shrinks", 10, true},
		{"regrows", 400, true},
		{"hole", 10, false},
		{"hole_regrows", 400, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "llama.log")
			flags := os.O_WRONLY | os.O_CREATE
			if tc.appendMode {
				flags |= os.O_APPEND
			}
			w, err := os.OpenFile(path, flags, 0o644)
			require.NoError(t, err)
			defer w.Close()

			cfg, done := config(t, path, t.TempDir())
			s := &sink{}
			r := start(t, cfg, s)

			var want []string
			for round := range 3 {
				before := numbered(fmt.Sprintf("r%d-before", round), 0, 50)
				write(t, w, joinLines(before))
				want = append(want, before...)
				s.waitLines(t, len(want))

				copyFile(t, path, fmt.Sprintf("%s.%d", path, round+1))
				require.NoError(t, os.Truncate(path, 0))
				after := numbered(fmt.Sprintf("r%d-after", round), 0, tc.after)
				write(t, w, joinLines(after))
				want = append(want, after...)
				s.waitLines(t, len(want))
			}
			close(done)
			require.NoError(t, r.wait(t))

			ls := s.lines()
			require.Equal(t, want, texts(ls))
			requireSeqs(t, ls, 1)
		})
	}
}
