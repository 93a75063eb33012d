package bus_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// TestSpoolRejectedSetAsideIntegration spools, with no broker, an event
// the broker will refuse for good (an id over 64 KB: its Nats-Msg-Id
// header is too big) and then an ordinary run; a later publisher on the
// same spool, with the broker back, sets the refused event aside in
// rejected/ with the reason and delivers every event of the ordinary run,
// in order, instead of retrying the refused one ahead of them.
func TestSpoolRejectedSetAsideIntegration(t *testing.T) {
	skipShort(t)
	url, port := deadURL(t)
	cfg := pubConfig(t)
	o := events.Origin{RunID: strings.Repeat("r", 70<<10), Host: "host1", Lane: "gpu0"}
	poison, err := events.NewLogLines(o, []split.Line{{Stream: "stderr", Seq: 1, Text: "x"}})
	require.NoError(t, err)
	evs := runEvents(t, "run-ok", 2)
	a := newAcks()
	p1, err := bus.NewPublisher(connect(t, url), cfg, testLogger(t))
	require.NoError(t, err)
	require.NoError(t, p1.Publish(testCtx(t), poison, a.cb(poison.ID())))
	publishAll(t, p1, evs, a)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, p1.Close(ctx))
	require.Equal(t, len(evs)+1, a.total(), "spooled")

	s := natstest.StartAt(t, t.TempDir(), port)
	js := jsFor(t, s)
	p2, err := bus.NewPublisher(connect(t, s.ClientURL()), cfg, testLogger(t))
	require.NoError(t, err)
	waitMsgs(t, js, uint64(len(evs)))
	require.NoError(t, p2.Close(testCtx(t)))
	st := p2.Stats()
	require.Equal(t, uint64(len(evs)), st.Drained)
	require.Equal(t, uint64(1), st.Dropped)
	require.Equal(t, uint64(1), st.Rejected)
	requireExactlyOnceInOrder(t, exportAll(t, js, bus.Range{}), evs)

	files, err := filepath.Glob(filepath.Join(cfg.Dir(), bus.RejectedDir, "*.json"))
	require.NoError(t, err)
	require.Len(t, files, 1)
	b, err := os.ReadFile(files[0])
	require.NoError(t, err)
	var rec struct {
		Reason  string          `json:"reason"`
		Subject string          `json:"subject"`
		ID      string          `json:"id"`
		Bytes   int             `json:"bytes"`
		Event   json.RawMessage `json:"event"`
	}
	require.NoError(t, json.Unmarshal(b, &rec))
	require.Contains(t, rec.Reason, "header")
	require.Less(t, len(rec.ID), 512, "the id is clipped in the record")
	w, err := events.ToWire(poison)
	require.NoError(t, err)
	require.Equal(t, len(w.Data), rec.Bytes)
	require.JSONEq(t, string(w.Data), string(rec.Event), "the event is kept whole")
}
