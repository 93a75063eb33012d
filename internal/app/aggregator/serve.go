package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/dirlock"
	"github.com/gttsplit/gttsplit/internal/fleet"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/conf"
	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/present"
)

// embeddedMaxPayload lets a run's state (one bucket value) be larger than
// NATS's default 1 MiB message limit on the embedded server.
const embeddedMaxPayload = 8 << 20

// ErrStoreInUse means the embedded server's store directory is locked by
// another aggregator (an `aggregator serve` or `export` running on it).
var ErrStoreInUse = dirlock.ErrLocked

// StartEmbedded starts the in-process NATS server with JetStream on listen
// (host:port; port 0 picks a free one) with its store in store. It first
// takes an exclusive lock on the store (released when the server shuts
// down) and checks that the address is free, so a second aggregator on the
// same store or port fails at once, saying which.
func StartEmbedded(listen, store string, auth EmbeddedAuth, log zerolog.Logger) (*server.Server, error) {
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
			return nil, fmt.Errorf("embedded NATS store %w: stop the other `aggregator serve` or `aggregator export` on it, or give another --store", err)
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
	opts := &server.Options{
		ServerName: "gttsplit-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   store,
		MaxPayload: embeddedMaxPayload,
		NoSigs:     true,
		NoLog:      true,
		// The configured client credentials are the server's too.
		Authorization: auth.Token,
		Username:      auth.User,
		Password:      auth.Password,
	}
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
		ns, err := StartEmbedded(cfg.Embedded.Listen, cfg.Embedded.Store, auth, log)
		if err != nil {
			return nil, err
		}
		b.ns, n.URL = ns, ns.ClientURL()
	}
	nc, js, err := bus.Dial(ctx, n, bus.DialOptions{Name: "gttsplit-aggregator", Required: true, Partitions: cfg.Consumer.Partitions}, log)
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

// ServeOptions are what `serve` needs besides its config.
type ServeOptions struct {
	// Stdout receives every written split in cfg.Format (nil: not printed).
	Stdout io.Writer
	// Ready, if set, is called once the service consumes, with the NATS URL
	// collectors should use.
	Ready func(natsURL string)
	// OnClose, if set, is called after each run's split was written.
	OnClose func(id string, r split.Report)
	// HTTPReady, if set, is called once the HTTP endpoint listens, with
	// its address (host:port; it tells the port when http.listen asks for
	// port 0).
	HTTPReady func(addr string)
}

// Serve is `aggregator serve`: it joins the aggregators of its group,
// folds the events of the runs of the partitions it owns, and writes each
// run's split to the sinks when the run finishes (or after the idle
// timeout, as incomplete), until ctx is cancelled; then it hands its
// partitions over (each written, acknowledged and given back) and flushes
// the sinks.
//
//	sinks ◀── run table (internal/runtable) ◀── partition consumers ◀── events stream
//	               ▲ fleet.Handler: Acquired / Release / Lost
//	          fleet member (internal/fleet): members, leases, assignment
func Serve(ctx context.Context, cfg config.Aggregator, opt ServeOptions, log zerolog.Logger) error {
	foldOpts, err := FoldOptions(cfg)
	if err != nil {
		return err
	}
	m := runtable.NewMetrics()
	deliv := runtable.NewDeliveries(cfg.Sinks.Count())
	obs := sinks.ObserverFunc(func(e sinks.Event) {
		m.ObserveSink(e)
		deliv.Observe(e)
	})
	// Downstream first: the sinks, then the broker, then the table and
	// the fleet. The comment sink looks up the run a control names in the
	// table; a split a sink's full queue deferred is read back from the
	// state bucket in its turn.
	var tref atomic.Pointer[runtable.Table]
	lookup := func(ctx context.Context, id string) (split.Report, bool, error) {
		if t := tref.Load(); t != nil {
			return t.Snapshot(ctx, id)
		}
		return split.Report{}, false, nil
	}
	reload := func(ctx context.Context, sink, id string) (split.Report, bool, error) {
		if t := tref.Load(); t != nil {
			return t.Reload(ctx, sink, id)
		}
		return split.Report{}, false, nil
	}
	// A report is written only while this aggregator holds its run's
	// partition: asked right before each commit, so a report queued
	// before the partition moved is left to its new owner.
	keep := func(r split.Report) bool {
		t := tref.Load()
		return t != nil && t.Owns(r.Run.ID)
	}
	fan, err := openSinks(cfg.Sinks, sinks.Settings{Logger: log, Stdout: opt.Stdout, Lookup: lookup}, obs, reload, keep)
	if err != nil {
		return err
	}
	closeSinks := func() {
		if fan != nil {
			_ = fan.Close(context.Background())
		}
	}
	b, err := openBroker(ctx, cfg, log)
	if err != nil {
		closeSinks()
		return err
	}
	// fail undoes the start on an error before consuming began.
	fail := func(err error) error {
		b.close()
		closeSinks()
		return err
	}
	n := cfg.NATS
	var layout bus.Layout
	err = settle(ctx, log, "events stream", func(ctx context.Context) (err error) {
		layout, err = bus.EnsurePartitioned(ctx, b.js, n.Stream, cfg.Consumer.Partitions, n.Replicas, log)
		return err
	})
	if err != nil {
		return fail(err)
	}
	var kv jetstream.KeyValue
	err = settle(ctx, log, "state bucket", func(ctx context.Context) (err error) {
		kv, err = runtable.EnsureBucket(ctx, b.js, n.Replicas, log)
		return err
	})
	if err != nil {
		return fail(err)
	}
	tc := runtable.Config{Fold: foldOpts, Stream: n.Stream, Consumer: cfg.Consumer, Store: cfg.Store,
		Partitions: layout.Partitions, Legacy: layout.Legacy, Replicas: n.Replicas, IdleTimeout: cfg.IdleTimeout,
		Sinks: fan, Deliveries: deliv, OnClose: opt.OnClose, Metrics: m}
	if opt.Stdout != nil {
		tc.Print = func(r split.Report) { _ = WriteReport(opt.Stdout, cfg.Format, r) }
	}
	tbl, err := runtable.New(ctx, b.js, kv, tc, log)
	if err != nil {
		return fail(err)
	}
	tref.Store(tbl)
	var member *fleet.Member
	err = settle(ctx, log, "members bucket", func(ctx context.Context) (err error) {
		member, err = fleet.Join(ctx, b.js, fleet.Config{Group: cfg.Consumer.Durable, Partitions: layout.Partitions,
			Bucket: runtable.Bucket, KV: kv, Replicas: n.Replicas, LeaseTTL: cfg.Consumer.LeaseTTL}, tbl, log)
		return err
	})
	if err != nil {
		tbl.Close()
		return fail(err)
	}
	var srv *http.Server
	if cfg.HTTP.Listen != "" {
		var addr string
		srv, addr, err = startHTTP(cfg.HTTP, endpoints{tbl: tbl, member: member, nc: b.nc, m: m}, log)
		if err != nil {
			member.Abort()
			tbl.Close()
			return fail(err)
		}
		if opt.HTTPReady != nil {
			opt.HTTPReady(addr)
		}
	}
	log.Info().Str("group", cfg.Consumer.Durable).Str("member", member.ID()).Str("stream", n.Stream).Int("partitions", layout.Partitions).
		Bool("legacy_stream", layout.Legacy).Msg("aggregator consuming")
	if opt.Ready != nil {
		opt.Ready(b.nc.ConnectedUrl())
	}
	// The fleet's view goes to the metrics every second.
	mctx, stopMetrics := context.WithCancel(context.WithoutCancel(ctx))
	mdone := make(chan struct{})
	go func() {
		defer close(mdone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			view, members := member.View()
			m.ObserveFleet(view, members)
			select {
			case <-mctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	// The member takes and gives back partitions until ctx ends. Then the
	// sinks drain and close while this aggregator still holds its
	// partitions (a report is written only by its run's owner; one a sink
	// gives up on stays pending in the state bucket), and only then does
	// the member hand every partition over (written, acknowledged, given
	// back) for the next owner to write what is pending.
	rctx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		member.Run(rctx)
	}()
	select {
	case <-ctx.Done():
	case <-runDone:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	var errs []error
	if fan != nil {
		if err := fan.Close(sctx); err != nil {
			errs = append(errs, fmt.Errorf("sinks: %w", err))
		}
	}
	stopRun()
	<-runDone
	stopMetrics()
	<-mdone
	tbl.Close()
	if srv != nil {
		_ = srv.Shutdown(sctx)
	}
	b.close()
	log.Info().Int64("splits", tbl.Closed()).Msg("aggregator stopped")
	return errors.Join(errs...)
}

// FoldOptions builds the fold's options from the split.* keys.
func FoldOptions(cfg config.Aggregator) (split.Options, error) { return cfg.Split.Options() }

// WriteReport writes a report as text, md or json. JSON is one compact
// object per line (JSON Lines), so several runs on stdout stay
// machine-readable.
func WriteReport(w io.Writer, format string, r split.Report) error {
	var out []byte
	switch format {
	case "json":
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		out = append(b, '\n')
	case "md":
		out = []byte(present.Markdown(r) + "\n")
	default:
		out = []byte(present.Text(r) + "\n")
	}
	_, err := w.Write(out)
	return err
}
