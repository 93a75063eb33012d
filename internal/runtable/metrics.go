package aggregator

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gttsplit/gttsplit/pkg/sinks"
)

// metrics are what /metrics exposes.
type metrics struct {
	reg         *prometheus.Registry
	folded      prometheus.Counter
	redelivered prometheus.Counter
	duplicates  prometheus.Counter
	dead        *prometheus.CounterVec
	runsOpen    prometheus.Gauge
	completed   *prometheus.CounterVec
	sinkErrors  *prometheus.CounterVec
	sinkWrites  *prometheus.CounterVec
	sinkDefer   *prometheus.CounterVec
	sinkRequeue *prometheus.CounterVec
	foldSeconds prometheus.Histogram
	persistErrs prometheus.Counter
	conflicts   prometheus.Counter
	lag         prometheus.Gauge
	owned       prometheus.Gauge
	ckptAge     prometheus.Gauge
	splitPubErr prometheus.Counter
	compacted   prometheus.Counter
	reattached  prometheus.Counter
	checkpoints prometheus.Counter
	stateWrites prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.folded = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_events_folded_total",
		Help: "Events folded into a run's split."})
	m.redelivered = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_events_redelivered_total",
		Help: "Events delivered again by JetStream; the fold ignores what they repeat."})
	m.duplicates = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_events_duplicate_total",
		Help: "Events that brought nothing new (every line and sample already folded) and were ignored."})
	m.dead = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gttsplit_events_dead_lettered_total",
		Help: "Events that could not be folded and went to the dead-letter subject, by reason."}, []string{"reason"})
	m.runsOpen = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_runs_open",
		Help: "Runs with events and no final split yet."})
	m.completed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gttsplit_runs_completed_total",
		Help: "Runs whose split was written, by status (complete, or incomplete after the idle timeout)."}, []string{"status"})
	m.sinkErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gttsplit_sink_errors_total",
		Help: "Failed sink writes, by sink and outcome (retrying, failed for good, dropped: at shutdown, or past the deferred splits' cap, then re-sent from the state bucket once the sink caught up)."}, []string{"sink", "outcome"})
	m.sinkDefer = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gttsplit_sink_deferred_total",
		Help: "Splits a sink's full queue (sinks.max_pending) deferred: only the run id is kept, the split is read back from the state bucket in its turn, by sink."}, []string{"sink"})
	m.sinkRequeue = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gttsplit_sink_requeued_total",
		Help: "Deferred splits read back from the state bucket for a write, by sink (a deferral ends in one read-back, unless the run re-opened or its partition moved: its next owner re-sends it; one that fails and finds the queue full is deferred again)."}, []string{"sink"})
	m.sinkWrites = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gttsplit_sink_writes_total",
		Help: "Reports delivered, by sink."}, []string{"sink"})
	m.foldSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gttsplit_fold_seconds",
		Help: "Time to fold one event.", Buckets: prometheus.ExponentialBuckets(1e-6, 4, 10)})
	m.persistErrs = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_state_persist_errors_total",
		Help: "Failed writes of run state to the state bucket (the events are redelivered)."})
	m.conflicts = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_state_conflicts_total",
		Help: "Run-state writes that lost a race with another aggregator and were re-applied."})
	m.lag = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_consumer_lag",
		Help: "Messages of the partitions this aggregator owns not yet delivered to it (the consumers' pending count)."})
	m.owned = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_partitions_owned",
		Help: "Partitions whose runs this aggregator folds."})
	m.ckptAge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_checkpoint_age_seconds",
		Help: "Time since the run states in memory were last all written to the state bucket."})
	m.splitPubErr = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_split_publish_errors_total",
		Help: "Failed attempts to publish a split event (each is retried)."})
	m.compacted = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_runs_compacted_total",
		Help: "Closed runs whose state was replaced by its compact record after store.compact_after."})
	m.reattached = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_source_reattached_total",
		Help: "Times the partitioned stream's source went silent and was re-attached by stepping the stream's leader down."})
	m.checkpoints = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_checkpoints_total",
		Help: "Checkpoints: writes of the changed run states to the state bucket, then the acknowledgements of their messages."})
	m.stateWrites = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_state_writes_total",
		Help: "Run states written to the state bucket (by checkpoints and closes)."})
	m.reg.MustRegister(m.lag, m.owned, m.ckptAge, m.splitPubErr, m.compacted, m.reattached, m.checkpoints, m.stateWrites)
	m.reg.MustRegister(m.sinkDefer, m.sinkRequeue)
	m.reg.MustRegister(m.folded, m.redelivered, m.duplicates, m.dead, m.runsOpen, m.completed, m.sinkErrors, m.sinkWrites,
		m.foldSeconds, m.persistErrs, m.conflicts,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observeSink counts a sink event of the Fanout.
func (m *metrics) observeSink(e sinks.Event) {
	switch e.Outcome {
	case sinks.OutcomeDelivered:
		m.sinkWrites.WithLabelValues(e.Sink).Inc()
	case sinks.OutcomeDeferred:
		m.sinkDefer.WithLabelValues(e.Sink).Inc()
	case sinks.OutcomeRequeued:
		m.sinkRequeue.WithLabelValues(e.Sink).Inc()
	case sinks.OutcomeWithdrawn:
	default:
		m.sinkErrors.WithLabelValues(e.Sink, e.Outcome.String()).Inc()
	}
}
