package aggregator

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/fleet"
	"github.com/gttsplit/gttsplit/internal/httpguard"
	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/internal/web"
)

// endpoints are what the HTTP endpoints read.
type endpoints struct {
	tbl    *runtable.Table
	member *fleet.Member
	nc     *nats.Conn
	m      *runtable.Metrics
	// changes are the lane changes' thresholds the trend marks.
	changes regress.Thresholds
}

// ready says whether the aggregator does its work: connected, following
// the fleet, its partitions getting their events and its checkpoints
// written.
func (e endpoints) ready() (bool, string) {
	if !e.nc.IsConnected() {
		return false, "nats not connected"
	}
	var why []string
	if ok, w := e.member.Ready(); !ok {
		why = append(why, w)
	}
	if ok, w := e.tbl.Ready(); !ok {
		why = append(why, w)
	}
	return len(why) == 0, strings.Join(why, "; ")
}

// readyz is /readyz's status and body: 200 "ready", or 503 with the
// reasons; either names what the table catches up on without being
// unready (runtable.Table.Paced: pulls waiting for the partition
// furthest behind), on a line of its own after "ready".
func (e endpoints) readyz() (int, string) {
	ok, why := e.ready()
	return readyzPage(ok, why, e.tbl.Paced())
}

// readyzPage is readyz from readiness (ok, why) and what the table
// catches up on without being unready (paced, "" nothing).
func readyzPage(ok bool, why, paced string) (int, string) {
	switch {
	case !ok && paced != "":
		return http.StatusServiceUnavailable, why + "; " + paced
	case !ok:
		return http.StatusServiceUnavailable, why
	case paced != "":
		return http.StatusOK, "ready\n" + paced + "\n"
	}
	return http.StatusOK, "ready\n"
}

// partitionsView is /partitions: every partition's owner as this
// aggregator sees it, and the live members.
type partitionsView struct {
	Member     string                `json:"member"`
	Members    []string              `json:"members"`
	Partitions []fleet.PartitionView `json:"partitions"`
}

// startHTTP serves /healthz, /readyz, /metrics, /partitions, /runs,
// /runs/{id}, the live page and with cfg.Pprof /debug/pprof/ on ln
// (cfg.Listen's, loop when loopback). On a loopback address every
// path is open; on any other, every path but /healthz and /readyz needs
// cfg.Token (see httpguard.Guard), and /metrics too unless cfg.MetricsPublic.
func startHTTP(cfg config.HTTP, ln net.Listener, loop bool, e endpoints, log zerolog.Logger) (*http.Server, string) {
	token := cfg.Token.Reveal()
	guard := httpguard.Guard{Token: token, Loopback: loop}
	svc := e.tbl
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		code, body := e.readyz()
		if code != http.StatusOK {
			http.Error(w, body, code)
			return
		}
		_, _ = io.WriteString(w, body)
	})
	metricsHandler := promhttp.HandlerFor(e.m.Registry, promhttp.HandlerOpts{})
	if !cfg.MetricsPublic {
		metricsHandler = guard.Wrap(metricsHandler)
	}
	mux.Handle("GET /metrics", metricsHandler)
	mux.Handle("GET /partitions", guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		view, members := e.member.View()
		writeJSON(w, partitionsView{Member: e.member.ID(), Members: members, Partitions: view})
	})))
	mux.Handle("GET /runs", guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := 1000
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 10000 {
				http.Error(w, "limit: a number from 1 to 10000", http.StatusBadRequest)
				return
			}
			limit = n
		}
		list, more, err := svc.ReadPage(r.Context(), r.URL.Query().Get("after"), limit)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if more && len(list) > 0 {
			w.Header().Set("X-Next-After", list[len(list)-1].ID)
		}
		if n, why := svc.Unlisted(); n > 0 {
			w.Header().Set("X-Unlisted-Runs", strconv.FormatInt(n, 10))
			w.Header().Set("X-Unlisted-Why", why)
		}
		if n, why := svc.Evicted(); n > 0 {
			w.Header().Set("X-Evicted-Runs", strconv.FormatInt(n, 10))
			w.Header().Set("X-Evicted-Why", why)
		}
		if list == nil {
			list = []runtable.RunSummary{}
		}
		writeJSON(w, list)
	})))
	mux.Handle("GET /runs/{id}", guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rep, ok, err := svc.Snapshot(r.Context(), r.PathValue("id"))
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case !ok:
			http.Error(w, "no such run", http.StatusNotFound)
		default:
			writeJSON(w, rep)
		}
	})))
	stopWeb := mountWeb(mux, svc, web.Options{Token: token, Loopback: loop, Thresholds: e.changes}, log)
	paths := "http: / (the live page) /healthz /readyz /metrics /partitions /runs /runs/{id}"
	if cfg.Pprof {
		httpguard.MountProfiles(mux, guard)
		paths += " /debug/pprof/"
	}
	srv := httpguard.Serve(ln, mux, log)
	srv.RegisterOnShutdown(stopWeb)
	log.Info().Str("listen", ln.Addr().String()).Msg(paths)
	switch {
	case loop:
	case token == "" && cfg.MetricsPublic:
		log.Warn().Str("listen", ln.Addr().String()).Msg("http: on a non-loopback address without http.token (GTTSPLIT_HTTP_TOKEN) only /healthz, /readyz and /metrics (http.metrics_public) are served; the page, /partitions, /runs and /runs/{id} are refused")
	case token == "":
		log.Warn().Str("listen", ln.Addr().String()).Msg("http: on a non-loopback address without http.token (GTTSPLIT_HTTP_TOKEN) only /healthz and /readyz are served; the page, /partitions, /runs, /runs/{id} and /metrics are refused")
	}
	return srv, ln.Addr().String()
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
