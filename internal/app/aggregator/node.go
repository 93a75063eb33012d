package aggregator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/fleet"
	"github.com/gttsplit/gttsplit/internal/httpguard"
	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// Node is one aggregator of a group, built from its configuration in one
// place: Serve runs one, and so do the tests (of this package and of the
// run table). Open builds its parts in the start order, each needing
// those before it; Stop stops them in the stop order, which is not the
// reverse: the table stops pulling and writes what it holds, then the
// sinks, opened first, drain, while the partitions are still held.
//
// Start order (Open, then Start):
//
//  1. fold options  the split.* keys (the line grammar's patterns)
//  2. http port     http.listen's listener, taken before anything starts:
//     a busy port is said at once, before the sinks, the broker or the
//     fleet do anything
//  3. sinks         the fanout, its observer feeding the metrics and
//     Deliveries; the comment sink looks a run up in the table and a
//     deferred split is read back from it, both through the table of
//     step 7, once it is there; the lanes' changes comments get a comment
//     sink of their own, which the table posts through
//  4. broker        the connection (after starting the embedded server
//     when nats.url is empty)
//  5. stream        the events stream, partitioned at ingest
//  6. bucket        the state bucket (runs, leases)
//  7. table         the run table, following the run index
//  8. member        joins the group and takes its first partitions
//  9. http          the endpoints on the listener of step 2, reading the
//     table and the member
//  10. Start        the fleet's view to the metrics every second, and the
//     member's run (taking and giving back partitions)
//
// A step that fails undoes those before it, the last first.
//
// Stop order (all of it within shutdown_timeout):
//
//  1. member   freezes: no partition is taken or given back any more; its
//     leases stay renewed
//  2. table    stops pulling on every partition at once (the message in a
//     handler's hand is folded, those pulled and not handled go back to
//     the stream), then writes what every partition holds, side by side:
//     a last checkpoint (what it made durable acknowledged, the rest left
//     to the next owner), the runs due closed and their splits handed to
//     the sinks; nothing is closed after this (within half the timeout)
//  3. sinks    drain and close while this aggregator still holds its
//     partitions: a report is written only by its run's owner, and one a
//     sink did not settle stays pending in the state bucket, for the next
//     owner to send (until the timeout less the hand-over's reserve)
//  4. member   hands every partition over at once (what the sinks settled
//     recorded, the pin dropped, the lease deleted) and leaves
//  5. metrics  the fleet's view stops
//  6. table    stops following the index, waits for its split events;
//     then the lanes' changes comments' sink closes
//  7. http     shuts down
//  8. broker   the connection drains; the embedded server shuts down
type Node struct {
	cfg config.Aggregator
	opt ServeOptions
	log zerolog.Logger

	m     *runtable.Metrics
	deliv *runtable.Deliveries
	fold  split.Options
	fan   *sinks.Fanout // nil: no sink
	// lanes keeps the lanes' changes comments (nil: none); closeLanes
	// closes its comment sink.
	lanes      *runtable.LaneChanges
	closeLanes func()
	b          *broker
	lay        bus.Layout
	kv         jetstream.KeyValue
	tbl        *runtable.Table
	// tref is tbl for the sinks, opened before it.
	tref   atomic.Pointer[runtable.Table]
	member *fleet.Member
	ln     net.Listener // http.listen's, until srv serves on it
	loop   bool         // ln is a loopback address
	srv    *http.Server // nil: no HTTP

	// undo holds what Open built, undone in reverse when a later step
	// fails.
	undo []func()

	started     bool
	stopRun     context.CancelFunc
	runDone     chan struct{} // closed when the member's Run returned
	stopMetrics context.CancelFunc
	metricsDone chan struct{}

	stopOnce sync.Once
	stopErr  error
}

// Open builds an aggregator from cfg and opt in the start order (see
// Node): when it returns, the member holds its first partitions and the
// table consumes them. On error, what it built is undone.
func Open(ctx context.Context, cfg config.Aggregator, opt ServeOptions, log zerolog.Logger) (*Node, error) {
	n := &Node{cfg: cfg, opt: opt, log: log, m: runtable.NewMetrics(), deliv: runtable.NewDeliveries(),
		runDone: make(chan struct{})}
	steps := []func(context.Context) error{
		n.openFold, n.listenHTTP, n.openSinks, n.openBroker, n.ensureStream, n.ensureBucket, n.openTable, n.joinFleet, n.openHTTP,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			for i := len(n.undo) - 1; i >= 0; i-- {
				n.undo[i]()
			}
			return nil, err
		}
	}
	n.undo = nil
	return n, nil
}

// onFail registers how to undo a step, should a later one fail.
func (n *Node) onFail(undo func()) { n.undo = append(n.undo, undo) }

func (n *Node) openFold(context.Context) (err error) {
	n.fold, err = FoldOptions(n.cfg)
	return err
}

// listenHTTP takes http.listen's port first (see Node).
func (n *Node) listenHTTP(context.Context) (err error) {
	if n.cfg.HTTP.Listen == "" {
		return nil
	}
	if n.ln, n.loop, err = httpguard.Listen(n.cfg.HTTP.Listen); err != nil {
		return err
	}
	n.onFail(func() { _ = n.ln.Close() })
	return nil
}

func (n *Node) openSinks(context.Context) (err error) {
	obs := sinks.ObserverFunc(func(e sinks.Event) {
		n.m.ObserveSink(e)
		n.deliv.Observe(e)
	})
	reload := func(ctx context.Context, sink, id string) (split.Report, bool, error) {
		if t := n.tref.Load(); t != nil {
			return t.Reload(ctx, sink, id)
		}
		return split.Report{}, false, nil
	}
	// A report is written only while this aggregator holds its run's
	// partition: asked right before each commit, so a report queued
	// before the partition moved is left to its new owner.
	keep := func(r split.Report) bool {
		t := n.tref.Load()
		return t != nil && t.Owns(r.Run.ID)
	}
	lookup := func(ctx context.Context, id string) (split.Report, bool, error) {
		if t := n.tref.Load(); t != nil {
			return t.Snapshot(ctx, id)
		}
		return split.Report{}, false, nil
	}
	set := sinks.Settings{Logger: n.log, Stdout: n.opt.Stdout, Lookup: lookup}
	fc := fanoutConfig(n.cfg.Sinks, obs, reload, keep)
	fc.MaxPendingBytes = sinkMemory(n.cfg.MemoryLimitMiB)
	if n.opt.Sinks != nil {
		n.fan, err = n.opt.Sinks(set, fc)
	} else {
		n.fan, err = openSinks(n.cfg.Sinks, set, fc)
	}
	if err != nil {
		return err
	}
	n.onFail(func() {
		if n.fan != nil {
			_ = n.fan.Close(context.Background())
		}
	})
	n.lanes, n.closeLanes, err = laneChanges(n.cfg, sinks.Settings{Logger: n.log, Stdout: n.opt.Stdout})
	if err != nil {
		return err
	}
	n.onFail(n.closeLanes)
	return nil
}

func (n *Node) openBroker(ctx context.Context) (err error) {
	n.b, err = openBroker(ctx, n.cfg, n.log)
	if err != nil {
		return err
	}
	n.onFail(n.b.close)
	return nil
}

func (n *Node) ensureStream(ctx context.Context) error {
	c := n.cfg.NATS
	return settle(ctx, n.log, "events stream", func(ctx context.Context) (err error) {
		n.lay, err = bus.EnsurePartitioned(ctx, n.b.js, c.Stream, n.cfg.Consumer.Stream.Partitions, c.Replicas, n.log)
		return err
	})
}

func (n *Node) ensureBucket(ctx context.Context) error {
	return settle(ctx, n.log, "state bucket", func(ctx context.Context) (err error) {
		n.kv, err = runtable.EnsureBucket(ctx, n.b.js, n.cfg.NATS.Replicas, n.log)
		return err
	})
}

// runMemory is what the runs may take in memory, in bytes: half of the
// memory limit of limitMiB MiB (0: no limit, no bound): the open runs held
// in memory and what every run costs wherever its state is (see
// memlimit.go for the split).
func runMemory(limitMiB int) int64 { return int64(limitMiB) << 20 / 2 }

func (n *Node) openTable(ctx context.Context) (err error) {
	cfg := n.cfg
	tc := runtable.Config{Fold: n.fold, Stream: cfg.NATS.Stream, Group: cfg.Consumer.Fleet.Group,
		Consumer: cfg.Consumer.Table, Store: cfg.Store, Partitions: n.lay.Partitions, Legacy: n.lay.Legacy,
		Replicas: cfg.NATS.Replicas, IdleTimeout: cfg.IdleTimeout, RunMemory: runMemory(cfg.MemoryLimitMiB), Sinks: n.fan, Deliveries: n.deliv,
		OnClose: n.opt.OnClose, Now: n.opt.Now, Metrics: n.m, LaneChanges: n.lanes}
	if n.b.ns != nil {
		tc.StoreRoom = serverRoom(n.b.ns, cfg.Embedded.Store)
		tc.BrokerRunCost, tc.BrokerClosedRunCost = embeddedRunCost, embeddedClosedRunCost
	}
	if out := n.opt.Stdout; out != nil {
		tc.Print = func(r split.Report) { _ = WriteReport(out, cfg.Format, r) }
	}
	n.tbl, err = runtable.New(ctx, n.b.js, n.kv, tc, n.log)
	if err != nil {
		return err
	}
	n.tref.Store(n.tbl)
	n.onFail(n.tbl.Close)
	return nil
}

func (n *Node) joinFleet(ctx context.Context) error {
	set := fleet.Settings{Partitions: n.lay.Partitions, Bucket: runtable.Bucket, KV: n.kv,
		Replicas: n.cfg.NATS.Replicas, Heartbeat: n.opt.Heartbeat, Step: n.opt.Step}
	err := settle(ctx, n.log, "members bucket", func(ctx context.Context) (err error) {
		n.member, err = fleet.Join(ctx, n.b.js, n.cfg.Consumer.Fleet, set, n.tbl, n.log)
		return err
	})
	if err != nil {
		return err
	}
	n.onFail(n.member.Abort)
	return nil
}

func (n *Node) openHTTP(context.Context) error {
	if n.ln == nil {
		return nil
	}
	th, err := regress.ParseThresholds(n.cfg.LaneChanges.Thresholds)
	if err != nil {
		return fmt.Errorf("lane_changes.thresholds: %w", err)
	}
	srv, addr := startHTTP(n.cfg.HTTP, n.ln, n.loop, endpoints{tbl: n.tbl, member: n.member, nc: n.b.nc, m: n.m, changes: th}, n.log)
	n.srv = srv
	n.onFail(func() { _ = srv.Close() })
	if n.opt.HTTPReady != nil {
		n.opt.HTTPReady(addr)
	}
	return nil
}

// Start says the aggregator consumes (ServeOptions.Ready), sends the
// fleet's view to the metrics every second and runs the member, which
// takes and gives back partitions until Stop (ctx's values are kept, its
// cancellation is not: Stop ends them).
func (n *Node) Start(ctx context.Context) {
	n.log.Info().Str("group", n.cfg.Consumer.Fleet.Group).Str("member", n.member.ID()).Str("stream", n.cfg.NATS.Stream).
		Int("partitions", n.lay.Partitions).Bool("legacy_stream", n.lay.Legacy).Msg("aggregator consuming")
	if n.opt.Ready != nil {
		n.opt.Ready(n.b.nc.ConnectedUrl())
	}
	n.started = true
	mctx, stopMetrics := context.WithCancel(context.WithoutCancel(ctx))
	n.stopMetrics, n.metricsDone = stopMetrics, make(chan struct{})
	go func() {
		defer close(n.metricsDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			view, members := n.member.View()
			n.m.ObserveFleet(view, members)
			select {
			case <-mctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	rctx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	n.stopRun = stopRun
	go func() {
		defer close(n.runDone)
		n.member.Run(rctx)
	}()
}

// Done is closed when the member stopped on its own (before Stop).
func (n *Node) Done() <-chan struct{} { return n.runDone }

// Stop stops the aggregator in the stop order (see Node), the sinks and
// the HTTP endpoint within cfg.ShutdownTimeout from now (ctx's values are
// kept, its cancellation is not: Serve stops because ctx ended). It
// returns the sinks' error, if they could not deliver everything. Stop is
// idempotent.
func (n *Node) Stop(ctx context.Context) error {
	n.stopOnce.Do(func() { n.stopErr = n.stop(ctx) })
	return n.stopErr
}

func (n *Node) stop(ctx context.Context) error {
	timeout := n.cfg.ShutdownTimeout
	start := time.Now()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	var errs []error
	// 1. member, 2. table
	n.member.Freeze()
	dctx, dcancel := context.WithDeadline(sctx, start.Add(timeout/2))
	n.tbl.Drain(dctx)
	dcancel()
	n.log.Info().Dur("took", time.Since(start).Round(time.Millisecond)).Msg("stop: pulling stopped, what was in hand written")
	// 3. sinks
	if n.fan != nil {
		fctx, fcancel := context.WithDeadline(sctx, start.Add(timeout-handOverReserve(timeout)))
		closeFan := n.fan.Close
		if n.opt.OneShot != nil && n.opt.OneShot() {
			closeFan = func(ctx context.Context) error { return CloseOneShot(ctx, n.fan, n.cfg.ShutdownTimeout) }
		}
		if err := closeFan(fctx); err != nil {
			errs = append(errs, fmt.Errorf("sinks: %w", err))
		}
		fcancel()
	}
	// 4. member, 5. metrics
	if n.started {
		n.stopRun()
		<-n.runDone
		n.stopMetrics()
		<-n.metricsDone
	} else {
		n.member.Abort()
	}
	n.log.Info().Dur("took", time.Since(start).Round(time.Millisecond)).Msg("stop: every partition handed over")
	// 6. table
	n.tbl.Close()
	n.closeLanes()
	// 7. http
	if n.srv != nil {
		_ = n.srv.Shutdown(sctx)
	}
	// 8. broker
	n.b.close()
	n.log.Info().Int64("splits", n.tbl.Closed()).Dur("took", time.Since(start).Round(time.Millisecond)).Msg("aggregator stopped")
	return errors.Join(errs...)
}

// handOverReserve is what a stop keeps of shutdown_timeout for handing the
// partitions over and closing the connection, after the sinks' drain.
func handOverReserve(timeout time.Duration) time.Duration { return min(timeout/5, 5*time.Second) }

// Table is the node's run table.
func (n *Node) Table() *runtable.Table { return n.tbl }

// Member is the node's fleet member.
func (n *Node) Member() *fleet.Member { return n.member }

// Metrics are the node's metrics (/metrics).
func (n *Node) Metrics() *runtable.Metrics { return n.m }

// Layout is the events stream as the node found it.
func (n *Node) Layout() bus.Layout { return n.lay }

// Conn is the node's connection to the broker.
func (n *Node) Conn() *nats.Conn { return n.b.nc }
