package aggregator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/dirlock"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/conf"
)

// embeddedMaxPayload lets a run's state (one bucket value) be larger than
// NATS's default 1 MiB message limit on the embedded server.
const embeddedMaxPayload = 8 << 20

// ErrStoreInUse means the embedded server's store directory is locked by
// another aggregator (an `aggregator serve` or `export` running on it).
var ErrStoreInUse = dirlock.ErrLocked

// StartEmbedded starts the in-process NATS server with JetStream on listen
// (host:port; port 0 picks a free one) with its store in store, holding at
// most maxStore bytes (0: the server's default, 75 % of the disk's free
// space), its buffers bounded for a process of memLimitMiB MiB
// (embeddedOptions; 0: the server's defaults). It first
// takes an exclusive lock on the store (released when the server shuts
// down) and checks that the address is free, so a second aggregator on the
// same store or port fails at once, saying which.
func StartEmbedded(listen, store string, maxStore int64, memLimitMiB int, auth EmbeddedAuth, log zerolog.Logger) (*server.Server, error) {
	if auth.Token == "" && auth.User == "" && !conf.IsLoopbackListen(listen) {
		return nil, fmt.Errorf("embedded.listen %q is not a loopback address: the embedded NATS server needs nats.token or nats.user and nats.password there", listen)
	}
	if auth.Token != "" && auth.User != "" {
		return nil, errors.New("the embedded NATS server takes nats.token or nats.user and nats.password, not both")
	}
	host, portS, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("embedded.listen %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return nil, fmt.Errorf("embedded.listen %q: %w", listen, err)
	}
	lock, err := dirlock.Acquire(store)
	if err != nil {
		if errors.Is(err, ErrStoreInUse) {
			return nil, newStoreBusy(store, err)
		}
		return nil, fmt.Errorf("embedded NATS store: %w", err)
	}
	if port != 0 {
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			lock.Release()
			return nil, fmt.Errorf("embedded NATS server: %w (is another NATS server or aggregator listening there? give --embedded-listen another port, or --nats-url to use that server)", err)
		}
		_ = ln.Close()
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := embeddedOptions(memLimitMiB)
	opts.Host, opts.Port, opts.StoreDir = host, port, store
	// 0 leaves the server's default.
	opts.JetStreamMaxStore = maxStore
	// The configured client credentials are the server's too.
	opts.Authorization, opts.Username, opts.Password = auth.Token, auth.User, auth.Password
	ns, err := server.NewServer(opts)
	if err != nil {
		lock.Release()
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(20 * time.Second) {
		ns.Shutdown()
		ns.WaitForShutdown()
		lock.Release()
		return nil, fmt.Errorf("embedded NATS server on %s (store %s) did not start within 20s", listen, store)
	}
	writeStoreURL(store, ns.ClientURL())
	go func() {
		ns.WaitForShutdown()
		lock.Release()
	}()
	how := "--nats-url " + ns.ClientURL()
	switch {
	case auth.Token != "":
		how += " and its token (GTTSPLIT_NATS_TOKEN)"
	case auth.User != "":
		how += " and its user and password (GTTSPLIT_NATS_USER, GTTSPLIT_NATS_PASSWORD)"
	}
	log.Info().Str("url", ns.ClientURL()).Str("store", store).Bool("auth", auth.Token != "" || auth.User != "").
		Msg("embedded NATS server with JetStream ready; point collectors at it with " + how)
	return ns, nil
}

// embeddedShare is the share of memory_limit_mib the embedded server's
// memory streams may take together.
const embeddedShare = 16

// embeddedOptions are the embedded server's options for a process of
// memLimitMiB MiB (0: the server's defaults for its buffers): the memory
// streams (the members bucket) hold at most a sixteenth of it together,
// and at least one largest message (the default is 75 % of the machine's
// memory). The streams' queues of messages received but not stored yet
// keep the server's bound (128 MiB a stream, StreamMaxBufferedSize): past
// a smaller one every publish, the run table's state writes included,
// would be answered 429 under a burst, a failure mode not tested.
func embeddedOptions(memLimitMiB int) *server.Options {
	o := &server.Options{
		ServerName: "gttsplit-embedded",
		JetStream:  true,
		MaxPayload: embeddedMaxPayload,
		NoSigs:     true,
		NoLog:      true,
	}
	if memLimitMiB > 0 {
		o.JetStreamMaxMemory = max(int64(memLimitMiB)<<20/embeddedShare, embeddedMaxPayload)
	}
	return o
}

// serverRoom reports the embedded server's JetStream store against what it
// may hold: its max_file_store (embedded.max_store, or what the server
// took from the disk at start), or the room its disk has left beside what
// it holds, whichever is less (the disk may fill with other files).
func serverRoom(ns *server.Server, dir string) func() runtable.StoreRoom {
	return func() runtable.StoreRoom {
		jsi, err := ns.Jsz(&server.JSzOptions{})
		if err != nil || jsi.Disabled {
			return runtable.StoreRoom{}
		}
		r := runtable.StoreRoom{Used: jsi.Store, What: fmt.Sprintf("the embedded server's store %s (embedded.max_store)", dir)}
		if jsi.Config.MaxStore > 0 {
			r.Limit = uint64(jsi.Config.MaxStore)
		}
		if free, ok := diskFree(dir); ok && (r.Limit == 0 || r.Used+free < r.Limit) {
			r.Limit = r.Used + free
			r.What = fmt.Sprintf("the disk of the embedded server's store %s", dir)
		}
		return r
	}
}

// EmbeddedAuth is what the embedded server demands of its clients: a
// token, or a user and password; none only on a loopback address.
type EmbeddedAuth struct {
	Token, User, Password string
}

// broker is a connection to NATS, through the embedded server or not.
type broker struct {
	ns *server.Server
	nc *nats.Conn
	js jetstream.JetStream
}

func (b *broker) close() {
	if b.nc != nil {
		_ = b.nc.Drain()
		for i := 0; i < 100 && !b.nc.IsClosed(); i++ {
			time.Sleep(20 * time.Millisecond)
		}
		b.nc.Close()
	}
	if b.ns != nil {
		b.ns.Shutdown()
		b.ns.WaitForShutdown()
	}
}

// openBroker connects to cfg.NATS (bus.Dial: the broker and the events
// stream are required), after starting the embedded server when nats.url
// is empty.
func openBroker(ctx context.Context, cfg config.Aggregator, log zerolog.Logger) (*broker, error) {
	b := &broker{}
	n := cfg.NATS
	if n.URL == "" {
		auth := EmbeddedAuth{Token: n.Token.Reveal(), User: n.User, Password: n.Password.Reveal()}
		ns, err := StartEmbedded(cfg.Embedded.Listen, cfg.Embedded.Store, cfg.Embedded.MaxStore, cfg.MemoryLimitMiB, auth, log)
		if err != nil {
			return nil, err
		}
		b.ns, n.URL = ns, ns.ClientURL()
	}
	nc, js, err := bus.Dial(ctx, n, bus.DialOptions{Name: "gttsplit-aggregator", Required: true, Partitions: cfg.Consumer.Stream.Partitions}, log)
	if err != nil {
		b.close()
		return nil, err
	}
	b.nc, b.js = nc, js
	return b, nil
}

// settle retries fn for up to 30 s (a cluster that is electing leaders,
// or several aggregators creating the same stream or bucket at once,
// answers with timeouts for a while); the last error is returned.
func settle(ctx context.Context, log zerolog.Logger, what string, fn func(context.Context) error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := fn(ctx)
		if err == nil || ctx.Err() != nil || !time.Now().Before(deadline) ||
			errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return err
		}
		log.Warn().Err(err).Msg(what + " not ready, retrying")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
