package aggregator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/events"
)

// whileProgress waits for cond as eventually does, but its deadline moves
// on whenever progress grows: work that goes on slowly on a loaded machine
// is no stall.
func whileProgress(t testing.TB, what string, cond func() bool, progress func() float64) {
	t.Helper()
	last := progress()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if p := progress(); p > last {
			last, deadline = p, time.Now().Add(waitFor)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (no progress for %s, at %.0f)", what, waitFor, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// hugeIDEvent is a log-lines event of the fixture's run whose id is n bytes
// long (and so does not match its payload: invalid). Its dead letter as is
// would carry the id twice, in the body and in the reason header.
func hugeIDEvent(t testing.TB, w events.Wire, n int) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(w.Data, &m))
	m["id"] = strings.Repeat("x", n)
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

// TestServePoisonFloodIntegration publishes 1,100 (100 under -race) invalid events with an
// id over 64 KB (about 77 MB), then an ordinary run: each poison event
// leaves the consumer (dead-lettered as a truncated copy with the reason,
// then terminated) and the ordinary run is folded; the time from its
// publication to its split is logged, not asserted.
func TestServePoisonFloodIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	cfg := testConfig(t, b.url)
	cfg.HTTP.Listen = "127.0.0.1:0"
	s := startServe(t, cfg, ServeOptions{})

	var logWire events.Wire
	for i, d := range fx.Decoded {
		if d.Lines != nil {
			logWire = fx.Wires[i]
			break
		}
	}
	flood := 1100
	if raceEnabled {
		// The in-process server is several times slower: 250 took 82 s
		// of a loaded machine (each poison event handled alone), and
		// nothing here depends on the count.
		flood = 100
	}
	start := time.Now()
	var futs []jetstream.PubAckFuture
	body := hugeIDEvent(t, logWire, 70<<10)
	at := bytes.Index(body, []byte("xxxxxxxx"))
	require.Positive(t, at)
	for i := range flood {
		m := nats.NewMsg(logWire.Subject)
		m.Data = bytes.Clone(body)
		copy(m.Data[at:], fmt.Sprintf("%08d", i)) // distinct bodies
		f, err := b.js.PublishMsgAsync(m)
		require.NoError(t, err)
		futs = append(futs, f)
	}
	waitPublished(t, futs)
	t.Logf("published %d poison events in %s", flood, time.Since(start).Round(time.Millisecond))
	// One more that fits the broker's max_payload only without the dead
	// letter's headers: it goes to the dead-letter subject truncated.
	maxPayload := int(b.NC.MaxPayload())
	big := append([]byte(`{"specversion":"1.0","id":"`), bytes.Repeat([]byte("z"), maxPayload-120)...)
	b.publishRaw(t, logWire.Subject, big)

	start = time.Now()
	b.publish(t, fx.Wires...)
	// How long the flood takes depends on the machine's load: the waits
	// fail only when the dead letters stop coming.
	deadLettered := func() float64 {
		_, page := tryGet(s.http, "/metrics")
		v, _ := strconv.ParseFloat(metricValue(page, `gttsplit_events_dead_lettered_total{reason="invalid"}`), 64)
		return v
	}
	whileProgress(t, "the ordinary run's split", func() bool { n, _ := s.closes.count(); return n >= 1 }, deadLettered)
	t.Logf("ordinary run (%d events) folded %s after its publication, behind %d poison events",
		len(fx.Wires), time.Since(start).Round(time.Millisecond), flood)

	whileProgress(t, "every message acknowledged", func() bool { return b.Idle(t, cfg.Consumer.Fleet.Group) }, deadLettered)
	t.Logf("every message settled %s after the ordinary run's publication", time.Since(start).Round(time.Millisecond))
	msgs := b.streamMsgs(t, "gttsplit.dlq.>")
	require.Len(t, msgs, flood+1)
	// Handled in parallel (and a naked one redelivered later): the
	// truncated one may be anywhere.
	sort.SliceStable(msgs, func(i, j int) bool {
		return msgs[i].Headers().Get("Gttsplit-Truncated") == "" && msgs[j].Headers().Get("Gttsplit-Truncated") != ""
	})
	for _, m := range msgs[:flood] {
		require.Equal(t, logWire.Subject, m.Headers().Get("Gttsplit-Original-Subject"))
		reason := m.Headers().Get("Gttsplit-Reason")
		require.Contains(t, reason, events.ErrInvalid.Error())
		require.Less(t, len(reason), 1200, "the reason is clipped")
		require.Empty(t, m.Headers().Get("Gttsplit-Truncated"))
		require.Greater(t, len(m.Data()), 70<<10, "dead-lettered as is")
	}
	last := msgs[flood]
	require.Equal(t, fmt.Sprint(len(big)), last.Headers().Get("Gttsplit-Truncated"))
	require.Equal(t, big[:4096], last.Data())
	require.Contains(t, last.Headers().Get("Gttsplit-Reason"), events.ErrInvalid.Error())
	metrics := httpGet(t, s.http, "/metrics", http.StatusOK)
	require.Contains(t, metrics, fmt.Sprintf(`gttsplit_events_dead_lettered_total{reason="invalid"} %d`, flood+1))
	require.NoError(t, s.stop(t))
	require.Equal(t, string(fx.Want), string(sinkDocs(t, cfg.Sinks.JSON.Dir)[fx.Origin.RunID]))
}
