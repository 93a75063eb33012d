package aggregator

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// ExportSelect chooses what Export writes: one run's events, or every
// event stored in a time range (Since/Until are the stream's storage times).
type ExportSelect struct {
	RunID        string
	Since, Until time.Time
}

// Export is `aggregator export`: it writes a range of the JetStream stream
// as a recorded stream (one structured CloudEvent per line), so a past run
// can be re-measured with a newer core by `aggregator replay`. With no NATS
// URL it opens the embedded server's store (which must not be in use by a
// running `serve`) on a free local port.
func Export(ctx context.Context, cfg config.Aggregator, sel ExportSelect, w io.Writer, log zerolog.Logger) (int, error) {
	c := cfg
	if c.NATS.URL == "" {
		c.Embedded.Listen = "127.0.0.1:0"
	}
	b, err := openBroker(ctx, c, log)
	if err != nil {
		return 0, forReader(err)
	}
	defer b.close()
	r := bus.Range{Start: sel.Since, End: sel.Until}
	kinds := []events.Kind{events.KindRun, events.KindLog, events.KindFDInfo}
	for _, k := range kinds {
		// Both the partitioned subjects and those of events stored
		// before the stream was partitioned.
		r.Subjects = append(r.Subjects, bus.StoredFilters(k, "", "", sel.RunID)...)
	}
	jw := events.NewWriter(w)
	n, err := bus.Export(ctx, b.js, c.NATS.Stream, r, func(m bus.Msg) error {
		ev, err := events.Unmarshal(m.Data())
		if err != nil {
			log.Warn().Err(err).Str("subject", m.Subject()).Msg("not a CloudEvent; not exported")
			return nil
		}
		if sel.RunID != "" {
			if d, err := events.Decode(ev); err == nil && d.Origin.RunID != sel.RunID {
				return nil // a token collision: another run's subject
			}
		}
		return jw.Write(ev)
	})
	if err != nil {
		return n, fmt.Errorf("export: %w", err)
	}
	return n, nil
}
