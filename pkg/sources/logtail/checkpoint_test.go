package logtail_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/stretchr/testify/require"
)

// stateFile returns the only checkpoint in dir, and that no temporary
// files were left beside it.
func stateFile(t *testing.T, dir string) map[string]any {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, ents, 1, "state dir holds exactly the state file")
	b, err := os.ReadFile(filepath.Join(dir, ents[0].Name()))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// TestRestartResumesAfterAckedPrefix acknowledges records 0..k-1 and k+1
// but never record k, is cancelled, and restarts with the same state dir:
// the second run emits exactly the lines from record k on, numbered as
// before, and a third run emits nothing again.
func TestRestartResumesAfterAckedPrefix(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "llama.log")
	state := t.TempDir()
	w := appender(t, path)
	all := numbered("line", 0, 40)

	const k = 3
	cfg, _ := config(t, path, state)
	cfg.Batch.MaxLines = 4
	s1 := &sink{ack: func(i int) bool { return i < k || i == k+1 }}
	r1 := start(t, cfg, s1)
	// Written in pieces, with a partial line at the end, so that batches
	// and reads do not line up.
	for i := 0; i < 36; i += 9 {
		write(t, w, joinLines(all[i:i+9]))
	}
	write(t, w, "line-00")
	s1.waitLines(t, 36)
	waitFor(t, func() bool { return len(s1.records()) >= k+2 }, "records")
	require.NoError(t, r1.stop(t))

	recs := s1.records()
	var acked []split.Line
	for _, r := range recs[:k] {
		acked = append(acked, r.Lines...)
	}
	lastAcked := acked[len(acked)-1]
	require.Equal(t, all[:len(acked)], texts(acked))
	st := stateFile(t, state)
	require.EqualValues(t, lastAcked.Seq+1, st["next_seq"])

	// The writer goes on while the collector is away.
	write(t, w, "36\n")
	write(t, w, joinLines(all[37:]))

	cfg2, done2 := config(t, path, state)
	cfg2.Batch.MaxLines = 4
	close(done2)
	s2 := &sink{}
	require.NoError(t, start(t, cfg2, s2).wait(t))
	ls := s2.lines()
	require.Equal(t, all[len(acked):], texts(ls), "resumes right after the last acked line")
	requireSeqs(t, ls, lastAcked.Seq+1)
	// Lines emitted by the first run but never (or not in order) acked come
	// again with the same numbers.
	for _, r := range recs[k : k+2] {
		for _, l := range r.Lines {
			require.Equal(t, l.Text, ls[l.Seq-ls[0].Seq].Text)
		}
	}
	st = stateFile(t, state)
	require.EqualValues(t, len(all)+1, st["next_seq"])
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.EqualValues(t, fi.Size(), st["offset"])

	cfg3, done3 := config(t, path, state)
	close(done3)
	s3 := &sink{}
	require.NoError(t, start(t, cfg3, s3).wait(t))
	require.Empty(t, s3.lines(), "nothing is counted twice")
}

// TestAckAfterReturnIsHarmless acknowledges a record only after Run
// returned: the checkpoint does not move, and the record is emitted again.
func TestAckAfterReturnIsHarmless(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "llama.log")
	state := t.TempDir()
	require.NoError(t, os.WriteFile(path, []byte("a\nb\n"), 0o644))
	cfg, done := config(t, path, state)
	cfg.AckWait = 0
	close(done)
	s := &sink{ack: func(int) bool { return false }}
	require.NoError(t, start(t, cfg, s).wait(t))
	for _, r := range s.records() {
		r.Ack()
		r.Ack() // a second call is ignored
	}
	ents, err := os.ReadDir(state)
	require.NoError(t, err)
	require.Empty(t, ents, "nothing acked while running, nothing persisted")

	cfg2, done2 := config(t, path, state)
	close(done2)
	s2 := &sink{}
	require.NoError(t, start(t, cfg2, s2).wait(t))
	require.Equal(t, []string{"a", "b"}, texts(s2.lines()))
}

// TestDoneWaitsForAcks acknowledges from another goroutine after a delay:
// Run, told the writer is gone, waits for the acks before returning, so the
// checkpoint covers every line.
func TestDoneWaitsForAcks(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "llama.log")
	state := t.TempDir()
	require.NoError(t, os.WriteFile(path, []byte(joinLines(numbered("l", 0, 10))), 0o644))
	cfg, done := config(t, path, state)
	cfg.Batch.MaxLines = 3
	s := &sink{ack: func(int) bool { return false }}
	r := start(t, cfg, s)
	s.waitLines(t, 10)
	close(done)
	go func() {
		for _, rec := range s.records() {
			rec.Ack()
		}
	}()
	require.NoError(t, r.wait(t))
	require.EqualValues(t, 11, stateFile(t, state)["next_seq"])
}

// runToEnd runs a follower over path with Done already closed and returns
// what it emitted.
func runToEnd(t *testing.T, path, state string) []split.Line {
	t.Helper()
	cfg, done := config(t, path, state)
	close(done)
	s := &sink{}
	require.NoError(t, start(t, cfg, s).wait(t))
	return s.lines()
}

// TestRestartAfterRotation checkpoints in the middle of a file, rotates it
// while the collector is away, and restarts.
func TestRestartAfterRotation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		rotate func(t *testing.T, path string)
		// skipped: the old file's unread lines are lost (it is gone).
		skipped bool
	}{
		{"rename", func(t *testing.T, path string) {
			require.NoError(t, os.Rename(path, path+".1"))
		}, false},
		{"rename_twice", func(t *testing.T, path string) {
			// Our file ends up as .2; .1 is a stranger with other content.
			require.NoError(t, os.Rename(path, path+".2"))
			require.NoError(t, os.WriteFile(path+".1", []byte(joinLines(numbered("stranger", 0, 90))), 0o644))
		}, false},
		{"copytruncate", func(t *testing.T, path string) {
			copyFile(t, path, path+".1")
			require.NoError(t, os.Truncate(path, 0))
		}, false},
		{"deleted", func(t *testing.T, path string) {
			require.NoError(t, os.Remove(path))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "llama.log")
			state := t.TempDir()
			first := numbered("old", 0, 80)
			require.NoError(t, os.WriteFile(path, []byte(joinLines(first)), 0o644))
			ls := runToEnd(t, path, state)
			require.Equal(t, first, texts(ls))

			w := appender(t, path)
			rest := numbered("old", 80, 100)
			write(t, w, joinLines(rest))
			require.NoError(t, w.Close())
			tc.rotate(t, path)
			w = appender(t, path)
			fresh := numbered("new", 0, 30)
			write(t, w, joinLines(fresh))

			want := fresh
			if !tc.skipped {
				want = append(append([]string(nil), rest...), fresh...)
			}
			ls = runToEnd(t, path, state)
			require.Equal(t, want, texts(ls))
			requireSeqs(t, ls, uint64(len(first))+1)

			require.Empty(t, runToEnd(t, path, state), "a third run finds nothing new")
		})
	}
}

// TestRestartRewrittenInPlace checks the checkpoint's first-bytes
// hash: the file is rewritten in place (same inode) with other content,
// so the checkpoint offset must not be trusted.
func TestRestartRewrittenInPlace(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "llama.log")
	state := t.TempDir()
	require.NoError(t, os.WriteFile(path, []byte(joinLines(numbered("first-run", 0, 20))), 0o644))
	require.Len(t, runToEnd(t, path, state), 20)

	// A restarted server truncates and rewrites the same file, longer.
	second := numbered("second-run", 0, 40)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	_, err = f.WriteString(joinLines(second))
	require.NoError(t, err)
	require.NoError(t, f.Close())

	ls := runToEnd(t, path, state)
	require.Equal(t, second, texts(ls))
	requireSeqs(t, ls, 21)
}

func TestSeparateStatePerRunAndPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state := t.TempDir()
	for i := range 2 {
		p := filepath.Join(dir, fmt.Sprintf("%d.log", i))
		require.NoError(t, os.WriteFile(p, []byte("x\n"), 0o644))
		require.Len(t, runToEnd(t, p, state), 1)
	}
	cfg, done := config(t, filepath.Join(dir, "0.log"), state)
	cfg.RunID = "run-2"
	close(done)
	s := &sink{}
	require.NoError(t, start(t, cfg, s).wait(t))
	require.Len(t, s.lines(), 1, "another run id reads the file again")
	ents, err := os.ReadDir(state)
	require.NoError(t, err)
	require.Len(t, ents, 3)
}

// TestOnlyCheckpointedFile: a follower stopped after reading a file; while
// no follower runs, the writer writes on, and then (a) the file is renamed
// away and a new file, another writer's, is put at the path, (b) the file
// is deleted and another put at the path, (c) the file is copied and
// truncated in place (copytruncate) and the writer writes on into it.
// Started again with the writer gone (Done closed) and
// OnlyCheckpointedFile, it reads on in the checkpointed file alone: the
// rest of the renamed file in (a), nothing in (b), the copy's rest and the
// truncated file in (c); never the other writer's lines.
func TestOnlyCheckpointedFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		after func(t *testing.T, path string, w *os.File)
		want  []string
	}{
		{"renamed", func(t *testing.T, path string, w *os.File) {
			require.NoError(t, os.Rename(path, path+".1"))
			write(t, w, "mine-2\n")
			write(t, appender(t, path), "other-0\n")
		}, []string{"mine-1", "mine-2"}},
		{"deleted", func(t *testing.T, path string, w *os.File) {
			require.NoError(t, os.Remove(path))
			write(t, appender(t, path), "other-0\nother-1\n")
		}, nil},
		{"copytruncate", func(t *testing.T, path string, w *os.File) {
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path+".1", b, 0o644))
			require.NoError(t, w.Truncate(0))
			write(t, w, "mine-2\n")
		}, []string{"mine-1", "mine-2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "llama.log")
			state := t.TempDir()
			w := appender(t, path)
			write(t, w, "mine-0\n")
			cfg, _ := config(t, path, state)
			s1 := &sink{}
			r1 := start(t, cfg, s1)
			s1.waitLines(t, 1)
			require.NoError(t, r1.stop(t))
			require.EqualValues(t, 2, stateFile(t, state)["next_seq"])
			write(t, w, "mine-1\n")
			tc.after(t, path, w)

			cfg2, done2 := config(t, path, state)
			cfg2.OnlyCheckpointedFile = true
			close(done2)
			s2 := &sink{}
			require.NoError(t, start(t, cfg2, s2).wait(t))
			require.Equal(t, tc.want, nilIfEmpty(texts(s2.lines())))
			requireSeqs(t, s2.lines(), 2)
		})
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}
