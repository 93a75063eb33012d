package deploy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsNode is one node of deploy/nats, made to run on this machine.
type natsNode struct {
	name                   string
	conf                   string // the substituted configuration
	client, route, monitor int
}

func (n natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.client) }

// natsPasswords are the passwords accounts.conf reads from the environment.
func natsPasswords(t testing.TB) []string {
	t.Helper()
	var env []string
	for _, name := range accountsEnv(t) {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		env = append(env, name+"="+hex.EncodeToString(b))
	}
	return env
}

// accountsEnv lists the environment variables accounts.conf refers to.
func accountsEnv(t testing.TB) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$(NATS_[A-Z0-9_]+)`).FindAllStringSubmatch(readFile(t, "deploy/nats/accounts.conf"), -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			out = append(out, m[1])
		}
	}
	if len(out) == 0 {
		t.Fatal("accounts.conf reads no password from the environment")
	}
	return out
}

// natsCluster writes n1.conf, n2.conf and n3.conf of deploy/nats into dir
// with this machine's free ports and stores, accounts.conf beside them.
// Every address a file names is substituted; a file that no longer has
// one of them fails the test (change the substitution with the file).
func natsCluster(t testing.TB, dir string) []natsNode {
	t.Helper()
	ports := freePorts(t, 9)
	var nodes []natsNode
	for i := range 3 {
		nodes = append(nodes, natsNode{name: fmt.Sprintf("n%d", i+1), client: ports[i], route: ports[3+i], monitor: ports[6+i]})
	}
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), []byte(readFile(t, "deploy/nats/accounts.conf")), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range nodes {
		n := &nodes[i]
		conf := readFile(t, "deploy/nats/"+n.name+".conf")
		subst := []string{
			"0.0.0.0:4222", fmt.Sprintf("127.0.0.1:%d", n.client),
			"0.0.0.0:6222", fmt.Sprintf("127.0.0.1:%d", n.route),
			"0.0.0.0:8222", fmt.Sprintf("127.0.0.1:%d", n.monitor),
			"/var/lib/nats/jetstream", filepath.Join(dir, n.name+"-store"),
			"max_file_store: 20GB", "max_file_store: 1GB",
		}
		for j, m := range nodes {
			subst = append(subst, fmt.Sprintf("nats-%d:6222", j+1), fmt.Sprintf("127.0.0.1:%d", m.route))
		}
		for k := 0; k < len(subst); k += 2 {
			if !strings.Contains(conf, subst[k]) {
				t.Fatalf("deploy/nats/%s.conf has no %q any more: change the test's substitution with it", n.name, subst[k])
			}
			conf = strings.ReplaceAll(conf, subst[k], subst[k+1])
		}
		n.conf = filepath.Join(dir, n.name+".conf")
		if err := os.WriteFile(n.conf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

// TestNATSConfigsCheck runs `nats-server -t` (the main module's
// nats-server version) on each node's file as shipped, with the passwords
// set, and without them (which must fail: a node never starts without
// them); and checks each sets a max_payload of at least 1 MiB.
func TestNATSConfigsCheck(t *testing.T) {
	bin := natsServerBin(t)
	env := natsPasswords(t)
	for i := 1; i <= 3; i++ {
		conf := filepath.Join(repo(t), "deploy/nats", fmt.Sprintf("n%d.conf", i))
		// A log event holds up to batch.max_lines lines: at least 1 MiB.
		m := regexp.MustCompile(`(?m)^max_payload: *(\S+)`).FindStringSubmatch(readFile(t, "deploy/nats/"+filepath.Base(conf)))
		if m == nil {
			t.Errorf("%s sets no max_payload (the default is 1 MB; the aggregator's embedded server has 8 MB)", conf)
		} else if n, err := natsSize(m[1]); err != nil || n < 1<<20 {
			t.Errorf("%s: max_payload %s: want at least 1 MiB (%v)", conf, m[1], err)
		}
		if out, code := run(t, env, bin, "-t", "-c", conf); code != 0 {
			t.Errorf("nats-server -t -c %s: exit %d\n%s", conf, code, out)
		}
		cmd := exec.Command(bin, "-t", "-c", conf)
		cmd.Env = []string{} // no passwords
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("nats-server -t -c %s passed without the passwords:\n%s", conf, out)
		}
	}
}

// TestClusterFoldsRuns starts deploy/nats's three nodes as a real cluster
// (ports and stores substituted), two `aggregator serve` and `collector
// replay` with the users and environment files of deploy/systemd (hosts
// strix01 and strix02, each with its own user), folds the recorded runs
// through it, SIGTERMs the aggregator that holds a run open (the other
// takes its partitions and the run over), and checks: every run's split
// is byte for byte what `aggregator replay` computes, a bad event is
// dead-lettered, `aggregator export` works with the aggregator's user, the
// stream and buckets have 3 replicas, no permission was refused, and every
// attack of attackCluster on the fleet's data is refused.
func TestClusterFoldsRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster and 2 aggregators")
	}
	dir := t.TempDir()
	passwords := natsPasswords(t)
	nodes := natsCluster(t, dir)
	var urls []string
	for _, n := range nodes {
		start(t, dir, n.name, passwords, natsServerBin(t), "-c", n.conf)
		urls = append(urls, n.url())
	}
	for _, n := range nodes {
		waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/healthz", n.monitor), 60*time.Second, nil)
	}
	url := strings.Join(urls, ",")

	// The aggregators and collectors get the environment files of
	// deploy/systemd, with this cluster's URLs and passwords.
	aggEnv := envFile(t, "deploy/systemd/aggregator.env")
	aggEnv = setEnv(aggEnv, "GTTSPLIT_NATS_URL", url, "GTTSPLIT_NATS_PASSWORD", envValue(passwords, "NATS_AGGREGATOR_PASSWORD"),
		"GTTSPLIT_HTTP_TOKEN", "test-token", "GTTSPLIT_COMMENT_TOKEN", "")
	colEnv := envFile(t, "deploy/systemd/collector.env")
	colEnv = setEnv(colEnv, "GTTSPLIT_NATS_URL", url, "GTTSPLIT_NATS_PASSWORD", envValue(passwords, "NATS_STRIX01_PASSWORD"),
		"GTTSPLIT_HTTP_TOKEN", "test-token-too", "GTTSPLIT_SPOOL_DIR", filepath.Join(dir, "spool"))
	// The second host: its own user, password and host.
	col02Env := setEnv(colEnv, "GTTSPLIT_HOST", "strix02", "GTTSPLIT_NATS_USER", "strix02",
		"GTTSPLIT_NATS_PASSWORD", envValue(passwords, "NATS_STRIX02_PASSWORD"), "GTTSPLIT_SPOOL_DIR", filepath.Join(dir, "spool-02"))

	hp := freePorts(t, 2)
	var aggs []*proc
	var jsonDirs []string
	for i, port := range hp {
		jd := filepath.Join(dir, fmt.Sprintf("json-%d", i+1))
		jsonDirs = append(jsonDirs, jd)
		env := setEnv(aggEnv, "GTTSPLIT_HTTP_LISTEN", fmt.Sprintf("127.0.0.1:%d", port),
			"GTTSPLIT_SINKS_JSON_DIR", jd, "GTTSPLIT_FORMAT", "json")
		aggs = append(aggs, start(t, dir, fmt.Sprintf("aggregator-%d", i+1), env, aggregatorBin(t), "serve"))
	}
	for i, port := range hp {
		waitHTTP(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", port), 60*time.Second, aggs[i])
	}

	replay := func(env []string, files ...string) {
		t.Helper()
		args := []string{"replay"}
		for _, f := range files {
			if !filepath.IsAbs(f) {
				f = filepath.Join(repo(t), f)
			}
			args = append(args, f)
		}
		out, code := run(t, env, collectorBin(t), args...)
		if code != 0 || !strings.Contains(out, "left_in_spool=0") {
			t.Fatalf("collector replay %v: exit %d\n%s", files, code, out)
		}
	}
	// The 4B run, and the first 15 of the 27B run's 29 events: the 27B run
	// stays open in its partition.
	first := []string{"testdata/runs/4b/events.jsonl"}
	big := "testdata/runs/27b/events.jsonl"
	later := []string{big, "testdata/controls/4b-ngl0/events.jsonl"}
	head := strings.SplitAfter(readFile(t, big), "\n")[:15]
	part := filepath.Join(dir, "27b-first-15.jsonl")
	if err := os.WriteFile(part, []byte(strings.Join(head, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	replay(colEnv, first[0], part)
	// strix02's run (the control run, recorded as strix02's), with its
	// own user.
	ctl02 := asHost(t, dir, "testdata/controls/4b-ngl0/events.jsonl", "strix02")
	replay(col02Env, ctl02)
	waitSplits(t, jsonDirs, first)
	waitSplits(t, jsonDirs, []string{ctl02})
	owner := -1
	for deadline := time.Now().Add(30 * time.Second); owner < 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no aggregator holds the 27B run open")
		}
		for i, port := range hp {
			if fams, err := scrape(fmt.Sprintf("http://127.0.0.1:%d/metrics", port), ""); err == nil && sumMetric(fams, "gttsplit_runs_open") >= 1 {
				owner = i
			}
		}
	}
	other := 1 - owner

	// SIGTERM to the aggregator that holds the open run: it hands its
	// partitions over and exits 0 within the drain the unit and the
	// manifest allow for; the other takes them and loads the open run.
	took, err := aggs[owner].stop(t, syscall.SIGTERM, 45*time.Second)
	if err != nil {
		t.Fatalf("%s after SIGTERM: %v\n%s", aggs[owner].name, err, aggs[owner].output())
	}
	t.Logf("%s drained and exited %v after SIGTERM", aggs[owner].name, took.Round(10*time.Millisecond))
	waitMetric(t, hp[other], "gttsplit_partitions_owned", 16, 30*time.Second)

	// The whole 27B run (its first 15 events again: the stream drops
	// them as duplicates) and the control.
	replay(colEnv, later...)
	waitSplits(t, jsonDirs[other:other+1], later)

	// A bad event, published with strix01's user on its own subject: the
	// aggregator dead-letters it (its user may publish on gttsplit.dlq.>).
	nc := connect(t, url, "strix01", envValue(passwords, "NATS_STRIX01_PASSWORD"), nats.CustomInboxPrefix("_INBOX_strix01"))
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, "gttsplit.log.strix01.gpu0.poison", []byte(`{"specversion":"1.0","not":"an event"}`)); err != nil {
		t.Fatalf("publish a bad event as strix01: %v", err)
	}
	waitMetric(t, hp[other], "gttsplit_events_dead_lettered_total", 1, 30*time.Second)

	// Every attack on the fleet's data, refused, while it folds.
	tried := attackCluster(t, url, passwords, hp[other], jsonDirs)

	anc := connect(t, url, "aggregator", envValue(passwords, "NATS_AGGREGATOR_PASSWORD"))
	ajs, _ := jetstream.New(anc)
	// The stream and the buckets are on all three nodes (nats.replicas 3
	// from the environment files).
	for _, name := range []string{"GTTSPLIT", "KV_GTTSPLIT_RUNS", "KV_GTTSPLIT_MEMBERS"} {
		s, err := ajs.Stream(shortCtx(t), name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("stream %s has %d replicas, want 3", name, r)
		}
	}

	if took, err := aggs[other].stop(t, syscall.SIGTERM, 45*time.Second); err != nil {
		t.Fatalf("%s after SIGTERM: %v\n%s", aggs[other].name, err, aggs[other].output())
	} else {
		t.Logf("%s drained and exited %v after SIGTERM", aggs[other].name, took.Round(10*time.Millisecond))
	}

	// The aggregator's user also serves `aggregator export`: the 4B run
	// comes back whole. (On a cluster an export sometimes fails at once
	// with "no responders" when it fetches from the consumer it has just
	// made; that is not a permission, which would show in the servers'
	// logs: it is tried again, and each failure logged.)
	var exported []byte
	for attempt := 1; ; attempt++ {
		exp := exec.Command(aggregatorBin(t), "export", "--run", "strix01-20261107T140311-4b")
		exp.Env = append(os.Environ(), aggEnv...)
		var stderr strings.Builder
		exp.Stderr = &stderr
		var err error
		if exported, err = exp.Output(); err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(stderr.String(), "no responders") {
			t.Fatalf("aggregator export with the aggregator's user: %v\n%s", err, stderr.String())
		}
		t.Logf("aggregator export, attempt %d: %v: %s", attempt, err, strings.TrimSpace(stderr.String()))
	}
	// (The stream also holds the line and the finish strix01 sent to
	// extend the run once it was final: dead-lettered, but stored.)
	if got, want := strings.Count(string(exported), "\n"), strings.Count(readFile(t, first[0]), "\n")+2; got != want {
		t.Errorf("aggregator export gave %d events of the 4B run, want %d", got, want)
	}

	// Every split equals the replay's, byte for byte.
	want := filepath.Join(dir, "replay")
	args := []string{"replay", "--json-dir", want}
	all := append(append(append([]string{}, first...), later...), ctl02)
	for _, f := range all {
		if !filepath.IsAbs(f) {
			f = filepath.Join(repo(t), f)
		}
		args = append(args, f)
	}
	if out, code := run(t, nil, aggregatorBin(t), args...); code != 0 {
		t.Fatalf("aggregator replay: exit %d\n%s", code, out)
	}
	for _, f := range all {
		rel := splitPath(t, f)
		exp, err := os.ReadFile(filepath.Join(want, rel))
		if err != nil {
			t.Fatal(err)
		}
		got := findSplit(jsonDirs, rel)
		if got == nil {
			t.Fatalf("no split of %s in the aggregators' JSON sinks", f)
		}
		if string(got) != string(exp) {
			t.Errorf("%s: the served split differs from the replay's\nserved: %s\nreplay: %s", f, got, exp)
		}
	}

	// No permission of the deployed users was refused (the checks above
	// of what they must not do were, and are left out).
	for _, n := range nodes {
		b, _ := os.ReadFile(filepath.Join(dir, n.name+".log"))
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "Permissions Violation") && !refusedOnPurpose(line, tried) {
				t.Errorf("%s: %s", n.name, line)
			}
		}
	}
}

// refusedOnPurpose says a permission violation is one of the test's own
// attacks.
func refusedOnPurpose(line string, tried []string) bool {
	for _, s := range tried {
		if strings.Contains(line, fmt.Sprintf("%q", s)) {
			return true
		}
	}
	return false
}

// splitPath is where a JSON sink writes the split of a recorded run:
// <host>/<lane>/<run>.json, read from its run-started event.
func splitPath(t testing.TB, events string) string {
	t.Helper()
	line, _, _ := strings.Cut(readFile(t, events), "\n")
	field := func(name string) string {
		m := regexp.MustCompile(`"` + name + `":"([^"]*)"`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("%s: no %s in its first event", events, name)
		}
		return m[1]
	}
	return filepath.Join(field("host"), field("lane"), field("runid")+".json")
}

func findSplit(dirs []string, rel string) []byte {
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, rel)); err == nil {
			return b
		}
	}
	return nil
}

// waitSplits waits until the split of every recorded run is in one of
// the JSON sinks.
func waitSplits(t testing.TB, dirs, files []string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for _, f := range files {
		rel := splitPath(t, f)
		for findSplit(dirs, rel) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("no split of %s (%s) in %v", f, rel, dirs)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// waitMetric waits until the sum of a metric's samples on the aggregator
// at 127.0.0.1:port reaches want.
func waitMetric(t testing.TB, port int, name string, want float64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last float64
	for time.Now().Before(deadline) {
		fams, err := scrape(fmt.Sprintf("http://127.0.0.1:%d/metrics", port), "")
		if err == nil {
			if last = sumMetric(fams, name); last >= want {
				return
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s on 127.0.0.1:%d is %v after %v, want %v", name, port, last, within, want)
}
