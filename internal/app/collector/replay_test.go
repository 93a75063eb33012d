package collector

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/natsauth"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/conf"
	"github.com/gttsplit/gttsplit/pkg/events"
)

// TestReplayIntegration publishes the 4B recorded stream to an embedded
// nats-server: each event once with its id unchanged; replaying it again, at
// any pace, leaves one copy of each in the stream (JetStream de-duplicates
// by Nats-Msg-Id); lines that are no events are counted and skipped.
func TestReplayIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	file := filepath.Join("..", "..", "..", "testdata", "runs", "4b", "events.jsonl")
	recorded := readJSONL(t, file)
	runID := recorded[0].Origin.RunID
	srv := startBroker(t)
	js := jsConn(t, srv.ClientURL())

	replay := func(pace string, files ...string) ReplayStats {
		t.Helper()
		cfg := testConfig(t)
		cfg.Host = "strix01" // the recorded runs' host: replay sends only its events
		cfg.NATS.URL = srv.ClientURL()
		cfg.Replay.Pace = pace
		st, err := Replay(testCtx(t), cfg, files, newTestIO().io(), testLogger(t))
		require.NoError(t, err, "pace %s", pace)
		return st
	}
	requireStream := func() {
		t.Helper()
		msgs := streamOf(t, js, runID)
		require.Len(t, msgs, len(recorded), "one copy of each event")
		for i, m := range msgs {
			require.Equal(t, recorded[i].ID, m.ID, "event %d: id unchanged, file order kept", i)
			require.Equal(t, m.ID, m.MsgID)
			require.Equal(t, recorded[i], m.Decoded, "event %d: content unchanged", i)
		}
		s, err := js.Stream(testCtx(t), "GTTSPLIT")
		require.NoError(t, err)
		info, err := s.Info(testCtx(t))
		require.NoError(t, err)
		require.Equal(t, uint64(len(recorded)), info.State.Msgs, "nothing else in the stream")
	}

	st := replay("instant", file)
	require.Equal(t, ReplayStats{Sent: len(recorded), Delivered: len(recorded)}, st)
	requireStream()

	// Published again: every copy is a duplicate.
	st = replay("instant", file)
	require.Equal(t, ReplayStats{Sent: len(recorded), Delivered: len(recorded)}, st)
	requireStream()

	// Paced by the events' own time, 1000 times faster.
	st = replay("1000x", file)
	require.Equal(t, len(recorded), st.Delivered)
	requireStream()

	// At the original pace, three samples about 100 ms apart, with a
	// malformed line and an event of an unknown type among them.
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var part bytes.Buffer
	n := 0
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if bytes.Contains(line, []byte(`"type":"`+events.TypeFDInfoSample+`"`)) && n < 3 {
			part.Write(line)
			n++
			if n == 1 {
				part.WriteString("{not an event\n")
				unknown := bytes.Replace(line, []byte(events.TypeFDInfoSample), []byte("io.gttsplit.fdinfo.sample.v9"), 1)
				part.Write(unknown)
			}
		}
	}
	require.Equal(t, 3, n)
	small := filepath.Join(t.TempDir(), "part.jsonl")
	require.NoError(t, os.WriteFile(small, part.Bytes(), 0o644))
	st = replay("original", small)
	require.Equal(t, ReplayStats{Sent: 3, Delivered: 3, Skipped: 1, Invalid: 1}, st)
	requireStream()

	// A signal stops it (before the first event or in the hour's gap after
	// it) without an error.
	var gap bytes.Buffer
	lines := bytes.SplitAfter(b, []byte("\n"))
	gap.Write(lines[0])
	last := lines[len(recorded)-1]
	late := bytes.Replace(last, []byte(`"time":"2026-11-07T14:`), []byte(`"time":"2026-11-07T15:`), 1)
	require.NotEqual(t, last, late)
	gap.Write(late)
	gapFile := filepath.Join(t.TempDir(), "gap.jsonl")
	require.NoError(t, os.WriteFile(gapFile, gap.Bytes(), 0o644))
	cfg := testConfig(t)
	cfg.Host = "strix01" // the recorded runs' host: replay sends only its events
	cfg.NATS.URL = srv.ClientURL()
	cfg.Replay.Pace = "original"
	o := newTestIO()
	o.sigs <- syscall.SIGINT
	tio := o.io()
	tio.InForeground = true // a Ctrl-C typed at a terminal stops replay too: it has no child
	st, err = Replay(testCtx(t), cfg, []string{gapFile}, tio, testLogger(t))
	require.Equal(t, 128+int(syscall.SIGINT), cli.Code(err), "interrupted: 130, err %v", err)
	require.LessOrEqual(t, st.Sent, 1, "stopped in the gap")
	requireStream()
	o = newTestIO()
	o.sigs <- syscall.SIGTERM
	_, err = Replay(testCtx(t), cfg, []string{gapFile}, o.io(), testLogger(t))
	require.Equal(t, 128+int(syscall.SIGTERM), cli.Code(err))
}

// TestReplaySpoolIntegration drains a lane's spool: `collector replay`
// with no file, or with a file that holds no event, delivers what an
// earlier collector of the lane left there and exits 0; with nothing in
// the spool either, a file without events is an error (exit 1) and no
// file at all is fine. Its log names the runs it sent, never a run
// "replay".
func TestReplaySpoolIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	file := filepath.Join("..", "..", "..", "testdata", "runs", "4b", "events.jsonl")
	recorded := readJSONL(t, file)
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	url, port := deadBroker(t)
	cfg := testConfig(t)
	cfg.Host = "strix01" // the recorded runs' host: replay sends only its events
	cfg.NATS.URL = url
	cfg.ShutdownTimeout = 2 * time.Second
	spoolAway := func() {
		t.Helper()
		_, err := Replay(testCtx(t), cfg, []string{file}, newTestIO().io(), testLogger(t))
		require.Equal(t, cli.ExitTempFail, cli.Code(err), "err: %v", err)
	}
	spoolAway()
	srv := startBrokerAt(t, t.TempDir(), port)

	var logs syncBuffer
	st, err := Replay(testCtx(t), cfg, nil, newTestIO().io(), zerolog.New(&logs))
	require.NoError(t, err)
	require.Equal(t, ReplayStats{Delivered: len(recorded)}, st)
	require.NotContains(t, logs.String(), `"run_id":"replay"`)
	require.Contains(t, logs.String(), `"runs":["`+recorded[0].Origin.RunID+`"]`)

	natstest.Shutdown(srv)
	spoolAway()
	srv = startBrokerAt(t, t.TempDir(), port)
	st, err = Replay(testCtx(t), cfg, []string{empty}, newTestIO().io(), testLogger(t))
	require.NoError(t, err, "the spool was delivered")
	require.Equal(t, ReplayStats{Delivered: len(recorded)}, st)
	require.Len(t, streamOf(t, jsConn(t, srv.ClientURL()), recorded[0].Origin.RunID), len(recorded))

	_, err = Replay(testCtx(t), cfg, []string{empty}, newTestIO().io(), testLogger(t))
	require.Equal(t, cli.ExitFailure, cli.Code(err))
	require.ErrorContains(t, err, "no event was published")
	st, err = Replay(testCtx(t), cfg, nil, newTestIO().io(), testLogger(t))
	require.NoError(t, err, "nothing waited, nothing to deliver")
	require.Zero(t, st)
}

// TestReplayNoBrokerIntegration replays with the broker away: nothing is
// claimed delivered, the events wait in the spool, the log says so at WARN
// with the spool and what delivers them, and the error exits 75; a later
// replay with the broker back delivers them first.
func TestReplayNoBrokerIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	file := filepath.Join("..", "..", "..", "testdata", "runs", "4b", "events.jsonl")
	recorded := readJSONL(t, file)
	url, port := deadBroker(t)

	cfg := testConfig(t)
	cfg.Host = "strix01" // the recorded runs' host: replay sends only its events
	cfg.NATS.URL = url
	cfg.ShutdownTimeout = 2 * time.Second
	var logs syncBuffer
	st, err := Replay(testCtx(t), cfg, []string{file}, newTestIO().io(), zerolog.New(&logs))
	require.Equal(t, cli.ExitTempFail, cli.Code(err), "err: %v", err)
	require.Equal(t, ReplayStats{Sent: len(recorded), Left: len(recorded)}, st)
	out := logs.String()
	require.Contains(t, out, `"events":25,`)
	require.Contains(t, out, `"message":"events left undelivered in the spool"`)
	require.Contains(t, out, `"spool":"`+filepath.Join(cfg.Spool.Dir, "gpu0")+`"`)
	require.Contains(t, out, "delivers them first")
	require.Contains(t, out, `"sent":25,"delivered":0,"left_in_spool":25`)
	require.NotContains(t, out, `"published":25`)

	srv := startBrokerAt(t, t.TempDir(), port)
	st, err = Replay(testCtx(t), cfg, []string{file}, newTestIO().io(), testLogger(t))
	require.NoError(t, err)
	require.Equal(t, len(recorded), st.Sent)
	require.Equal(t, 2*len(recorded), st.Delivered, "the spool first, then the file (duplicates)")
	require.Zero(t, st.Left)
	require.Len(t, streamOf(t, jsConn(t, srv.ClientURL()), recorded[0].Origin.RunID), len(recorded))
}

// TestReplaySlowBrokerIntegration replays through a proxy that delays
// every answer of a real server by three times nats.ack_timeout: the
// broker is connected and healthy, only slow (as one under load is). The
// late acks are back-pressure: replay sends again and waits longer,
// delivers every event, spools none and exits 0.
func TestReplaySlowBrokerIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	file := filepath.Join("..", "..", "..", "testdata", "runs", "4b", "events.jsonl")
	recorded := readJSONL(t, file)
	srv := startBroker(t)
	proxy := natstest.StartProxy(t, srv.Addr().String())
	proxy.SetLatency(300 * time.Millisecond)
	cfg := testConfig(t)
	cfg.Host = "strix01" // the recorded runs' host: replay sends only its events
	cfg.NATS.URL = proxy.URL()
	cfg.NATS.AckTimeout = 100 * time.Millisecond
	cfg.ShutdownTimeout = 10 * time.Second
	var logs syncBuffer
	st, err := Replay(testCtx(t), cfg, []string{file}, newTestIO().io(), zerolog.New(&logs))
	require.NoError(t, err, logs.String())
	require.Equal(t, ReplayStats{Sent: len(recorded), Delivered: len(recorded)}, st)
	require.Contains(t, logs.String(), "the broker is slow")
	require.NotContains(t, logs.String(), "spooling events")
	require.Len(t, streamOf(t, jsConn(t, srv.ClientURL()), recorded[0].Origin.RunID), len(recorded))
}

// TestReplayOwnSpoolRemovedIntegration: while another collector of the
// lane holds the lane's spool, a replay gets a spool of its own
// (<lane>-<pid>); once it delivered everything that spool is removed, so
// concurrent collectors leave no directories (with their reserve files)
// behind. One that is left events keeps it and says what delivers them.
func TestReplayOwnSpoolRemovedIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	file := filepath.Join("..", "..", "..", "testdata", "runs", "4b", "events.jsonl")
	srv := startBroker(t)
	cfg := testConfig(t)
	cfg.Host = "strix01" // the recorded runs' host: replay sends only its events
	cfg.NATS.URL = srv.ClientURL()
	cfg.ShutdownTimeout = 2 * time.Second
	cc := bus.DefaultConfig()
	cc.URL = srv.ClientURL()
	nc, err := bus.Connect(testCtx(t), cc, bus.DialOptions{}, testLogger(t))
	require.NoError(t, err)
	pc := bus.DefaultPublisherConfig()
	pc.Spool.Dir, pc.Name = cfg.Spool.Dir, cfg.Lane
	other, err := bus.NewPublisher(nc, pc, testLogger(t)) // holds the lane's spool
	require.NoError(t, err)
	defer other.Close(testCtx(t))

	own := filepath.Join(cfg.Spool.Dir, fmt.Sprintf("%s-%d", cfg.Lane, os.Getpid()))
	_, err = Replay(testCtx(t), cfg, []string{file}, newTestIO().io(), testLogger(t))
	require.NoError(t, err)
	_, err = os.Stat(own)
	require.ErrorIs(t, err, os.ErrNotExist, "the replay's own spool is gone once empty")

	url, _ := deadBroker(t)
	cfg.NATS.URL = url
	var logs syncBuffer
	_, err = Replay(testCtx(t), cfg, []string{file}, newTestIO().io(), zerolog.New(&logs))
	require.Equal(t, cli.ExitTempFail, cli.Code(err))
	require.Positive(t, segmentBytes(own), "a spool with events is kept")
	require.Contains(t, logs.String(), "collector replay --lane "+filepath.Base(own))
}

// TestReplayAsItsHostIntegration: `collector replay --host H` with H's
// credential on a broker whose users are those `aggregator nats-users`
// writes: H's recorded events are delivered (its replies on its own
// inbox, no stream looked up), and another host's events in the same
// files are not sent (its credential could not publish them), said, and
// exit 1.
func TestReplayAsItsHostIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	dir := t.TempDir()
	accounts, err := natsauth.AccountsConf([]string{"strix01", "strix02"}, bus.DefaultStream)
	require.NoError(t, err)
	// The passwords, as nats-server reads them from its environment.
	pw := map[string]string{"AGGREGATOR": "agg-pw", "STRIX01": "s1-pw", "STRIX02": "s2-pw", "SYS": "sys-pw"}
	text := string(accounts)
	for k, v := range pw {
		text = strings.ReplaceAll(text, "$NATS_"+k+"_PASSWORD", strconv.Quote(v))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "accounts.conf"), []byte(text), 0o644))
	main := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(main, []byte(fmt.Sprintf("listen: 127.0.0.1:-1\njetstream { store_dir: %q }\ninclude ./accounts.conf\n",
		filepath.Join(dir, "store"))), 0o644))
	srv := natstest.StartConfigFile(t, main)
	// The stream, as the aggregator's user makes it.
	ajs, err := jetstream.New(natstest.Connect(t, srv.ClientURL(), nats.UserInfo("aggregator", pw["AGGREGATOR"])))
	require.NoError(t, err)
	_, err = bus.EnsureStream(testCtx(t), ajs, bus.DefaultStreamConfig(), testLogger(t))
	require.NoError(t, err)

	file := filepath.Join("..", "..", "..", "testdata", "runs", "4b", "events.jsonl")
	recorded := readJSONL(t, file)
	cfg := testConfig(t)
	cfg.Host = "strix01"
	cfg.NATS.URL, cfg.NATS.User, cfg.NATS.Password = srv.ClientURL(), "strix01", conf.Secret(pw["STRIX01"])
	cfg.ShutdownTimeout = 20 * time.Second
	st, err := Replay(testCtx(t), cfg, []string{file}, newTestIO().io(), testLogger(t))
	require.NoError(t, err)
	require.Equal(t, ReplayStats{Sent: len(recorded), Delivered: len(recorded)}, st)
	require.Len(t, streamOf(t, ajs, recorded[0].Origin.RunID), len(recorded))

	// strix02's credential and --host: strix01's events are not sent.
	cfg.Host, cfg.NATS.User, cfg.NATS.Password = "strix02", "strix02", conf.Secret(pw["STRIX02"])
	var logs syncBuffer
	st, err = Replay(testCtx(t), cfg, []string{file}, newTestIO().io(), zerolog.New(&logs))
	require.Error(t, err)
	require.Equal(t, cli.ExitFailure, cli.Code(err))
	require.Equal(t, ReplayStats{Foreign: len(recorded)}, st)
	require.Contains(t, logs.String(), "not sent: events of other hosts")
}

// TestReplayCorruptSpoolIntegration is the corrupt spool as found: three
// runs' events (75) wait in a lane's spool, 40 bytes in the middle of its
// segment are overwritten. `collector replay` delivers every event the
// bytes did not touch, says at WARN which run lost what, and exits 1
// (before, it delivered the events before the damage only, reported
// nothing dropped and exited 0).
func TestReplayCorruptSpoolIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "runs", "4b", "events.jsonl"))
	require.NoError(t, err)
	const recorded = "strix01-20261107T140311-4b"
	var three []byte
	runs := []string{"corrupt-a", "corrupt-b", "corrupt-c"}
	for _, run := range runs {
		three = append(three, bytes.ReplaceAll(raw, []byte(recorded), []byte(run))...)
	}
	file := filepath.Join(t.TempDir(), "three.jsonl")
	require.NoError(t, os.WriteFile(file, three, 0o644))
	url, port := deadBroker(t)
	cfg := testConfig(t)
	cfg.Host = "strix01" // the recorded runs' host: replay sends only its events
	cfg.NATS.URL = url
	cfg.ShutdownTimeout = 2 * time.Second
	_, err = Replay(testCtx(t), cfg, []string{file}, newTestIO().io(), testLogger(t))
	require.Equal(t, cli.ExitTempFail, cli.Code(err), "err: %v", err)

	segs, err := filepath.Glob(filepath.Join(cfg.Spool.Dir, cfg.Lane, "*.seg"))
	require.NoError(t, err)
	require.Len(t, segs, 1)
	b, err := os.ReadFile(segs[0])
	require.NoError(t, err)
	mid := len(b) / 2
	copy(b[mid:mid+40], bytes.Repeat([]byte("Z"), 40))
	require.NoError(t, os.WriteFile(segs[0], b, 0o600))

	srv := startBrokerAt(t, t.TempDir(), port)
	var logs syncBuffer
	st, err := Replay(testCtx(t), cfg, nil, newTestIO().io(), zerolog.New(&logs))
	require.Equal(t, cli.ExitFailure, cli.Code(err), "err: %v\n%s", err, logs.String())
	require.ErrorContains(t, err, "corrupt records")
	require.Positive(t, st.SpoolLost)
	require.Less(t, st.SpoolLost, int64(len(b)/10), "only the damaged records")
	require.GreaterOrEqual(t, st.Delivered, 73, "every event the 40 bytes did not touch")
	require.Less(t, st.Delivered, 75)
	require.Contains(t, logs.String(), "corrupt spool record")
	js := jsConn(t, srv.ClientURL())
	total := 0
	for _, run := range runs {
		n := len(streamOf(t, js, run))
		if n < 25 {
			require.Contains(t, logs.String(), `"`+run+`"`, "the WARN names the run that lost events")
		}
		total += n
	}
	require.Equal(t, st.Delivered, total)

	// A `collector run` that drains such a spool first exits 1 although
	// its child exited 0, naming the run that lost events.
	natstest.Shutdown(srv)
	_, err = Replay(testCtx(t), cfg, []string{file}, newTestIO().io(), testLogger(t))
	require.Equal(t, cli.ExitTempFail, cli.Code(err), "err: %v", err)
	b, err = os.ReadFile(segs[0])
	require.NoError(t, err)
	copy(b[mid:mid+40], bytes.Repeat([]byte("Z"), 40))
	require.NoError(t, os.WriteFile(segs[0], b, 0o600))
	srv = startBrokerAt(t, t.TempDir(), port)
	logs = syncBuffer{}
	cfg.RunID = "after-corrupt"
	code, err := Run(testCtx(t), cfg, childArgv(t, "src="+absPath(t, fixture4B), "print=0:20"), newTestIO().io(), zerolog.New(&logs))
	require.NoError(t, err)
	require.Equal(t, cli.ExitFailure, code, logs.String())
	require.Contains(t, logs.String(), "corrupt records in the spool were skipped")
	msgs := streamOf(t, jsConn(t, srv.ClientURL()), cfg.RunID)
	require.NotEmpty(t, msgs)
	require.Equal(t, events.TypeRunFinished, msgs[len(msgs)-1].Type, "the run itself was delivered")
}
