// Package offline runs the accounting core on saved files: a llama.cpp log
// and samples (a gtt.txt samples file, or a directory holding one snapshot
// of a process's fdinfo/), which is what `aggregator parse` does.
package offline

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// ErrInput marks a missing or unreadable input file; the CLI exits 2 on it.
var ErrInput = errors.New("cannot read input")

// Parse folds the log at logPath and the samples at samplePaths.
func Parse(fold *split.Fold, logPath string, samplePaths []string) error {
	f, err := os.Open(logPath)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInput, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return fmt.Errorf("%w: %s is a directory, not a log", ErrInput, logPath)
	}
	if _, err := fold.ReadLog(f, "log"); err != nil {
		return fmt.Errorf("%w: read %s: %w", ErrInput, logPath, err)
	}
	var seq uint64
	for _, p := range samplePaths {
		ss, skipped, err := LoadSamples(p)
		if err != nil {
			return err
		}
		fold.NoteSkippedSampleLines(skipped)
		for _, s := range ss {
			seq++
			s.Seq = seq // several files: one numbering
			fold.AddSample(s)
		}
	}
	return nil
}

// LoadSamples reads a samples file (gtt.txt) or an fdinfo snapshot
// directory (`cp -r /proc/PID/fdinfo DIR`: one file per fd, named by its
// number; other names are ignored). A snapshot is one tick with no time.
func LoadSamples(path string) ([]split.Sample, int, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrInput, err)
	}
	if !st.IsDir() {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %w", ErrInput, err)
		}
		ss, stats, err := split.ParseSamples(b)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %s: %w", ErrInput, path, err)
		}
		return ss, stats.SkippedLines, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrInput, err)
	}
	var fds []split.FDInfo
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n < 0 || e.Type()&fs.ModeType != 0 && !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(path, e.Name()))
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %w", ErrInput, err)
		}
		fds = append(fds, split.FDInfo{FD: n, Text: string(b)})
	}
	if len(fds) == 0 {
		return nil, 0, fmt.Errorf("%w: %s holds no fdinfo files (names are fd numbers)", ErrInput, path)
	}
	sort.Slice(fds, func(i, j int) bool { return fds[i].FD < fds[j].FD })
	return []split.Sample{{Seq: 1, Procs: []split.ProcFDs{{FDs: fds}}}}, 0, nil
}
