package aggregator

import (
	"context"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/internal/web"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// webSource reads the live page's runs from the run table: the summaries
// from its run index (memory), a report only for a run a page shows.
type webSource struct{ svc *runtable.Table }

func (s webSource) Summaries(ctx context.Context) ([]web.Summary, error) {
	list, err := s.svc.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]web.Summary, len(list))
	for i, r := range list {
		out[i] = web.Summary{ID: r.ID, Host: r.Host, Lane: r.Lane, State: r.State, LastEvent: r.LastEvent, Split: r.Split}
	}
	return out, nil
}

// Unlisted says how many open runs the run index does not list, and why.
func (s webSource) Unlisted() (int64, string) { return s.svc.Unlisted() }

// Figures reads a closed run's figures from its summary in the state
// bucket (the run index evicted those of older closed runs).
func (s webSource) Figures(ctx context.Context, id string) (split.Figures, bool, error) {
	sum, ok, err := s.svc.Summary(ctx, id)
	if err != nil || !ok || sum.Split == nil {
		return split.Figures{}, false, err
	}
	return *sum.Split, true, nil
}

func (s webSource) Report(ctx context.Context, id string) (split.Report, bool, error) {
	return s.svc.Snapshot(ctx, id)
}

// mountWeb adds the live page (internal/web) to mux: on a loopback
// listener there is no login, elsewhere the pages need the token
// (opt.Loopback, opt.Token). It returns the function that ends the live
// streams.
func mountWeb(mux *http.ServeMux, svc *runtable.Table, opt web.Options, log zerolog.Logger) func() {
	h := web.New(webSource{svc}, opt, log.With().Str("component", "web").Logger())
	h.Register(mux)
	return h.Close
}
