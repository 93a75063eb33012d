package offline

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/split"
)

func TestParseRunWithFileAndSnapshotSamples(t *testing.T) {
	t.Parallel()
	td := filepath.Join("..", "..", "testdata")
	f := split.NewFold(split.Options{})
	warnings, err := Parse(f, filepath.Join(td, "runs", "4b", "split.log"),
		[]string{filepath.Join(td, "runs", "4b", "gtt.txt"), filepath.Join(td, "fdinfo", "4b-peak")})
	require.NoError(t, err)
	require.Empty(t, warnings)
	r := f.Report()
	require.InDelta(t, 3925.0, float64(*r.PeakGTTMiB), 1e-9)
	require.InDelta(t, 2375.91, float64(*r.ModelGTTMiB), 1e-9)
	require.Equal(t, 17, r.Detail.Samples, "16 ticks from gtt.txt and one snapshot, numbered apart")
}

func TestParseInputErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := split.NewFold(split.Options{})
	Parse := func(f *split.Fold, log string, samples []string) error {
		_, err := Parse(f, log, samples)
		return err
	}
	require.ErrorIs(t, Parse(f, filepath.Join(dir, "missing.log"), nil), ErrInput)
	require.ErrorIs(t, Parse(f, dir, nil), ErrInput, "a directory is not a log")
	log := filepath.Join(dir, "a.log")
	require.NoError(t, os.WriteFile(log, []byte("x\n"), 0o644))
	require.ErrorIs(t, Parse(f, log, []string{filepath.Join(dir, "nope")}), ErrInput)
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.Mkdir(empty, 0o755))
	require.ErrorIs(t, Parse(f, log, []string{empty}), ErrInput, "a snapshot dir without fd files")
	bad := filepath.Join(dir, "bad.txt")
	require.NoError(t, os.WriteFile(bad, []byte("not a samples file\n"), 0o644))
	require.ErrorIs(t, Parse(f, log, []string{bad}), ErrInput)
}

func TestParseTellsTextFromBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
	exe, err := os.Executable() // the test binary: a real ELF file
	require.NoError(t, err)
	for name, path := range map[string]string{
		"ELF":     exe,
		"NUL":     write("nul.log", []byte("llama_model_loader: loaded meta data\n\x00\x01\x02")),
		"garbage": write("rand.log", bytes.Repeat([]byte{0xff, 0xfe, 0x01, 'a'}, 100)),
	} {
		_, err := Parse(split.NewFold(split.Options{}), path, nil)
		require.ErrorIs(t, err, ErrInput, name)
		require.ErrorContains(t, err, "is not a text log", name)
	}
	// Text with colour codes, CRLF and a UTF-8 character cut at the sniff
	// window is text.
	text := bytes.Repeat([]byte("\x1b[0mload_tensors: CUDA0 model buffer size =  1.00 MiB \u00e9\r\n"), sniffBytes/50)
	text = append(text[:sniffBytes-1], "\u00e9 more\n"...)
	warnings, err := Parse(split.NewFold(split.Options{}), write("text.log", text), nil)
	require.NoError(t, err)
	require.Empty(t, warnings)

	// An empty log is an error (its split would be all unknowns), an
	// empty samples file a warning.
	_, err = Parse(split.NewFold(split.Options{}), write("empty.log", nil), nil)
	require.ErrorIs(t, err, ErrInput)
	require.ErrorContains(t, err, "empty.log is empty: there is no log line to split")
	warnings, err = Parse(split.NewFold(split.Options{}), write("one.log", []byte("main: build = 1\n")), []string{write("empty.txt", nil)})
	require.NoError(t, err)
	require.Len(t, warnings, 1)
	require.Contains(t, warnings[0], "empty.txt holds no sample")
}
