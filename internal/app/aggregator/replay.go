package aggregator

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"

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
}

// ReplayFiles folds recorded streams (events.jsonl files) into runs, the
// same fold `serve` does live. Bad lines and bad events are counted, logged
// at debug and skipped; the rest is folded.
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
			log.Warn().Str("file", name).Int("bad_lines", st.Skipped-before.Skipped).
				Msg("no event in this file: replay reads recorded event streams (events.jsonl); for a saved llama.cpp log use 'aggregator parse " + name + "'")
		}
	}
	return st, nil
}
