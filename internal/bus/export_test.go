package bus

import (
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// SpoolRecordSize returns how many spool bytes ev takes.
func SpoolRecordSize(t testing.TB, ev event.Event) int64 {
	t.Helper()
	w, err := events.ToWire(ev)
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(encodeRecord(w)))
}

// DirectSent returns how many events Publish sent itself, without handing
// them to the publisher's goroutine.
func DirectSent(p *Publisher) uint64 {
	p.pump.mu.Lock()
	defer p.pump.mu.Unlock()
	return p.pump.direct
}
