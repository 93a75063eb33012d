package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
)

// attacker is a connection of a user of deploy/nats that records what the
// server refused it.
type attacker struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	mu      sync.Mutex
	refused map[string]bool // `Publish to "x"`, `Subscription to "x"`
	tried   *[]string       // every subject refused on purpose (the log check leaves them out)
}

// attackAs connects as user with its password (and, for a host, its own
// inbox prefix, as the collector sets it).
func attackAs(t *testing.T, url, user, password, inbox string, tried *[]string) *attacker {
	t.Helper()
	a := &attacker{refused: map[string]bool{}, tried: tried}
	opts := []nats.Option{nats.UserInfo(user, password), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if _, what, ok := strings.Cut(err.Error(), "Permissions Violation for "); ok {
			a.mu.Lock()
			a.refused[strings.TrimSpace(what)] = true
			a.mu.Unlock()
		}
	})}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	a.nc = nc
	a.js, _ = jetstream.New(nc)
	return a
}

func (a *attacker) wait(t *testing.T, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		a.mu.Lock()
		ok := a.refused[what]
		a.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the server did not refuse %s", what)
			return
		}
	}
}

// publish publishes data on subject as a request would, and expects the
// server to refuse it.
func (a *attacker) publish(t *testing.T, subject, data string) {
	t.Helper()
	*a.tried = append(*a.tried, subject)
	if err := a.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: a.nc.NewRespInbox(), Data: []byte(data)}); err != nil {
		t.Fatal(err)
	}
	a.wait(t, fmt.Sprintf("Publish to %q", subject))
}

// subscribe subscribes to subject and expects the server to refuse it.
func (a *attacker) subscribe(t *testing.T, subject string) {
	t.Helper()
	*a.tried = append(*a.tried, subject)
	sub, err := a.nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	a.wait(t, fmt.Sprintf("Subscription to %q", subject))
}

// asHost writes the recorded stream src (relative to the repository) as
// host's: every "strix01" of it (host, source, run ids, event ids) becomes
// host.
func asHost(t *testing.T, dir, src, host string) string {
	t.Helper()
	out := filepath.Join(dir, host+"-"+filepath.Base(filepath.Dir(src))+".jsonl")
	if err := os.WriteFile(out, []byte(strings.ReplaceAll(readFile(t, src), "strix01", host)), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// labelled is the value of a counter's sample whose label is value.
func labelled(fams map[string]*dto.MetricFamily, name, label, value string) float64 {
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// waitLabelled waits until the aggregator at 127.0.0.1:port counts want
// of name{label=value}.
func waitLabelled(t *testing.T, port int, name, label, value string, want float64) {
	t.Helper()
	var last float64
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if fams, err := scrape(fmt.Sprintf("http://127.0.0.1:%d/metrics", port), ""); err == nil {
			if last = labelled(fams, name, label, value); last >= want {
				return
			}
		}
	}
	t.Fatalf("%s{%s=%q} is %v, want %v", name, label, value, last, want)
}

// recorded is one event of a recorded stream, to forge others from.
func recorded(t *testing.T, file, typ string) map[string]any {
	t.Helper()
	for _, line := range strings.Split(readFile(t, file), "\n") {
		var ev map[string]any
		if json.Unmarshal([]byte(line), &ev) == nil && ev["type"] == typ {
			return ev
		}
	}
	t.Fatalf("%s has no %s event", file, typ)
	return nil
}

// attackCluster tries, on the cluster at url, every attack on the fleet's
// data that the users of deploy/nats must not be able to make, and checks
// that each was refused: strix01 (its own credential) may not administer
// or read any stream, bucket or consumer, read other replies, or publish
// as strix02; the aggregator may not create a stream of its own choosing
// or destroy the events; an event that does not speak for its sender, and
// one that would change strix01's run closed complete, are dead-lettered
// by the aggregator at 127.0.0.1:aggPort, whose splits stay. It returns
// the subjects refused on purpose.
func attackCluster(t *testing.T, url string, passwords []string, aggPort int, jsonDirs []string) []string {
	var tried []string
	s01 := attackAs(t, url, "strix01", envValue(passwords, "NATS_STRIX01_PASSWORD"), "_INBOX_strix01", &tried)
	agg := attackAs(t, url, "aggregator", envValue(passwords, "NATS_AGGREGATOR_PASSWORD"), "", &tried)
	st, err := agg.js.Stream(shortCtx(t), "GTTSPLIT")
	if err != nil {
		t.Fatalf("the events stream: %v", err)
	}
	before := st.CachedInfo()
	split4b := findSplit(jsonDirs, splitPath(t, "testdata/runs/4b/events.jsonl"))

	// Destroy: shrink, seal, allow roll-ups, purge, delete (as strix01).
	for _, change := range []func(c *jetstream.StreamConfig){
		func(c *jetstream.StreamConfig) { c.MaxMsgs = 3 },
		func(c *jetstream.StreamConfig) { c.Sealed = true },
		func(c *jetstream.StreamConfig) { c.AllowRollup, c.DenyPurge = true, false },
	} {
		c := before.Config
		change(&c)
		b, _ := json.Marshal(c)
		s01.publish(t, "$JS.API.STREAM.UPDATE.GTTSPLIT", string(b))
	}
	for _, s := range []string{"$JS.API.STREAM.PURGE.GTTSPLIT", "$JS.API.STREAM.DELETE.GTTSPLIT", "$JS.API.STREAM.INFO.GTTSPLIT",
		"$JS.API.STREAM.MSG.DELETE.GTTSPLIT", "$JS.API.STREAM.DELETE.KV_GTTSPLIT_RUNS"} {
		s01.publish(t, s, "")
	}
	// A roll-up on its own subject: the stream refuses it.
	if _, err := s01.js.PublishMsg(shortCtx(t), &nats.Msg{Subject: "gttsplit.log.strix01.gpu0.rollup", Data: []byte("x"),
		Header: nats.Header{"Nats-Rollup": {"all"}}}); err == nil {
		t.Error("a roll-up (Nats-Rollup: all) was taken")
	}
	// Read: the stream's messages, the buckets, consumers, every reply.
	for _, s := range []struct{ subject, data string }{
		{"$JS.API.STREAM.MSG.GET.GTTSPLIT", `{"seq":1}`},
		{"$JS.API.DIRECT.GET.GTTSPLIT", `{"seq":1}`},
		{"$JS.API.CONSUMER.CREATE.GTTSPLIT.thief", `{"stream_name":"GTTSPLIT","config":{"durable_name":"thief"}}`},
		{"$JS.API.CONSUMER.MSG.NEXT.GTTSPLIT.gttsplit-p00", `{"batch":1}`},
		{"$JS.API.DIRECT.GET.KV_GTTSPLIT_RUNS.$KV.GTTSPLIT_RUNS.sum.run.strix01-20261107T140311-4b", ""},
		{"$KV.GTTSPLIT_RUNS.lease.gttsplit.0", "forged"},
	} {
		s01.publish(t, s.subject, s.data)
	}
	for _, s := range []string{"_INBOX.>", "_INBOX_strix02.>", ">", "gttsplit.>", "$KV.GTTSPLIT_RUNS.>"} {
		s01.subscribe(t, s)
	}
	// Forge: publish as strix02, publish splits.
	for _, s := range []string{"gttsplit.log.strix02.gpu0.strix02-20261107T141455-4b-ngl0", "gttsplit.run.strix02.gpu0.x",
		"gttsplit.split.strix01.gpu0.x", "gttsplit.dlq.strix01.gpu0.x"} {
		s01.publish(t, s, "{}")
	}
	// The aggregator: a stream of its own choosing (even one named as the
	// earlier versions' partitioned stream), the events destroyed, events
	// published, collectors' replies read.
	agg.publish(t, "$JS.API.STREAM.CREATE.GTTSPLIT_PARTS", `{"name":"GTTSPLIT_PARTS","subjects":["foreign.>"],"max_msgs":1}`)
	agg.publish(t, "$JS.API.STREAM.CREATE.OTHER", `{"name":"OTHER","subjects":["other.>"]}`)
	for _, s := range []string{"$JS.API.STREAM.DELETE.GTTSPLIT", "$JS.API.STREAM.PURGE.GTTSPLIT", "$JS.API.STREAM.MSG.DELETE.GTTSPLIT",
		"gttsplit.log.strix01.gpu0.x"} {
		agg.publish(t, s, "{}")
	}
	agg.subscribe(t, "_INBOX_strix01.>")

	// What the broker lets strix01 publish, the aggregator judges: an
	// event of strix02's run on strix01's subject (origin), and a new line
	// and another finish for strix01's run closed complete (final).
	ctl02 := asHost(t, t.TempDir(), "testdata/controls/4b-ngl0/events.jsonl", "strix02")
	var forged map[string]any
	for _, line := range strings.Split(string(must(os.ReadFile(ctl02))), "\n") {
		if json.Unmarshal([]byte(line), &forged) == nil && forged["type"] == "io.gttsplit.log.lines.v1" {
			break
		}
	}
	publishEvent(t, s01.js, "gttsplit.log.strix01.gpu0."+forged["runid"].(string), forged, "forged-source")
	line := recorded(t, "testdata/runs/4b/events.jsonl", "io.gttsplit.log.lines.v1")
	data := line["data"].(map[string]any)
	n := len(data["lines"].([]any))
	data["first_seq"] = 900001
	line["id"] = fmt.Sprintf("%s/%s/%d-%d", line["runid"], data["stream"], 900001, 900000+n)
	publishEvent(t, s01.js, "gttsplit.log.strix01.gpu0."+line["runid"].(string), line, "")
	fin := recorded(t, "testdata/runs/4b/events.jsonl", "io.gttsplit.run.finished.v1")
	fin["data"].(map[string]any)["exit_code"] = 137
	publishEvent(t, s01.js, "gttsplit.run.strix01.gpu0."+fin["runid"].(string), fin, "forged-finish")
	waitLabelled(t, aggPort, "gttsplit_events_dead_lettered_total", "reason", "origin", 1)
	waitLabelled(t, aggPort, "gttsplit_events_dead_lettered_total", "reason", "final", 2)

	// The stream holds what it held (and more), unsealed, as configured;
	// the complete run's split is the one written.
	after, err := st.Info(shortCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if after.State.Msgs < before.State.Msgs || after.Config.Sealed || after.Config.MaxMsgs != before.Config.MaxMsgs ||
		after.Config.AllowRollup || !after.Config.DenyPurge {
		t.Errorf("the events stream changed: %d messages (before %d), sealed %v, max_msgs %d, roll-ups %v, deny purge %v",
			after.State.Msgs, before.State.Msgs, after.Config.Sealed, after.Config.MaxMsgs, after.Config.AllowRollup, after.Config.DenyPurge)
	}
	if _, err := agg.js.Stream(shortCtx(t), "GTTSPLIT_PARTS"); err == nil {
		t.Error("a GTTSPLIT_PARTS stream exists")
	}
	time.Sleep(time.Second) // a split written again would be by now
	if got := findSplit(jsonDirs, splitPath(t, "testdata/runs/4b/events.jsonl")); string(got) != string(split4b) {
		t.Errorf("the 4B run's split changed after it closed complete:\n%s\nwas:\n%s", got, split4b)
	}
	return tried
}

// publishEvent publishes an event (as JSON) with JetStream, under msgID
// (its own id when "").
func publishEvent(t *testing.T, js jetstream.JetStream, subject string, ev map[string]any, msgID string) {
	t.Helper()
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if msgID == "" {
		msgID = ev["id"].(string)
	}
	if _, err := js.PublishMsg(shortCtx(t), &nats.Msg{Subject: subject, Data: b, Header: nats.Header{jetstream.MsgIDHeader: {msgID}}}); err != nil {
		t.Fatalf("publish on %s: %v", subject, err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
