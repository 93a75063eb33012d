package aggregator

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/offline"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// ErrInput marks a recorded stream that cannot be opened or read.
var ErrInput = errors.New("cannot read input")

// ReplayStats counts what a replay could not fold.
type ReplayStats struct {
	Events  int // folded
	Skipped int // lines that were not valid CloudEvents
	Invalid int // valid CloudEvents that are no gttsplit event (unknown type, bad payload)
	// NotStreams are the files with lines but not one event: a saved
	// llama.cpp log or a samples file given to replay instead of parse.
	NotStreams []string
}

// NotAStreamHint is what to say of a file replay found no event in. It
// reads the start of the file: a binary file is said to be one, not sent
// to 'aggregator parse' as if it were a saved log.
func NotAStreamHint(name string) string {
	const streams = "replay reads recorded event streams (events.jsonl, as 'collector run --out' and 'aggregator export' write them)"
	if f, err := os.Open(name); err == nil {
		head := make([]byte, offline.SniffBytes)
		n, _ := io.ReadFull(f, head)
		f.Close()
		if why := offline.NotText(head[:n]); why != "" {
			return fmt.Sprintf("%s is not a recorded event stream but %s: %s", name, why, streams)
		}
	}
	return fmt.Sprintf("%s holds no gttsplit event: %s; a saved llama.cpp log is split by 'aggregator parse %s --samples gtt.txt'", name, streams, name)
}

// ReplayFiles folds recorded streams (events.jsonl files) into runs, the
// same fold `serve` does live. Bad lines and bad events are counted, logged
// at debug and skipped; the rest is folded. A file with lines and no event
// is listed in NotStreams (see NotAStreamHint).
func ReplayFiles(runs *runtable.Runs, files []string, log zerolog.Logger) (ReplayStats, error) {
	var st ReplayStats
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return st, fmt.Errorf("%w: %w", ErrInput, err)
		}
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			f.Close()
			return st, fmt.Errorf("%w: %s is a directory: give the recorded streams in it (%s/*.jsonl)", ErrInput, name, name)
		}
		before := st
		r := events.NewReader(f)
		r.OnError = func(e *events.LineError) {
			log.Debug().Str("file", name).Int("line", e.Line).Err(e.Err).Msg("skipped a bad line")
		}
		for r.Next() {
			d, err := events.Decode(r.Event())
			if err != nil {
				st.Invalid++
				log.Debug().Str("file", name).Int("line", r.Line()).Err(err).Msg("skipped an event")
				continue
			}
			if _, ok := runs.Apply(d, time.Time{}); ok {
				st.Events++
			}
		}
		st.Skipped += r.Skipped()
		f.Close()
		if err := r.Err(); err != nil {
			return st, fmt.Errorf("%w: %s: %w", ErrInput, name, err)
		}
		if st.Events == before.Events && st.Skipped > before.Skipped {
			st.NotStreams = append(st.NotStreams, name) // the caller says so
		}
	}
	return st, nil
}
