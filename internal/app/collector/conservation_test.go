package collector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/conservation"
	"github.com/gttsplit/gttsplit/internal/disktest"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// fakeServer is a "llama-server" for attach: a sleeping child process
// whose log file the test writes, rotates and truncates itself.
type fakeServer struct {
	t       *testing.T
	dir     string
	logPath string
	gate    string
	pid     int
	runID   string
	exited  chan error
	f       *os.File
	written []string // the complete lines written, in order
	partial []byte   // the bytes of a line without its newline yet
	lines   *lineWatcher
}

func startFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	dir := t.TempDir()
	s := &fakeServer{t: t, dir: dir, logPath: filepath.Join(dir, "llama-server.log"),
		gate: filepath.Join(dir, "exit"), exited: make(chan error, 1)}
	argv := childArgv(t, "gate="+s.gate, "exit=0")
	child := exec.Command(argv[0], argv[1:]...)
	require.NoError(t, child.Start())
	go func() { s.exited <- child.Wait() }() // reaped at once: attach sees it gone
	t.Cleanup(func() {
		_ = child.Process.Kill()
		<-s.exited
		if s.f != nil {
			_ = s.f.Close()
		}
	})
	s.pid = child.Process.Pid
	start, err := procStartTime("/proc", s.pid)
	require.NoError(t, err)
	s.runID = fmt.Sprintf("testhost-pid%d-%d", s.pid, start)
	s.reopen()
	return s
}

// reopen opens (creates) the log file at its path for appending.
func (s *fakeServer) reopen() {
	if s.f != nil {
		require.NoError(s.t, s.f.Close())
	}
	var err error
	s.f, err = os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	require.NoError(s.t, err)
}

// write appends b to the log and notes the lines it completes.
func (s *fakeServer) write(b []byte) {
	_, err := s.f.Write(b)
	require.NoError(s.t, err)
	for len(b) > 0 {
		i := strings.IndexByte(string(b), '\n')
		if i < 0 {
			s.partial = append(s.partial, b...)
			return
		}
		s.written = append(s.written, string(s.partial)+string(b[:i]))
		s.partial, b = nil, b[i+1:]
	}
}

// writeLines appends lines (each with its newline but the last of the
// fixture).
func (s *fakeServer) writeLines(lines [][]byte) {
	for _, l := range lines {
		s.write(l)
	}
}

// rename rotates the log as logrotate does by default: FILE -> FILE.1
// (replacing the older one), and a new FILE.
func (s *fakeServer) rename() {
	require.NoError(s.t, os.Rename(s.logPath, s.logPath+".1"))
	s.reopen()
}

// copytruncate rotates the log as logrotate's copytruncate does: FILE is
// copied to FILE.1, then truncated in place; the writer keeps its file.
func (s *fakeServer) copytruncate() {
	b, err := os.ReadFile(s.logPath)
	require.NoError(s.t, err)
	require.NoError(s.t, os.WriteFile(s.logPath+".1", b, 0o644))
	require.NoError(s.t, s.f.Truncate(0))
}

// exit lets the process exit, with what it wrote so far, and reaps it.
func (s *fakeServer) exit() {
	if len(s.partial) > 0 {
		// At exit the follower emits a last line without newline.
		s.written, s.partial = append(s.written, string(s.partial)), nil
	}
	require.NoError(s.t, os.WriteFile(s.gate, nil, 0o644))
	select {
	case err := <-s.exited:
		s.exited <- nil // for the cleanup, before anything can fail
		require.NoError(s.t, err)
	case <-time.After(waitFor):
		s.t.Fatal("the fake server did not exit")
	}
}

// conservationBroker is a broker that can be stopped and started again on
// the same port and store.
type conservationBroker struct {
	t        *testing.T
	store    string
	port     int
	maxStore int64 // the server's JetStream store limit (0: natstest's)
	srv      *server.Server
	url      string
}

func startConservationBroker(t *testing.T, maxStore int64) *conservationBroker {
	b := &conservationBroker{t: t, store: t.TempDir(), port: -1, maxStore: maxStore}
	b.start()
	b.port, b.url = natstest.Port(b.srv), b.srv.ClientURL()
	return b
}

func (b *conservationBroker) stop() { natstest.Shutdown(b.srv) }

func (b *conservationBroker) start() {
	opts := natstest.Options(b.store, b.port)
	if b.maxStore > 0 {
		opts.JetStreamMaxStore = b.maxStore
	}
	s, err := natstest.NewServerWithOptions(opts)
	require.NoError(b.t, err)
	b.t.Cleanup(func() { natstest.Shutdown(s) })
	b.srv = withStream(b.t, s)
}

// fill publishes to a FILL stream of its own until the server answers
// that its store is full (503 insufficient resources, err_code 10023).
func (b *conservationBroker) fill(t *testing.T) {
	t.Helper()
	js := jsConn(t, b.url)
	_, err := js.CreateOrUpdateStream(testCtx(t), jetstream.StreamConfig{Name: "FILL", Subjects: []string{"fill.>"}})
	require.NoError(t, err)
	data := make([]byte, 64<<10)
	for i := 0; ; i++ {
		_, err := js.Publish(testCtx(t), "fill."+strconv.Itoa(i), data)
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == 10023 {
			return
		}
		require.NoError(t, err)
		require.Less(t, i, 10000, "the store never filled")
	}
}

// free purges the FILL stream: room again.
func (b *conservationBroker) free(t *testing.T) {
	t.Helper()
	st, err := jsConn(t, b.url).Stream(testCtx(t), "FILL")
	require.NoError(t, err)
	require.NoError(t, st.Purge(testCtx(t)))
}

// collectorFault drives one run: it attaches a collector to fs, writes
// the log (lines is the 4B log) under its fault, and returns once every
// event of the run should be in the broker.
type collectorFault struct {
	name     string
	maxStore int64 // the broker's JetStream store limit (0: natstest's)
	drive    func(t *testing.T, rng *rand.Rand, b *conservationBroker, fs *fakeServer, lines [][]byte)
}

// attachCfg is the config of an attach of fs publishing to b.
func attachCfg(t *testing.T, b *conservationBroker, fs *fakeServer) config.Collector {
	cfg := testConfig(t)
	cfg.NATS.URL = b.url
	cfg.Attach.PID = fs.pid
	cfg.Attach.Log = fs.logPath
	cfg.ShutdownTimeout = 5 * time.Second
	return cfg
}

// brokerAwayToExit attaches with cfg, stops the broker at a random line,
// lets the process write the rest and exit (its last events wait in the
// spool), then, after beforeRestart, starts the broker again and delivers
// the spool with a replay of no file, as the next collector start on the
// host does.
func brokerAwayToExit(t *testing.T, rng *rand.Rand, b *conservationBroker, fs *fakeServer, lines [][]byte, cfg config.Collector, beforeRestart func()) {
	t.Helper()
	done := attachAsync(testCtx(t), t, cfg)
	k := 1 + rng.IntN(len(lines)-1)
	fs.writeLines(lines[:k])
	waitLines(t, fs, k)
	b.stop()
	fs.writeLines(lines[k:])
	fs.exit()
	require.NoError(t, waitErr(t, done, "attach"))
	require.Positive(t, segmentBytes(cfg.Spool.Dir), "the run's last events wait in the spool")
	beforeRestart()
	b.start()
	st, err := Replay(testCtx(t), cfg, nil, newTestIO().io(), zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	require.NoError(t, err)
	require.Zero(t, st.Left)
}

// killMidRun starts the `collector attach` binary on fs, writes the log's
// pieces c[0]:c[1] and, once some of it was published, c[1]:c[2], and
// SIGKILLs the collector at once or up to 200 ms later (while it reads
// on). It returns the attach's state dir and a func that starts the
// collector again with the same arguments.
func killMidRun(t *testing.T, rng *rand.Rand, b *conservationBroker, fs *fakeServer, lines [][]byte, c []int) (stateDir string, again func() *binRun) {
	t.Helper()
	cfg := attachCfg(t, b, fs)
	args := []string{"--log-level", "warn", "attach", "--pid", strconv.Itoa(fs.pid), "--log", fs.logPath,
		"--host", "testhost", "--lane", "gpu0", "--nats-url", b.url, "--spool-dir", cfg.Spool.Dir,
		"--state-dir", cfg.Attach.StateDir, "--source-dir", cfg.SourceDir}
	env := []string{"GTTSPLIT_SAMPLE_SYS_ROOT=" + cfg.Sample.SysRoot}
	r := startCollector(t, env, args...)
	fs.writeLines(lines[c[0]:c[1]])
	waitLines(t, fs, 1+rng.IntN(c[1]))
	fs.writeLines(lines[c[1]:c[2]])
	time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGKILL))
	require.Equal(t, -1, r.wait(t), "killed")
	return cfg.Attach.StateDir, func() *binRun { return startCollector(t, env, args...) }
}

// attachAsync runs Attach in this process.
func attachAsync(ctx context.Context, t *testing.T, cfg config.Collector) <-chan error {
	ch := make(chan error, 1)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	go func() { ch <- Attach(ctx, cfg, newTestIO().io(), log) }()
	return ch
}

func waitErr(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(waitFor):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

// lineWatcher counts the distinct lines of a run published to the broker
// (a core subscription, so that waiting costs the broker no consumers);
// the checks read the stream itself.
type lineWatcher struct {
	mu   sync.Mutex
	seqs map[uint64]bool
}

func watchLines(t *testing.T, b *conservationBroker, runID string) *lineWatcher {
	w := &lineWatcher{seqs: map[uint64]bool{}}
	nc := natstest.Connect(t, b.url, nats.ReconnectWait(20*time.Millisecond))
	_, err := nc.Subscribe(events.StreamSubjects, func(m *nats.Msg) {
		d, err := events.DecodeBytes(m.Data)
		if err != nil || d.Origin.RunID != runID {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, l := range d.Lines {
			w.seqs[l.Seq] = true
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return w
}

// waitLines waits until n distinct lines of fs's run were published.
func waitLines(t *testing.T, fs *fakeServer, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d lines published", n), func() bool {
		fs.lines.mu.Lock()
		defer fs.lines.mu.Unlock()
		return len(fs.lines.seqs) >= n
	})
}

// cuts splits n into k pieces at random points (each at least 1 long).
func cuts(rng *rand.Rand, n, k int) []int {
	out := []int{0}
	for i := 1; i < k; i++ {
		lo := out[len(out)-1] + 1
		hi := n - (k - i)
		out = append(out, lo+rng.IntN(hi-lo+1))
	}
	return append(out, n)
}

// TestCollectorConservationIntegration drives attach runs through the
// collector-side faults: the followed log renamed or copytruncated, a
// partial last line, the broker down when the process exits, the spool's
// disk full (a real ENOSPC on a tmpfs the test mounts, as root) while the
// broker is away, the broker's store full (503 insufficient resources), a
// broker slower than the ack timeout (a proxy delays its answers), and the
// collector SIGKILLed and started again (while the process runs on, or
// after it exited: the restart then finishes the run). For every run, every line the
// fake server wrote must be folded exactly once from what reached the
// broker (or the fold is not complete and says what is missing), and the
// fold of the stream must equal the fold of the same events in another
// order (what `aggregator replay` computes does not depend on it).
func TestCollectorConservationIntegration(t *testing.T) {
	skipShort(t)
	t.Parallel()
	lines, _, _ := fixtureLines(t)
	n := conservation.Runs(raceEnabled)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("GTTSPLIT_CONSERVATION_SEED"); v != "" { // to run a failed run again
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d", seed)

	// attachUntilExit attaches, lets drive write the log, then lets the
	// process exit and waits for attach to finish the run.
	inProcess := func(write func(t *testing.T, rng *rand.Rand, b *conservationBroker, fs *fakeServer, lines [][]byte)) func(t *testing.T, rng *rand.Rand, b *conservationBroker, fs *fakeServer, lines [][]byte) {
		return func(t *testing.T, rng *rand.Rand, b *conservationBroker, fs *fakeServer, lines [][]byte) {
			done := attachAsync(testCtx(t), t, attachCfg(t, b, fs))
			write(t, rng, b, fs, lines)
			fs.exit()
			require.NoError(t, waitErr(t, done, "attach"))
		}
	}
	faults := []collectorFault{
		{name: "log rename (rotation) under attach", drive: inProcess(func(t *testing.T, rng *rand.Rand, b *conservationBroker, fs *fakeServer, lines [][]byte) {
			// 2-4 rotations at random lines; right after each, the next
			// piece goes to the new file, while the old one's tail may
			// still be unread.
			c := cuts(rng, len(lines), 3+rng.IntN(3))
			fs.writeLines(lines[c[0]:c[1]])
			for i := 1; i+1 < len(c); i++ {
				waitLines(t, fs, c[i-1]+1) // the follower has the file open
				fs.rename()
				fs.writeLines(lines[c[i]:c[i+1]])
			}
		})},
		{name: "copytruncate under attach", drive: inProcess(func(t *testing.T, rng *rand.Rand, b *conservationBroker, fs *fakeServer, lines [][]byte) {
			// copytruncate loses what is written between the copy and
			// the truncation, and a file regrown past the read offset
			// before the next poll: the writer here waits for the
			// follower before each, as docs/reliability.md says it must.
			// The last piece holds a complete line before the 4B log's
			// partial last one: its first line shows the follower saw
			// the truncation.
			c := cuts(rng, len(lines)-1, 3+rng.IntN(3))
			c[len(c)-1] = len(lines)
			for i := 0; i+1 < len(c); i++ {
				if i > 0 {
					fs.copytruncate()
					fs.writeLines(lines[c[i] : c[i]+1])
					waitLines(t, fs, c[i]+1)
				}
				fs.writeLines(lines[c[i]+min(i, 1) : c[i+1]])
				waitLines(t, fs, min(c[i+1], len(lines)-1))
			}
		})},
		{name: "partial last line under attach (its newline later; the process exits with one)", drive: inProcess(func(t *testing.T, rng *rand.Rand, b *conservationBroker, fs *fakeServer, lines [][]byte) {
			// A line cut at a random byte: the follower holds it until
			// its newline arrives. The 4B log's own last line has no
			// newline: the process exits with it partial.
			// (A line of one byte, an empty line, cannot be cut: another
			// is taken. Both halves hold at least a byte.)
			k := 1 + rng.IntN(len(lines)-2)
			for len(lines[k]) < 2 {
				k = 1 + rng.IntN(len(lines)-2)
			}
			l := lines[k]
			cut := 1 + rng.IntN(len(l)-1)
			fs.writeLines(lines[:k])
			fs.write(l[:cut])
			waitLines(t, fs, k)
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond) // a poll or two with the line partial
			fs.write(l[cut:])
			fs.writeLines(lines[k+1:])
		})},
		{name: "broker down at the process's exit (spooled, delivered by the next collector start)", drive: func(t *testing.T, rng *rand.Rand, b *conservationBroker, fs *fakeServer, lines [][]byte) {
			cfg := attachCfg(t, b, fs)
			cfg.ShutdownTimeout = 2 * time.Second
			brokerAwayToExit(t, rng, b, fs, lines, cfg, func() {})
		}},
		{name: "spool disk full (a real ENOSPC) while the broker is away, from a random line to the process's exit", drive: func(t *testing.T, rng *rand.Rand, b *conservationBroker, fs *fakeServer, lines [][]byte) {
			// The spool's disk is a tmpfs of the test (it needs root),
			// where a collector of the lane ran before (the lane's spool
			// holds its reserve), filled by another file.
			disk := disktest.Tmpfs(t, 4<<20)
			cfg := attachCfg(t, b, fs)
			cfg.Spool.Dir = filepath.Join(disk, "spool")
			cfg.ShutdownTimeout = 2 * time.Second
			_, err := Replay(testCtx(t), cfg, nil, newTestIO().io(), zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
			require.NoError(t, err)
			filler := disktest.Fill(t, disk, "filler")
			// Room again when the broker is back: the next collector of
			// the lane delivers the run's finish, which counts what was
			// dropped.
			brokerAwayToExit(t, rng, b, fs, lines, cfg, func() { require.NoError(t, os.Remove(filler)) })
		}},
		{name: "broker store full (503 insufficient resources) from a random line for 0.2–1.5 s, under attach", maxStore: 8 << 20, drive: func(t *testing.T, rng *rand.Rand, b *conservationBroker, fs *fakeServer, lines [][]byte) {
			cfg := attachCfg(t, b, fs)
			cfg.ShutdownTimeout = 30 * time.Second // the drain backs off up to 10 s
			done := attachAsync(testCtx(t), t, cfg)
			k := 1 + rng.IntN(len(lines)-2)
			m := k + 1 + rng.IntN(len(lines)-1-k)
			fs.writeLines(lines[:k])
			waitLines(t, fs, k)
			b.fill(t)
			fs.writeLines(lines[k:m])
			// The broker answered 10023: the collector spools (and
			// tries the spool's head again) while the store is full.
			eventually(t, "events spooled", func() bool { return segmentBytes(cfg.Spool.Dir) > 0 })
			time.Sleep(time.Duration(200+rng.IntN(1300)) * time.Millisecond)
			b.free(t)
			fs.writeLines(lines[m:])
			fs.exit()
			require.NoError(t, waitErr(t, done, "attach"))
			set, _ := filepath.Glob(filepath.Join(cfg.Spool.Dir, cfg.Lane, bus.RejectedDir, "*"))
			require.Empty(t, set, "an event set aside while the store was full")
		}},
		{name: "slow broker (every answer 250 ms late, nats.ack_timeout 100 ms), under attach", drive: func(t *testing.T, rng *rand.Rand, b *conservationBroker, fs *fakeServer, lines [][]byte) {
			proxy := natstest.StartProxy(t, b.srv.Addr().String())
			proxy.SetLatency(250 * time.Millisecond)
			cfg := attachCfg(t, b, fs)
			cfg.NATS.URL = proxy.URL()
			cfg.NATS.AckTimeout = 100 * time.Millisecond
			cfg.ShutdownTimeout = 30 * time.Second
			done := attachAsync(testCtx(t), t, cfg)
			c := cuts(rng, len(lines), 2+rng.IntN(3))
			for i := 0; i+1 < len(c); i++ {
				fs.writeLines(lines[c[i]:c[i+1]])
				if i == 0 {
					waitLines(t, fs, 1) // attached, before the process may exit
				}
				time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
			}
			fs.exit()
			require.NoError(t, waitErr(t, done, "attach"))
		}},
		{name: "collector SIGKILL mid-run and restart (`collector attach` binary, same --state-dir)", drive: func(t *testing.T, rng *rand.Rand, b *conservationBroker, fs *fakeServer, lines [][]byte) {
			// The last piece, written after the kill, holds a complete
			// line besides the log's partial last one: that all complete
			// lines were published then says the second collector
			// attached, before the process exits (under load it may take
			// longer to start than the first one took to read all).
			c := cuts(rng, len(lines)-1, 3)
			_, again := killMidRun(t, rng, b, fs, lines, c)
			fs.writeLines(lines[c[2]:])
			r := again()
			waitLines(t, fs, len(lines)-1)
			fs.exit()
			require.Equal(t, 0, r.wait(t), r.stderr.String())
		}},
		{name: "collector SIGKILL, the process exits before the restart (`collector attach` binary, same --state-dir: the restart finishes the run)", drive: func(t *testing.T, rng *rand.Rand, b *conservationBroker, fs *fakeServer, lines [][]byte) {
			// The process writes the rest (the 4B log's partial last
			// line too) and exits while no collector watches it.
			c := cuts(rng, len(lines), 3)
			stateDir, again := killMidRun(t, rng, b, fs, lines, c)
			fs.writeLines(lines[c[2]:])
			fs.exit()
			r := again()
			require.Equal(t, 0, r.wait(t), r.stderr.String())
			require.Contains(t, r.stderr.String(), "exited while no collector watched it")
			_, err := os.Stat(filepath.Join(stateDir, sentLogName(fs.runID)))
			require.True(t, os.IsNotExist(err), "the sent log is removed once the run finished")
		}},
	}

	var mu sync.Mutex
	rows := make([]conservation.Row, len(faults))
	for fi, f := range faults {
		t.Run(strings.Fields(f.name)[0]+"_"+strconv.Itoa(fi), func(t *testing.T) {
			t.Parallel()
			row := conservation.Row{Fault: f.name}
			for i := range n {
				t.Run(strconv.Itoa(i), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(seed, uint64(fi*1000+i)))
					b := startConservationBroker(t, f.maxStore)
					fs := startFakeServer(t)
					fs.lines = watchLines(t, b, fs.runID)
					f.drive(t, rng, b, fs, lines)
					checkConservation(t, b, fs, &row)
					row.Runs++
				})
			}
			mu.Lock()
			rows[fi] = row
			mu.Unlock()
		})
	}
	t.Cleanup(func() {
		// A fault whose runs were all skipped (no tmpfs without root) is
		// left out.
		done := slices.DeleteFunc(slices.Clone(rows), func(r conservation.Row) bool { return r.Runs == 0 })
		t.Logf("collector conservation (%d runs per fault):\n%s", n, conservation.Table(done))
	})
}

// checkConservation compares what reached the broker for fs's run with
// the lines fs wrote, and adds the run to row.
func checkConservation(t *testing.T, b *conservationBroker, fs *fakeServer, row *conservation.Row) {
	t.Helper()
	msgs := streamOf(t, jsConn(t, b.url), fs.runID)
	evs := decodedOf(msgs)
	ids := map[string]int{}
	for _, m := range msgs {
		ids[m.ID]++
	}
	dup := len(msgs) - len(ids)
	// Lines: each seq 1..len(written) with the text written; a seq the
	// stream carries twice (re-read after a restart) must carry the same
	// text, the fold keeps one.
	texts := map[uint64]map[string]bool{}
	for _, d := range evs {
		for _, l := range d.Lines {
			if texts[l.Seq] == nil {
				texts[l.Seq] = map[string]bool{}
			}
			texts[l.Seq][l.Text] = true
		}
	}
	lost := 0
	for i, w := range fs.written {
		got := texts[uint64(i+1)]
		switch {
		case !got[w]:
			lost++
		case len(got) > 1:
			dup++
		}
	}
	extra := len(texts) - len(fs.written) // lines nobody wrote
	if extra > 0 {
		dup += extra
	}

	fold := func(order []events.Decoded) (*split.Fold, []byte) {
		f := split.NewFold(split.Options{})
		for _, d := range order {
			f.Apply(d.Input())
		}
		j, err := split.JSON(f.Report())
		require.NoError(t, err)
		return f, j
	}
	live, liveJSON := fold(evs)
	rev := make([]events.Decoded, len(evs))
	for i, d := range evs {
		rev[len(evs)-1-i] = d
	}
	_, revJSON := fold(rev)
	require.Equal(t, string(liveJSON), string(revJSON), "the fold does not depend on the order of the events")
	var folded uint64
	for _, st := range live.Sent().Streams {
		folded += st.Lines
	}

	row.Sent += len(ids)
	row.Lost += lost
	row.Dup += dup
	var rep split.Report
	require.NoError(t, json.Unmarshal(liveJSON, &rep))
	if live.Complete() {
		require.Zero(t, lost, "a complete fold lost %d lines", lost)
		require.Equal(t, uint64(len(fs.written)), folded, "lines folded")
		row.Folded += len(ids)
	} else {
		// Not complete: it must say so, and what is missing.
		row.Flagged++
		require.False(t, rep.Run.Complete)
		require.NotEmpty(t, live.Missing(), "an incomplete fold says what is missing")
		t.Logf("run %s flagged: missing %v (lost %d lines)", fs.runID, live.Missing(), lost)
	}
	require.Zero(t, dup, "duplicated lines or events")
	if lost > 0 {
		require.False(t, live.Complete(), "%d lines lost unflagged", lost)
	}
	n := countTypes(evs)
	require.Equal(t, 1, n[events.TypeRunStarted])
	require.Equal(t, 1, n[events.TypeRunFinished])
}
