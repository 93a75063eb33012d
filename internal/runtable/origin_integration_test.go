package runtable_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// logBuf is a log both the table and the test use.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// reasons are the Gttsplit-Reason headers of the dead letters.
func reasons(t *testing.T, b *rt.Broker) []string {
	var out []string
	for _, m := range b.StreamMsgs(t, "gttsplit.dlq.>") {
		out = append(out, m.Headers().Get("Gttsplit-Reason"))
	}
	return out
}

// replacing is fx's split as a run closed incomplete with the split inc
// (its split n) and completed by its host's late events writes it: the
// recorded split, saying it replaces inc.
func replacing(t testing.TB, fx rt.Fixture, inc split.Report, n int) []byte {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, inc.Run.Finished) // (the close's time)
	require.NoError(t, err)
	want := fx.Report
	want.Replacing(split.Replaced{Written: at.UTC().Format(time.RFC3339), Split: n, Missing: inc.Detail.Missing})
	js, err := split.JSON(want)
	require.NoError(t, err)
	return js
}

// exitedWith is fx's run-finished event with another exit status.
func exitedWith(t testing.TB, fx rt.Fixture, code int) events.Wire {
	t.Helper()
	finish := *fx.Decoded[fx.FinishedIndex(t)].Finished
	finish.Info.ExitCode = &code
	ev, err := events.NewRunFinished(fx.Origin, finish.Info, finish.Detail)
	require.NoError(t, err)
	w, err := events.ToWire(ev)
	require.NoError(t, err)
	return w
}

// An event that does not speak for the host whose subject it came on is
// dead-lettered with reason origin, counted, and said once per sender and
// source; so is an event of another host for a run, and one whose subject
// names another lane. None is folded: the run's split is the recorded one.
func TestForeignOriginDeadLetteredIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	opts := rt.FoldOptions(t)
	fx := rt.Load(t, fixture4B, opts)
	b := rt.StartBroker(t)
	var logs logBuf
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	r := startTableLog(t, b.URL, "origin", tableConfig{idle: time.Hour}, zerolog.New(&logs))
	r.waitOwns(r.parts)

	// strix02 publishes, on its own subjects, events that say they are
	// strix01's (the first twice: one warning).
	fin := fx.FinishedIndex(t)
	for _, i := range []int{1, 2, fin} {
		w := fx.Wires[i]
		b.PublishRaw(t, events.Subject(events.KindLog, "strix02", fx.Origin.Lane, fx.Origin.RunID), w.Data)
	}
	// The run itself, from its host, but its finish held back.
	b.Publish(t, fx.Without(fin)...)
	// strix02 sends, as itself, a line and the finish for strix01's run.
	as02 := fx.Origin
	as02.Host = "strix02"
	// (Under message ids of its own: the ids it would have are the
	// genuine events', which the stream would drop as duplicates.)
	for _, i := range []int{1, fin} {
		w, err := rt.Rewrite(fx.Decoded[i], as02)
		require.NoError(t, err)
		b.PublishIDs(t, []events.Wire{w}, []string{"strix02/" + w.ID})
	}
	// strix01's own line, on a subject naming another lane.
	w := lateLine(t, fx)
	b.PublishRaw(t, events.Subject(events.KindLog, fx.Origin.Host, "gpu9", fx.Origin.RunID), w.Data)
	rt.Eventually(t, "six dead-lettered for their origin", func() bool {
		return counter(t, r.m, "gttsplit_events_dead_lettered_total", "origin") == 6
	})
	b.WaitAcked(t, "origin")
	got := strings.Join(reasons(t, b), "\n")
	require.Contains(t, got, `origin: the event's host "strix01" is not the subject's "strix02"`)
	require.Contains(t, got, "origin: run "+fx.Origin.RunID+" is host strix01's, lane gpu0, not host strix02's, lane gpu0")
	require.Contains(t, got, `origin: the event's lane "gpu0" is not the subject's "gpu9"`)
	require.Equal(t, 1, strings.Count(logs.String(), `"from_host":"strix02","source":"urn:gttsplit:collector:strix01"`), "said once per sender and source")
	require.Equal(t, 1, strings.Count(logs.String(), `"from_host":"strix02","source":"urn:gttsplit:collector:strix02"`))
	n, _ := r.closes.count()
	require.Zero(t, n, "the forged finish closed nothing")

	// The genuine finish closes the run with the recorded split.
	b.Publish(t, fx.Wires[fin])
	rt.Eventually(t, "the split", func() bool { n, _ := r.closes.count(); return n == 1 })
	js, err := split.JSON(r.closes.of(fx.Origin.RunID)[0])
	require.NoError(t, err)
	require.Equal(t, string(fx.Want), string(js))
}

// A run closed complete is final: a byte-identical re-send (under another
// message id, past the stream's duplicate window) is a duplicate; a new
// line, and a finish or a start that differs from the one folded, are
// dead-lettered with reason final; the split stays the one written, and
// nothing is written again.
func TestCompleteRunIsFinalIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	opts := rt.FoldOptions(t)
	fx := rt.Load(t, fixture4B, opts)
	b := rt.StartBroker(t)
	const group = "final"
	r := startTable(t, b.URL, group, tableConfig{idle: time.Hour})
	r.waitOwns(r.parts)
	id := fx.Origin.RunID
	b.Publish(t, fx.Wires...)
	rt.Eventually(t, "the split", func() bool { n, _ := r.closes.count(); return n == 1 })
	b.WaitAcked(t, group)
	before := b.State(t, id, opts)
	require.True(t, before.Closed)

	// Every event again, under other message ids: all duplicates.
	ids := make([]string, len(fx.Wires))
	for i := range ids {
		ids[i] = fx.Wires[i].ID + "/again"
	}
	dups, red := counter(t, r.m, "gttsplit_events_duplicate_total"), counter(t, r.m, "gttsplit_events_redelivered_total")
	b.PublishIDs(t, fx.Wires, ids)
	rt.Eventually(t, "the re-sent events counted as duplicates", func() bool {
		return counter(t, r.m, "gttsplit_events_duplicate_total") >= dups+float64(len(fx.Wires))
	})
	b.WaitAcked(t, group)
	duplicatesWithin(t, r.m, dups, red, len(fx.Wires))
	require.Zero(t, counter(t, r.m, "gttsplit_events_dead_lettered_total", "final"), "a byte-identical re-send is no new event")

	// A new line; a finish with another exit code; a start with another
	// command.
	wFin := exitedWith(t, fx, 137)
	start := *fx.Decoded[0].Started
	start.Info.Command += " --extra"
	forgedStart, err := events.NewRunStarted(start.Info, start.Detail)
	require.NoError(t, err)
	wStart, err := events.ToWire(forgedStart)
	require.NoError(t, err)
	b.PublishIDs(t, []events.Wire{lateLine(t, fx), wFin, wStart}, []string{"", "forged-finish", "forged-start"})
	rt.Eventually(t, "three dead-lettered as final", func() bool {
		return counter(t, r.m, "gttsplit_events_dead_lettered_total", "final") == 3
	})
	b.WaitAcked(t, group)
	for _, why := range reasons(t, b) {
		require.Contains(t, why, "final: run "+id+" closed complete at ")
	}
	got := strings.Join(reasons(t, b), "\n")
	require.Contains(t, got, "brings what the run did not hold")
	require.Contains(t, got, "(io.gttsplit.run.finished.v1 "+wFin.ID+") is not byte for byte an event the run folded")
	require.Contains(t, got, "(io.gttsplit.run.started.v1 "+wStart.ID+") is not byte for byte an event the run folded")

	time.Sleep(300 * time.Millisecond)
	n, _ := r.closes.count()
	require.Equal(t, 1, n, "no split written again")
	after := b.State(t, id, opts)
	require.Equal(t, before.Reported, after.Reported, "the split stays the split")
	require.Equal(t, 1, after.Splits)
	require.True(t, after.Closed)
	require.Equal(t, float64(0), counter(t, r.m, "gttsplit_runs_open"))
}

// A run closed incomplete (the idle timeout) is not final: its own host's
// late finish re-opens it and its complete split replaces the incomplete
// one, while another host's finish for it is refused. A run closed
// incomplete and compacted since takes a new event no more (reason late).
func TestIncompleteRunCompletedByItsHostIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	opts := rt.FoldOptions(t)
	fx := rt.Load(t, fixture4B, opts)
	b := rt.StartBroker(t)
	const group, idle, grace = "incomplete", 10 * time.Minute, time.Hour
	clk := newFakeClock()
	r := startTable(t, b.URL, group, tableConfig{idle: idle, store: runtable.StoreConfig{CompactAfter: grace}, now: clk.now})
	r.waitOwns(r.parts)
	id := fx.Origin.RunID
	fin := fx.FinishedIndex(t)

	// A second run, from the same recording, closed incomplete too.
	other := fx.Origin
	other.RunID = id + "-b"
	var otherWires []events.Wire
	for i, d := range fx.Decoded {
		if i == fin {
			continue
		}
		w, err := rt.Rewrite(d, other)
		require.NoError(t, err)
		otherWires = append(otherWires, w)
	}
	b.Publish(t, fx.Without(fin)...)
	b.Publish(t, otherWires...)
	b.WaitAcked(t, group)
	clk.advance(idle + time.Second)
	rt.Eventually(t, "both incomplete splits", func() bool { n, _ := r.closes.count(); return n == 2 })
	require.False(t, r.closes.of(id)[0].Run.Complete)

	// Another host's finish for it: refused, the run stays closed.
	as02 := fx.Origin
	as02.Host = "strix02"
	w, err := rt.Rewrite(fx.Decoded[fin], as02)
	require.NoError(t, err)
	b.PublishIDs(t, []events.Wire{w}, []string{"strix02/" + w.ID})
	rt.Eventually(t, "the other host's finish refused", func() bool {
		return counter(t, r.m, "gttsplit_events_dead_lettered_total", "origin") == 1
	})
	require.True(t, b.State(t, id, opts).Closed)

	// Its own host's finish: re-opened, and the complete split replaces
	// the incomplete one, saying so: when that one was written, its
	// number, what it lacked. The split is otherwise the recorded one.
	incomplete := b.State(t, id, opts)
	b.Publish(t, fx.Wires[fin])
	rt.Eventually(t, "the complete split", func() bool { return len(r.closes.of(id)) == 2 })
	wantJS := replacing(t, fx, r.closes.of(id)[0], 0)
	require.Contains(t, string(wantJS), `"written": "`+incomplete.ClosedAt.UTC().Format(time.RFC3339)+`"`)
	require.Contains(t, string(wantJS), `"missing": [
        "the run-finished event"
      ]`)
	var want split.Report
	require.NoError(t, json.Unmarshal(wantJS, &want))
	js, err := split.JSON(r.closes.of(id)[1])
	require.NoError(t, err)
	require.Equal(t, string(wantJS), string(js))
	require.Contains(t, string(js), `"replaces_incomplete"`)
	require.Equal(t, 2, b.State(t, id, opts).Splits)
	require.Equal(t, string(wantJS), b.State(t, id, opts).Reported, "the closed state holds the replacing split")
	rt.Eventually(t, "both split events", func() bool { return len(b.SplitEvents(t)[id]) == 2 })
	require.Equal(t, want.Run.Replaces, b.SplitEvents(t)[id][1].Run.Replaces, "the split event says it too")
	require.Nil(t, b.SplitEvents(t)[id][0].Run.Replaces)

	// The other run, compacted after its grace, takes no late finish.
	clk.advance(grace + time.Second)
	rt.Eventually(t, "the compact record", func() bool { return b.State(t, other.RunID, opts).Compact() })
	w, err = rt.Rewrite(fx.Decoded[fin], other)
	require.NoError(t, err)
	b.Publish(t, w)
	rt.Eventually(t, "the late finish dead-lettered", func() bool {
		return counter(t, r.m, "gttsplit_events_dead_lettered_total", "late") == 1
	})
	require.Zero(t, counter(t, r.m, "gttsplit_events_dead_lettered_total", "final"))
	require.Len(t, r.closes.of(other.RunID), 1)
}

// altered are events of fx's run at positions the run holds, with other
// bytes: its first log-lines event with its first line's text changed,
// its first sample with its time a millisecond later, and its run-started
// event with the same content, indented (another encoding of the same
// values). Each has the id of the event it alters.
func altered(t testing.TB, fx rt.Fixture) []events.Wire {
	t.Helper()
	var out []events.Wire
	for i, d := range fx.Decoded {
		switch {
		case d.Lines != nil && len(out) == 0:
			ls := append([]split.Line(nil), d.Lines...)
			ls[0].Text += " (altered)"
			w, err := rt.Rewrite(events.Decoded{Lines: ls}, fx.Origin)
			require.NoError(t, err)
			require.Equal(t, fx.Wires[i].ID, w.ID, "the same position, the same id")
			out = append(out, w)
		case d.Sample != nil && len(out) == 1:
			s := *d.Sample
			s.Time = s.Time.Add(time.Millisecond)
			w, err := rt.Rewrite(events.Decoded{Sample: &s}, fx.Origin)
			require.NoError(t, err)
			require.Equal(t, fx.Wires[i].ID, w.ID)
			out = append(out, w)
		}
	}
	require.Len(t, out, 2)
	var buf bytes.Buffer
	require.NoError(t, json.Indent(&buf, fx.Wires[0].Data, "", "  "))
	re := fx.Wires[0]
	re.Data = buf.Bytes()
	d, err := events.DecodeBytes(re.Data)
	require.NoError(t, err)
	require.Equal(t, fx.Decoded[0].Started, d.Started, "the same start, other bytes")
	return append(out, re)
}

// A run closed complete compares a re-send by its bytes: the events of
// its recorded stream, byte for byte (the file's own lines, under other
// message ids), are duplicates; an event at a position it holds with
// other bytes (a line's text, a sample's time, the same start encoded
// otherwise) is dead-lettered as final. A state an earlier version wrote
// keeps no fingerprints: there such a re-send is a duplicate by position,
// as it was, and only what brings new positions or changes the split is
// final. Within the stream's duplicate window the broker itself drops an
// event whose message id it stored, whatever its bytes: the table never
// sees it.
func TestFinalRunComparesBytesIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	opts := rt.FoldOptions(t)
	fx := rt.Load(t, fixture4B, opts)
	old := rt.Load(t, fixture27B, opts)
	b := rt.StartBroker(t)
	const group = "bytes"
	r := startTable(t, b.URL, group, tableConfig{idle: time.Hour})
	r.waitOwns(r.parts)
	b.Publish(t, fx.Wires...)
	b.Publish(t, old.Wires...)
	rt.Eventually(t, "both splits", func() bool { n, _ := r.closes.count(); return n == 2 })
	b.WaitAcked(t, group)
	st := b.State(t, fx.Origin.RunID, opts)
	require.True(t, st.Closed)
	require.NotNil(t, st.Digests)
	require.Equal(t, uint64(len(fx.Wires)), st.Digests.Len(), "a fingerprint per event folded")

	// The duplicate window: an altered line under its genuine message id
	// is dropped by the broker.
	alt := altered(t, fx)
	m := nats.NewMsg(alt[0].Subject)
	m.Data = alt[0].Data
	m.Header.Set(jetstream.MsgIDHeader, alt[0].ID)
	ack, err := b.JS.PublishMsg(rt.Ctx(t), m)
	require.NoError(t, err)
	require.True(t, ack.Duplicate, "within the duplicate window the broker drops the same id")

	// The recorded stream's own bytes: duplicates.
	raw, err := os.ReadFile(fixture4B)
	require.NoError(t, err)
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	require.Len(t, lines, len(fx.Wires))
	for i, l := range lines {
		b.PublishIDs(t, []events.Wire{{Subject: fx.Wires[i].Subject, ID: fx.Wires[i].ID, Data: l}}, []string{fx.Wires[i].ID + "/replayed"})
	}
	rt.Eventually(t, "the replayed stream counted as duplicates", func() bool {
		return counter(t, r.m, "gttsplit_events_duplicate_total") >= float64(len(lines))
	})
	b.WaitAcked(t, group)
	red := counter(t, r.m, "gttsplit_events_redelivered_total")
	duplicatesWithin(t, r.m, 0, 0, len(lines))
	require.Zero(t, counter(t, r.m, "gttsplit_events_dead_lettered_total", "final"), "the recorded bytes are no new event")
	dups := counter(t, r.m, "gttsplit_events_duplicate_total")

	// Other bytes at positions the run holds: final.
	ids := []string{"alt-line", "alt-sample", "alt-start"}
	b.PublishIDs(t, alt, ids)
	rt.Eventually(t, "three dead-lettered as final", func() bool {
		return counter(t, r.m, "gttsplit_events_dead_lettered_total", "final") == 3
	})
	b.WaitAcked(t, group)
	got := strings.Join(reasons(t, b), "\n")
	for _, w := range alt {
		require.Contains(t, got, w.ID+") is not byte for byte an event the run folded")
	}
	duplicatesWithin(t, r.m, dups, red, 0) // the altered events are none

	// A closed state an earlier version wrote: no "digests".
	kv, err := b.JS.KeyValue(rt.Ctx(t), runtable.Bucket)
	require.NoError(t, err)
	e, err := kv.Get(rt.Ctx(t), runtable.StateKey(old.Origin.RunID))
	require.NoError(t, err)
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(e.Value(), &fields))
	require.Contains(t, fields, "digests")
	delete(fields, "digests")
	earlier, err := json.Marshal(fields)
	require.NoError(t, err)
	_, err = kv.Put(rt.Ctx(t), runtable.StateKey(old.Origin.RunID), earlier)
	require.NoError(t, err)
	require.Nil(t, b.State(t, old.Origin.RunID, opts).Digests)
	dups, red = counter(t, r.m, "gttsplit_events_duplicate_total"), counter(t, r.m, "gttsplit_events_redelivered_total")
	b.PublishIDs(t, altered(t, old), []string{"old-alt-line", "old-alt-sample", "old-alt-start"})
	rt.Eventually(t, "by position, and the start by the split it gives: duplicates", func() bool {
		return counter(t, r.m, "gttsplit_events_duplicate_total") >= dups+3
	})
	b.WaitAcked(t, group)
	duplicatesWithin(t, r.m, dups, red, 3)
	require.Equal(t, 3.0, counter(t, r.m, "gttsplit_events_dead_lettered_total", "final"), "none of them final")
	wFin := exitedWith(t, old, 137)
	b.PublishIDs(t, []events.Wire{lateLine(t, old), wFin}, []string{"old-new-line", "old-forged-finish"})
	rt.Eventually(t, "a new line, a finish that changes the split: final", func() bool {
		return counter(t, r.m, "gttsplit_events_dead_lettered_total", "final") == 5
	})
	b.WaitAcked(t, group)
	require.Contains(t, strings.Join(reasons(t, b), "\n"), "(io.gttsplit.run.finished.v1 "+wFin.ID+") differs from the one the run folded")

	// Nothing changed either run.
	n, _ := r.closes.count()
	require.Equal(t, 2, n, "no split written again")
	for _, f := range []rt.Fixture{fx, old} {
		after := b.State(t, f.Origin.RunID, opts)
		require.Equal(t, string(f.Want), after.Reported, "the split stays the split")
		require.Equal(t, 1, after.Splits)
	}
	require.Nil(t, b.State(t, old.Origin.RunID, opts).Digests, "an earlier version's state is not given fingerprints it cannot have")
}
