package aggregator

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// startHTTP serves /healthz, /readyz, /metrics, /runs, /runs/{id} and the
// live page on listen.
func startHTTP(listen, token string, svc *Service, b *broker, own *owner, m *metrics, log zerolog.Logger) (*http.Server, string, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !b.nc.IsConnected() {
			http.Error(w, "nats not connected", http.StatusServiceUnavailable)
			return
		}
		if ok, why := own.Ready(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /runs", func(w http.ResponseWriter, r *http.Request) {
		if svc.index != nil {
			limit := 1000
			if v := r.URL.Query().Get("limit"); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 || n > 10000 {
					http.Error(w, "limit: a number from 1 to 10000", http.StatusBadRequest)
					return
				}
				limit = n
			}
			list, more := svc.listPage(r.URL.Query().Get("after"), limit)
			if more && len(list) > 0 {
				w.Header().Set("X-Next-After", list[len(list)-1].ID)
			}
			writeJSON(w, list)
			return
		}
		list, err := svc.List(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if list == nil {
			list = []RunSummary{}
		}
		writeJSON(w, list)
	})
	mux.HandleFunc("GET /runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		rep, ok, err := svc.Snapshot(r.Context(), r.PathValue("id"))
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case !ok:
			http.Error(w, "no such run", http.StatusNotFound)
		default:
			writeJSON(w, rep)
		}
	})
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, "", fmt.Errorf("http.listen: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	srv.RegisterOnShutdown(mountWeb(mux, svc, ln.Addr(), token, log))
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("http server")
		}
	}()
	log.Info().Str("listen", ln.Addr().String()).Msg("http: / (the live page) /healthz /readyz /metrics /runs /runs/{id}")
	return srv, ln.Addr().String(), nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
