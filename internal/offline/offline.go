// Package offline runs the accounting core on saved files: a llama.cpp log
// and samples (a gtt.txt samples file, or a directory holding one snapshot
// of a process's fdinfo/), which is what `aggregator parse` does.
//
// A log file is read once: mapped and scanned in place in blocks on every
// core (mapped.go), or, where it cannot be mapped, read in blocks with
// ReadAt (parallel.go: the blocks, the workers and the in-order applier
// both share); a pipe or standard input is read as a stream, a few blocks
// ahead of the scan (readahead.go). docs/performance.md says which path a
// log takes and what each costs.
package offline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// ErrInput marks a missing or unreadable input file; the CLI exits 2 on it.
var ErrInput = errors.New("cannot read input")

// Parse folds the log at logPath and the samples at samplePaths. It
// returns warnings about inputs that are valid but hold nothing (a samples
// file without a sample); a log that is empty or not a text log is an
// ErrInput.
//
// The log "-" is standard input. A regular file is mapped and scanned in
// place on every core (see readLogMapped), or read in blocks on every
// core where it cannot be mapped; a pipe, a device or standard input is
// read as a stream.
func Parse(fold *split.Fold, logPath string, samplePaths []string) ([]string, error) {
	f := os.Stdin
	if logPath != "-" {
		var err error
		if f, err = os.Open(logPath); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInput, err)
		}
		defer f.Close()
	}
	st, err := f.Stat()
	if err == nil && st.IsDir() {
		return nil, fmt.Errorf("%w: %s is a directory, not a log", ErrInput, logPath)
	}
	regular := logPath != "-" && err == nil && st.Mode().IsRegular()
	var warnings []string
	head := make([]byte, sniffBytes)
	n, _ := io.ReadFull(f, head)
	if why := notText(head[:n]); why != "" {
		return nil, fmt.Errorf("%w: %s is not a text log (%s)", ErrInput, logPath, why)
	}
	if n == 0 {
		// A split of nothing would be all unknowns, passing for a run.
		return nil, fmt.Errorf("%w: %s is empty: there is no log line to split (a collector run whose command could not start writes none)", ErrInput, logPath)
	}
	var size int64
	if regular {
		size = st.Size()
	}
	if _, err := readLog(fold.NewLogFeed("log"), f, regular, size, head[:n]); err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrInput, logPath, err)
	}
	var seq uint64
	for _, p := range samplePaths {
		ss, skipped, err := LoadSamples(p)
		if err != nil {
			return nil, err
		}
		if len(ss) == 0 {
			warnings = append(warnings, fmt.Sprintf("samples %s holds no sample", p))
		}
		fold.NoteSkippedSampleLines(skipped)
		for _, s := range ss {
			seq++
			s.Seq = seq // several files: one numbering
			fold.AddSample(s)
		}
	}
	return warnings, nil
}

// How readLog read a log.
const (
	viaMap    = "mapped"
	viaBlocks = "blocks"
	viaStream = "stream"
)

// readLog feeds the log f to feed: a regular file (of size bytes when
// opened) mapped, or else in blocks read with ReadAt, both from its first
// byte; anything else as a stream, head (what was read of it already)
// first. It returns how it read it.
func readLog(feed *split.LogFeed, f *os.File, regular bool, size int64, head []byte) (string, error) {
	if regular {
		_, err := readLogMapped(feed, f, size, mapBlock, workers())
		if err != errNoMap {
			return viaMap, err
		}
		_, err = readLogParallel(feed, f, size, readBlock, workers())
		return viaBlocks, err
	}
	// One reader, a few blocks ahead of the scan.
	ra := newReadAhead(f)
	defer ra.Close()
	_, err := feed.ReadFrom(io.MultiReader(bytes.NewReader(head), ra))
	feed.Close()
	return viaStream, err
}

// sniffBytes is how much of a log is looked at to tell text from binary.
const sniffBytes = 64 << 10

// notText says why b (the start of a file) is not a text log, or "". A NUL
// byte, or more than 10 % bytes that are neither printable UTF-8 nor
// whitespace, make it binary; the ESC of colour codes is text.
func notText(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if bytes.HasPrefix(b, []byte("\x7fELF")) {
		return "an ELF executable"
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return fmt.Sprintf("binary data: a NUL byte at offset %d", i)
	}
	bad := 0
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && size == 1 && !utf8.FullRune(b[i:]):
			// a character cut by the sniff window
		case r == utf8.RuneError && size == 1:
			bad++
		case r < 0x20 && r != '\n' && r != '\r' && r != '\t' && r != 0x1b:
			bad++
		}
		i += size
	}
	if bad*10 > len(b) {
		return fmt.Sprintf("binary data: %d of its first %d bytes are not text", bad, len(b))
	}
	return ""
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

// SniffBytes is how much of the start of a file NotText needs.
const SniffBytes = sniffBytes

// NotText says why b (the start of a file, SniffBytes of it) is not text,
// or "": what parse refuses a log for, and replay a stream.
func NotText(b []byte) string { return notText(b) }
