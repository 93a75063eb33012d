package aggregator

import (
	"context"
	"net"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/internal/web"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// webSource reads the live page's runs from the service.
type webSource struct{ svc *runtable.Table }

func (s webSource) Summaries(ctx context.Context) ([]web.Summary, error) {
	list, err := s.svc.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]web.Summary, len(list))
	for i, r := range list {
		out[i] = web.Summary{ID: r.ID, Host: r.Host, Lane: r.Lane, State: r.State, LastEvent: r.LastEvent}
	}
	return out, nil
}

func (s webSource) Report(ctx context.Context, id string) (split.Report, bool, error) {
	return s.svc.Snapshot(ctx, id)
}

// mountWeb adds the live page (internal/web) to mux; addr is the
// listener's address: on loopback there is no login, elsewhere the pages
// need token. It returns the function that ends the live streams.
func mountWeb(mux *http.ServeMux, svc *runtable.Table, addr net.Addr, token string, log zerolog.Logger) func() {
	loop := false
	if a, ok := addr.(*net.TCPAddr); ok {
		loop = a.IP.IsLoopback()
	}
	h := web.New(webSource{svc}, web.Options{Token: token, Loopback: loop}, log.With().Str("component", "web").Logger())
	h.Register(mux)
	if !loop && token == "" {
		log.Warn().Str("listen", addr.String()).Msg("http: the live page is refused on a non-loopback address without http.token (GTTSPLIT_HTTP_TOKEN)")
	}
	return h.Close
}
