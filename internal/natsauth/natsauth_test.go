package natsauth_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/natsauth"
	"github.com/gttsplit/gttsplit/internal/natstest"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/events"
)

var update = flag.Bool("update", false, "rewrite deploy/nats/accounts.conf")

// repo is the repository's root.
func repo() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// deploy/nats/accounts.conf is what `aggregator nats-users strix01
// strix02` writes (go test ./internal/natsauth -update rewrites it).
func TestShippedAccountsConfIsGenerated(t *testing.T) {
	want, err := natsauth.AccountsConf([]string{"strix01", "strix02"}, bus.DefaultStream)
	require.NoError(t, err)
	path := filepath.Join(repo(), "deploy", "nats", "accounts.conf")
	if *update {
		require.NoError(t, os.WriteFile(path, want, 0o644))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "deploy/nats/accounts.conf is not what the generator writes: go test ./internal/natsauth -update")
}

func TestUsers(t *testing.T) {
	us, err := natsauth.Users([]string{"strix01", "node-7.lab", "GPU_3"})
	require.NoError(t, err)
	require.Equal(t, []natsauth.User{
		{Host: "strix01", Name: "strix01", PasswordEnv: "NATS_STRIX01_PASSWORD"},
		{Host: "node-7.lab", Name: "node-7_lab", PasswordEnv: "NATS_NODE_7_LAB_PASSWORD"},
		{Host: "GPU_3", Name: "GPU_3", PasswordEnv: "NATS_GPU_3_PASSWORD"},
	}, us)
	for _, bad := range [][]string{
		nil,
		{"strix 01"},
		{"strix01", "strix01"},
		{"a.b", "a_b"},       // one user
		{"node-1", "node_1"}, // one password variable
		{"aggregator"},
		{"SYS"},
		{"-x"},
		{"host$"},
		{"h{{name()}}"},
		{strings.Repeat("h", events.MaxTokenBytes+1)},
	} {
		_, err := natsauth.Users(bad)
		require.Error(t, err, "%q", bad)
	}
}

// The collector's permissions for a host name with dots use its subject
// token, as the collector publishes it.
func TestHostPermissionsUseTheToken(t *testing.T) {
	p := natsauth.Host(events.Token("node-7.lab"))
	require.Equal(t, []string{"gttsplit.run.node-7_lab.>", "gttsplit.log.node-7_lab.>", "gttsplit.fdinfo.node-7_lab.>"}, natsauth.Flat(p.Publish))
	require.Equal(t, []string{"_INBOX_node-7_lab.>"}, natsauth.Flat(p.Subscribe))
	require.Equal(t, []string{"_INBOX_{{name()}}.>"}, natsauth.Flat(natsauth.HostTemplate().Subscribe))
}

// login says how a test's client logs in as a user of the account.
type login func(t *testing.T, user string) nats.Option

// TestConfigUsersIntegration runs the users file the generator writes on
// a real nats-server and tries, as each user, what the role must not do.
func TestConfigUsersIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	dir := t.TempDir()
	hosts := []string{"strix01", "strix02"}
	conf, err := natsauth.AccountsConf(hosts, bus.DefaultStream)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "accounts.conf"), conf, 0o644))
	passwords := map[string]string{}
	for _, u := range append([]string{"aggregator", "sys"}, hosts...) {
		passwords[u] = randomHex()
		t.Setenv("NATS_"+strings.ToUpper(u)+"_PASSWORD", passwords[u])
	}
	main := fmt.Sprintf("listen: 127.0.0.1:-1\njetstream { store_dir: %q }\ninclude ./accounts.conf\n", filepath.Join(dir, "store"))
	url := startConf(t, dir, main)
	exercise(t, url, func(t *testing.T, user string) nats.Option {
		return nats.UserInfo(user, passwords[user])
	})
}

// startConf starts an embedded nats-server from a configuration file
// (written into dir) and returns its client URL.
func startConf(t *testing.T, dir, conf string) string {
	t.Helper()
	path := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o644))
	return natstest.StartConfigFile(t, path).ClientURL()
}

func randomHex() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// client is a connection that records the permission violations the
// server reports to it.
type client struct {
	nc      *nats.Conn
	mu      sync.Mutex
	refused map[string]bool // "Publish to \"subject\"", "Subscription to \"subject\""
}

func connect(t *testing.T, url string, opts ...nats.Option) *client {
	t.Helper()
	c := &client{refused: map[string]bool{}}
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		msg := err.Error()
		if i := strings.Index(msg, "Permissions Violation for "); i >= 0 {
			c.mu.Lock()
			c.refused[strings.TrimSpace(msg[i+len("Permissions Violation for "):])] = true
			c.mu.Unlock()
		}
	}))
	nc, err := nats.Connect(url, append([]nats.Option{nats.Timeout(natstest.ConnectTimeout)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c.nc = nc
	return c
}

// waitRefused waits for the server's permission violation of what
// ("Publish to \"x\"").
func (c *client) waitRefused(t *testing.T, what string) {
	t.Helper()
	rt.Eventually(t, "the server refuses "+what, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.refused[what]
	})
}

// publishRefused publishes data on subject (with a reply subject, as a
// request would) and waits for the server to refuse it.
func (c *client) publishRefused(t *testing.T, subject string, data []byte, hdr nats.Header) {
	t.Helper()
	m := &nats.Msg{Subject: subject, Reply: c.nc.NewRespInbox(), Data: data, Header: hdr}
	require.NoError(t, c.nc.PublishMsg(m))
	c.waitRefused(t, fmt.Sprintf("Publish to %q", subject))
}

// subscribeRefused subscribes to subject and waits for the server to
// refuse it.
func (c *client) subscribeRefused(t *testing.T, subject string) {
	t.Helper()
	sub, err := c.nc.SubscribeSync(subject)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	c.waitRefused(t, fmt.Sprintf("Subscription to %q", subject))
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), rt.WaitFor)
	t.Cleanup(cancel)
	return c
}

// exercise sets the account up as the aggregator does, publishes a run's
// start as each host, and tries every attack on the fleet's data as a
// host and as the aggregator: each must be refused by the server, and the
// stream must hold what it held.
func exercise(t *testing.T, url string, as login) {
	agg := connect(t, url, as(t, "aggregator"))
	ajs, err := jetstream.New(agg.nc)
	require.NoError(t, err)
	// The aggregator's own start: the events stream, partitioned, and the
	// state bucket.
	_, err = bus.EnsureStream(ctx(t), ajs, bus.DefaultStreamConfig(), zerolog.Nop())
	require.NoError(t, err)
	_, err = bus.EnsurePartitioned(ctx(t), ajs, bus.DefaultStream, 0, 1, zerolog.Nop())
	require.NoError(t, err)
	kv, err := runtable.EnsureBucket(ctx(t), ajs, 1, zerolog.Nop())
	require.NoError(t, err)
	_, err = kv.Put(ctx(t), "sum.run.x", []byte("{}"))
	require.NoError(t, err)

	// Each host publishes its own events through its own inbox.
	fx := rt.Load(t, rt.Runs("4b"), rt.FoldOptions(t))
	hosts := map[string]*client{}
	for _, h := range []string{"strix01", "strix02"} {
		c := connect(t, url, as(t, h), nats.CustomInboxPrefix(bus.InboxPrefix(h)))
		js, err := jetstream.New(c.nc)
		require.NoError(t, err)
		w, err := rt.Rewrite(fx.Decoded[0], events.Origin{RunID: h + "-run", Host: h, Lane: "gpu0"})
		require.NoError(t, err)
		_, err = js.PublishMsg(ctx(t), &nats.Msg{Subject: w.Subject, Data: w.Data, Header: nats.Header{jetstream.MsgIDHeader: {w.ID}}})
		require.NoError(t, err, "%s publishes its own run's start", h)
		hosts[h] = c
	}
	st, err := ajs.Stream(ctx(t), bus.DefaultStream)
	require.NoError(t, err)
	before := st.CachedInfo()
	require.EqualValues(t, 2, before.State.Msgs)

	t.Run("host", func(t *testing.T) {
		c := hosts["strix01"]
		cfg := before.Config
		cfg.MaxMsgs = 3
		shrink, _ := json.Marshal(cfg)
		cfg = before.Config
		cfg.Sealed = true
		seal, _ := json.Marshal(cfg)
		cfg = before.Config
		cfg.AllowRollup = true
		rollup, _ := json.Marshal(cfg)
		for _, r := range []struct {
			subject string
			data    string
		}{
			// JetStream administration and reads, of any kind.
			{"$JS.API.INFO", ""},
			{"$JS.API.STREAM.INFO.GTTSPLIT", ""},
			{"$JS.API.STREAM.CREATE.GTTSPLIT", string(shrink)},
			{"$JS.API.STREAM.UPDATE.GTTSPLIT", string(shrink)},
			{"$JS.API.STREAM.UPDATE.GTTSPLIT", string(seal)},
			{"$JS.API.STREAM.UPDATE.GTTSPLIT", string(rollup)},
			{"$JS.API.STREAM.PURGE.GTTSPLIT", ""},
			{"$JS.API.STREAM.DELETE.GTTSPLIT", ""},
			{"$JS.API.STREAM.MSG.GET.GTTSPLIT", `{"seq":1}`},
			{"$JS.API.STREAM.MSG.DELETE.GTTSPLIT", `{"seq":1}`},
			{"$JS.API.DIRECT.GET.GTTSPLIT", `{"seq":1}`},
			{"$JS.API.STREAM.CREATE.OTHER", `{"name":"OTHER","subjects":["other.>"]}`},
			{"$JS.API.STREAM.NAMES", ""},
			{"$JS.API.CONSUMER.CREATE.GTTSPLIT.thief", `{"stream_name":"GTTSPLIT","config":{"durable_name":"thief"}}`},
			{"$JS.API.CONSUMER.CREATE.GTTSPLIT", `{"stream_name":"GTTSPLIT","config":{}}`},
			{"$JS.API.CONSUMER.DURABLE.CREATE.GTTSPLIT.thief", ""},
			{"$JS.API.CONSUMER.DELETE.GTTSPLIT.gttsplit-p00", ""},
			{"$JS.API.CONSUMER.MSG.NEXT.GTTSPLIT.gttsplit-p00", `{"batch":10}`},
			// The buckets: states, summaries, leases, members.
			{"$JS.API.STREAM.INFO.KV_GTTSPLIT_RUNS", ""},
			{"$JS.API.DIRECT.GET.KV_GTTSPLIT_RUNS.$KV.GTTSPLIT_RUNS.sum.run.x", ""},
			{"$JS.API.STREAM.MSG.GET.KV_GTTSPLIT_RUNS", `{"last_by_subj":"$KV.GTTSPLIT_RUNS.sum.run.x"}`},
			{"$KV.GTTSPLIT_RUNS.sum.run.x", "forged"},
			{"$KV.GTTSPLIT_MEMBERS.m1", "forged"},
			// Another host's events, splits, dead letters.
			{"gttsplit.run.strix02.gpu0.strix02-run", "forged"},
			{"gttsplit.log.strix02.gpu0.strix02-run", "forged"},
			{"gttsplit.fdinfo.strix02.gpu0.strix02-run", "forged"},
			{"gttsplit.split.strix01.gpu0.strix01-run", "forged"},
			{"gttsplit.dlq.strix01.gpu0.strix01-run", "forged"},
			{"gttsplit.log.strix01", "forged"},
		} {
			c.publishRefused(t, r.subject, []byte(r.data), nil)
		}
		// Reading: every reply but its own, every event, every key.
		for _, s := range []string{">", "_INBOX.>", "_INBOX_strix02.>", bus.InboxPrefix("strix02") + ".x.y",
			"gttsplit.>", "gttsplit.log.strix02.>", "$KV.>", "$JS.>", "$JS.ACK.>"} {
			c.subscribeRefused(t, s)
		}
		// Its own subject, with a header that would roll the stream up:
		// the stream does not allow it.
		js, err := jetstream.New(c.nc)
		require.NoError(t, err)
		_, err = js.PublishMsg(ctx(t), &nats.Msg{Subject: "gttsplit.log.strix01.gpu0.strix01-run", Data: []byte("x"),
			Header: nats.Header{"Nats-Rollup": {"all"}}})
		require.Error(t, err, "a roll-up is refused")
		_, err = js.PublishMsg(ctx(t), &nats.Msg{Subject: "gttsplit.log.strix01.gpu0.strix01-run", Data: []byte("x"),
			Header: nats.Header{"Nats-Rollup": {"sub"}}})
		require.Error(t, err, "a roll-up is refused")
	})

	t.Run("aggregator", func(t *testing.T) {
		for _, r := range []struct {
			subject string
			data    string
		}{
			{"$JS.API.STREAM.CREATE.OTHER", `{"name":"OTHER","subjects":["other.>"]}`},
			{"$JS.API.STREAM.CREATE.GTTSPLIT_PARTS", `{"name":"GTTSPLIT_PARTS","subjects":["parts.>"],"max_msgs":1}`},
			{"$JS.API.STREAM.DELETE.GTTSPLIT", ""},
			{"$JS.API.STREAM.PURGE.GTTSPLIT", ""},
			{"$JS.API.STREAM.MSG.DELETE.GTTSPLIT", `{"seq":1}`},
			{"$JS.API.STREAM.DELETE.KV_GTTSPLIT_RUNS", ""},
			{"$JS.API.STREAM.PURGE.KV_GTTSPLIT_RUNS", ""},
			{"$JS.API.STREAM.INFO.OTHER", ""},
			{"$JS.API.CONSUMER.CREATE.OTHER.c", ""},
			{"gttsplit.log.strix01.gpu0.strix01-run", "forged"},
			{"gttsplit.run.strix02.gpu0.strix02-run", "forged"},
		} {
			agg.publishRefused(t, r.subject, []byte(r.data), nil)
		}
		for _, s := range []string{">", "_INBOX_strix01.>", "gttsplit.>"} {
			agg.subscribeRefused(t, s)
		}
	})

	// The stream is as it was: its messages, its configuration.
	after, err := st.Info(ctx(t))
	require.NoError(t, err)
	require.Equal(t, before.State.Msgs, after.State.Msgs)
	require.Equal(t, before.Config, after.Config)
	require.False(t, after.Config.Sealed)
}
