package aggregator

import (
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/present"
)

// ServeOptions are what an aggregator needs besides its config: what the
// program (serve, quickstart) or a test decides. The zero value is serve's.
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

	// Sinks, if set, opens the sinks in place of those cfg.Sinks enables
	// (a test's, in memory). fc is the fanout's config as the aggregator
	// wires it: cfg.Sinks' retry and max_pending, the observer that feeds
	// the metrics and the run table's Deliveries, the reload of a deferred
	// split and the ownership guard; pass it on to sinks.NewFanout,
	// changed only where the test means to. The aggregator owns the
	// fanout from then on (Stop closes it).
	Sinks func(set sinks.Settings, fc sinks.FanoutConfig) (*sinks.Fanout, error)
	// Now is the run table's clock (nil: time.Now).
	Now func() time.Time
	// Heartbeat and Step tune the fleet member (fleet.Settings; zero:
	// its defaults).
	Heartbeat time.Duration
	Step      int
	// OneShot, if set, is asked at the end whether no aggregator comes
	// after this one to send what the sinks hold (quickstart, unless it
	// was interrupted): then they keep retrying until shutdown_timeout
	// (CloseOneShot) instead of giving up after a few tries.
	OneShot func() bool
}

// Serve is `aggregator serve`: it joins the aggregators of its group,
// folds the events of the runs of the partitions it owns, and writes each
// run's split to the sinks when the run finishes (or after the idle
// timeout, as incomplete), until ctx is cancelled; then it stops pulling,
// writes what it holds, flushes the sinks and hands every partition over
// at once, within shutdown_timeout. It is Open, Start and, once ctx ends (or the member stopped
// on its own), Stop: see Node for the parts and their order.
//
//	sinks ◀── run table (internal/runtable) ◀── partition consumers ◀── events stream
//	               ▲ fleet.Handler: Acquired / Release / Lost
//	          fleet member (internal/fleet): members, leases, assignment
func Serve(ctx context.Context, cfg config.Aggregator, opt ServeOptions, log zerolog.Logger) error {
	n, err := Open(ctx, cfg, opt, log)
	if err != nil {
		return err
	}
	n.Start(ctx)
	select {
	case <-ctx.Done():
	case <-n.Done():
	}
	return n.Stop(ctx)
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
