package aggregator

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"

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
func ReplayFiles(runs *Runs, files []string, log zerolog.Logger) (ReplayStats, error) {
	var st ReplayStats
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return st, fmt.Errorf("%w: %w", ErrInput, err)
		}
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
	}
	return st, nil
}
