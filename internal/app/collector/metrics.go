package collector

import (
	"io"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/httpguard"
)

// registry returns the collector's metrics: what became of the events of
// the run (built, acknowledged by the broker, spooled, dropped), the
// spool's size against its bound and whether the broker is connected,
// each labelled with the collector's host and lane. A lane's collector
// serves them on http.listen while it runs, so an alert sees a spool that
// grows or events dropped before the run ends.
func registry(p *pipeline, spool bus.SpoolConfig) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"host": p.origin.Host, "lane": p.origin.Lane}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	reg.MustRegister(
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		counter("gttsplit_collector_events_total", "Events built from the run's log lines and samples.",
			func() float64 { return float64(p.events.Load()) }),
		counter("gttsplit_collector_records_invalid_total", "Records skipped because no valid event could carry them.",
			func() float64 { return float64(p.invalid.Load()) }),
	)
	if p.pub == nil { // offline: nothing is published
		return reg
	}
	pub := p.pub
	reg.MustRegister(
		counter("gttsplit_collector_events_published_total", "Events acknowledged by the broker, sent directly or drained from the spool.",
			func() float64 { st := pub.Stats(); return float64(st.Published + st.Drained) }),
		counter("gttsplit_collector_events_spooled_total", "Events written to the disk spool while the broker was away or slow.",
			func() float64 { return float64(pub.Stats().Spooled) }),
		counter("gttsplit_collector_events_dropped_total", "Events neither delivered nor spooled (a full spool, or refused by the broker for good).",
			func() float64 { return float64(pub.Stats().Dropped) }),
		counter("gttsplit_collector_spool_lost_bytes_total", "Bytes of corrupt spool records skipped: the events in them are lost.",
			func() float64 { return float64(pub.SpoolLoss().Bytes) }),
		gauge("gttsplit_collector_spool_bytes", "Size of the lane's spool on disk: events waiting for the broker (0 once drained).",
			func() float64 { return float64(pub.Stats().SpoolBytes) }),
		gauge("gttsplit_collector_spool_max_bytes", "The spool's bound (spool.max_bytes); past it new events are dropped.",
			func() float64 { return float64(spool.MaxBytes) }),
		gauge("gttsplit_collector_broker_connected", "1 while the connection to the broker is up, else 0.",
			func() float64 {
				if pub.Connected() {
					return 1
				}
				return 0
			}),
	)
	return reg
}

// startHTTP serves /healthz, /metrics and with cfg.Pprof /debug/pprof/ on
// ln (cfg.Listen's, loop when loopback). On a loopback address /metrics is
// open; on any other it needs cfg.Token, unless cfg.MetricsPublic (the
// profiles need it whatever that says).
func startHTTP(cfg config.HTTP, ln net.Listener, loop bool, reg *prometheus.Registry, log zerolog.Logger) *http.Server {
	token := cfg.Token.Reveal()
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if !cfg.MetricsPublic {
		metrics = httpguard.Guard{Token: token, Loopback: loop}.Wrap(metrics)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.Handle("GET /metrics", metrics)
	paths := "http: /healthz /metrics"
	if cfg.Pprof {
		httpguard.MountProfiles(mux, httpguard.Guard{Token: token, Loopback: loop})
		paths += " /debug/pprof/"
	}
	srv := httpguard.Serve(ln, mux, log)
	log.Info().Str("listen", ln.Addr().String()).Msg(paths)
	if !loop && token == "" && !cfg.MetricsPublic {
		log.Warn().Str("listen", ln.Addr().String()).Msg("http: on a non-loopback address without http.token (GTTSPLIT_HTTP_TOKEN) or http.metrics_public, /metrics is refused; only /healthz is served")
	}
	return srv
}
