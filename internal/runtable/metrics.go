package runtable

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gttsplit/gttsplit/internal/fleet"
	"github.com/gttsplit/gttsplit/pkg/sinks"
)

// Metrics are what an aggregator's /metrics exposes: the run table's, the
// partitions' and the sinks'.
type Metrics struct {
	Registry    *prometheus.Registry
	folded      prometheus.Counter
	redelivered prometheus.Counter
	// redeliveredBy is the redeliveries by what they were traced to
	// (redeliver.go).
	redeliveredBy *prometheus.CounterVec
	duplicates    prometheus.Counter
	dead          *prometheus.CounterVec
	runsOpen      prometheus.Gauge
	completed     *prometheus.CounterVec
	sinkErrors    *prometheus.CounterVec
	sinkWrites    *prometheus.CounterVec
	sinkDefer     *prometheus.CounterVec
	sinkRequeue   *prometheus.CounterVec
	foldSeconds   prometheus.Histogram
	persistErrs   prometheus.Counter
	lag           prometheus.Gauge
	owned         prometheus.Gauge
	ckptAge       prometheus.Gauge
	splitPubErr   prometheus.Counter
	compacted     prometheus.Counter
	checkpoints   prometheus.Counter
	stateWrites   prometheus.Counter
	// writeCauses is the run states written by what made them due
	// (checkpoint.go: writeCause).
	writeCauses *prometheus.CounterVec
	progress    prometheus.Counter
	repulls     prometheus.Counter
	pulledLate  prometheus.Counter
	// The runs' memory (memory.go).
	shed      prometheus.Counter
	runsShed  prometheus.Gauge
	runMemory prometheus.Gauge
	// runIndexMemory is besideRuns (memory.go).
	runIndexMemory prometheus.Gauge
	unlisted       prometheus.GaugeFunc
	evicted        prometheus.GaugeFunc
	memWaits       prometheus.Counter
	// Pulls and close passes held for the heap (hold.go).
	memHeld  prometheus.Gauge
	memHolds prometheus.Counter
	// The pulls' waits for the partition furthest behind (pullfloor.go).
	floorWaiting     prometheus.Gauge
	floorWaits       prometheus.Counter
	floorWaitSeconds prometheus.Counter
	// expiredEarly counts the closed runs deleted before store.retention
	// (trim.go).
	expiredEarly prometheus.Counter
	// The fleet: members seen, every partition's owner as this member
	// sees it, partitions without one, partitions whose events stopped.
	members  prometheus.Gauge
	owner    *prometheus.GaugeVec
	unowned  prometheus.Gauge
	stalled  prometheus.Gauge
	legacy   prometheus.Gauge
	closeLat prometheus.Histogram
	// The JetStream store: the events stream's size, and how full each
	// store with a limit is (room.go).
	streamBytes prometheus.Gauge
	storeUsed   *prometheus.GaugeVec
	// laneChecks counts the lanes' changes comments looked at
	// (lanechanges.go).
	laneChecks *prometheus.CounterVec
	// lanes exports the last closed split of each lane from the run
	// index (lanes.go).
	lanes *laneGauges
}

// NewMetrics returns the metrics, registered with a registry of their own
// (with the Go and process collectors).
func NewMetrics() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.folded = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_events_folded_total",
		Help: "Events folded into a run's split."})
	m.redelivered = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_events_redelivered_total",
		Help: "Events delivered again by JetStream; the fold ignores what they repeat."})
	m.redeliveredBy = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gttsplit_events_redelivered_causes_total",
		Help: "Messages of the partitions delivered again by JetStream, by what their earlier delivery was traced to on this aggregator: held_pulled, held_in_hand, held_folded, held_writing, held_failed_write (the ack wait ran out while this aggregator held it: in a pull, in the handler's hand, folded and waiting for its run's write, held by a write under way, after a write holding it failed), acked (acknowledged here: the acknowledgement came after the ack wait), handed_back (handed back here: a release, a stop, a fold that failed), unseen (another aggregator's delivery, or a pull that ended before it arrived)."}, []string{"cause"})
	m.duplicates = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_events_duplicate_total",
		Help: "Events that brought nothing new (every line and sample already folded) and were ignored."})
	m.dead = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gttsplit_events_dead_lettered_total",
		Help: "Events that could not be folded and went to the dead-letter subject, by reason."}, []string{"reason"})
	m.runsOpen = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_runs_open",
		Help: "Runs of the partitions this aggregator owns with events and no final split yet."})
	m.completed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gttsplit_runs_completed_total",
		Help: "Runs whose split was written, by status (complete, or incomplete after the idle timeout)."}, []string{"status"})
	m.sinkErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gttsplit_sink_errors_total",
		Help: "Failed sink writes, by sink and outcome (retrying, failed for good, dropped: at shutdown, or past the deferred splits' cap, then re-sent from the state bucket once the sink caught up)."}, []string{"sink", "outcome"})
	m.sinkDefer = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gttsplit_sink_deferred_total",
		Help: "Splits a sink's full queue (sinks.max_pending) deferred: only the run id is kept, the split is read back from the state bucket in its turn, by sink."}, []string{"sink"})
	m.sinkRequeue = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gttsplit_sink_requeued_total",
		Help: "Deferred splits read back from the state bucket for a write, by sink."}, []string{"sink"})
	m.sinkWrites = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gttsplit_sink_writes_total",
		Help: "Reports delivered, by sink."}, []string{"sink"})
	m.foldSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gttsplit_fold_seconds",
		Help: "Time to fold one event.", Buckets: prometheus.ExponentialBuckets(1e-6, 4, 10)})
	m.persistErrs = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_state_persist_errors_total",
		Help: "Failed writes of run state to the state bucket (retried; the events wait unacknowledged)."})
	m.lag = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_consumer_lag",
		Help: "Messages of the partitions this aggregator owns not yet delivered to it (the consumers' pending count)."})
	m.owned = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_partitions_owned",
		Help: "Partitions whose runs this aggregator folds (whose lease it holds)."})
	m.ckptAge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_checkpoint_age_seconds",
		Help: "Time since the partitions owned last checkpointed without a failure (wrote to the state bucket every run state then due)."})
	m.splitPubErr = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_split_publish_errors_total",
		Help: "Failed attempts to publish a split event (each is retried)."})
	m.compacted = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_runs_compacted_total",
		Help: "Closed runs whose state was replaced by its compact record after store.compact_after."})
	m.checkpoints = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_checkpoints_total",
		Help: "Checkpoints: writes of a partition's changed run states to the state bucket, then the acknowledgements of their messages."})
	m.stateWrites = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_state_writes_total",
		Help: "Run states written to the state bucket (by checkpoints and closes)."})
	m.writeCauses = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gttsplit_state_writes_causes_total",
		Help: "The same run states by what made them due: due (a message waiting for the run's write neared its last progress acknowledgement before one, and the runs written with it), interval (a changed run none of whose messages waits, at checkpoint_interval), kick (half of max_ack_pending messages waited), room (the runs' memory bound), every (the margins left nothing to wait for), retry (a failing bucket), last (a hand-over's or a stop's last checkpoint), close (a run's closed state)."}, []string{"cause"})
	m.progress = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_events_progress_acks_total",
		Help: "Progress acknowledgements sent for events still waiting for their checkpoint (their ack wait starts again instead of a redelivery)."})
	m.repulls = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_partition_leaderless_pulls_total",
		Help: "Pulls of a partition's events that found its consumer without a leader (its node lost, the others electing one): pulled again after a quarter second."})
	m.pulledLate = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_events_pulled_late_total",
		Help: "Events that came on a pull after the partition stopped waiting for it (its expiry and the grace past it, or cut): handled as any other, their ack wait counted from when the pull was sent (a client that stopped listening would have dropped them, to be delivered again an ack wait later)."})
	m.shed = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_runs_shed_total",
		Help: "Open runs taken out of memory past the runs' memory bound (from memory_limit_mib): their state waits in the state bucket and is read back when an event comes for them."})
	m.runsShed = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_runs_shed",
		Help: "Open runs of the partitions this aggregator owns kept in the state bucket only, not in memory (shed past the runs' memory bound); /readyz says shedding while there are any."})
	m.runMemory = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_run_memory_bytes",
		Help: "What the runs held in memory are taken to cost (twice their encoded state, and what the table keeps beside each); with gttsplit_run_index_memory_bytes against the runs' memory bound (from memory_limit_mib)."})
	m.runIndexMemory = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_run_index_memory_bytes",
		Help: "What every open run costs this process wherever its state is: its summary in the run index (or its count there, past the index's share), its cold entry when shed, and with the embedded broker the broker's index of its keys; and the closed runs' summaries and stubs in the run index; counted against the runs' memory bound with gttsplit_run_memory_bytes."})
	m.unlisted = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gttsplit_runs_unlisted",
		Help: "Open runs (any partition's) the run index counts but does not list on /runs and the live page: their summaries would pass the index's share of the runs' memory bound (an eighth); each is listed once it closes."},
		func() float64 {
			if ix := m.lanes.ix.Load(); ix != nil {
				return float64(ix.unlistedN.Load())
			}
			return 0
		})
	m.evicted = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gttsplit_runs_closed_evicted",
		Help: "Closed runs whose summaries the run index does not hold in memory, only a stub (id, times, host, lane and model): past the index's share of the runs' memory bound (an eighth) for closed runs; /runs, the lane changes and the trend page read their summaries from the state bucket."},
		func() float64 {
			if ix := m.lanes.ix.Load(); ix != nil {
				return float64(ix.stubsN.Load())
			}
			return 0
		})
	m.memWaits = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_run_memory_waits_total",
		Help: "Events for a run not in memory that waited for their partition's checkpoint (and its shedding) because the runs' memory bound was passed."})
	m.memHeld = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_memory_held",
		Help: "Partitions' pulls and close passes (closes, read-backs of shed runs to close them) held now because the live heap is past three quarters of the runtime's memory limit (from memory_limit_mib); each at most 15 s, then one goes ahead. /readyz says catching up while any is held."})
	m.memHolds = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_memory_holds_total",
		Help: "Pulls and close passes held because the live heap was past three quarters of the runtime's memory limit (gttsplit_memory_held)."})
	m.floorWaiting = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_pull_floor_waiting",
		Help: "Partitions whose next pull waits now for the partition furthest behind in the events stream: with the broker in this process (serve on its embedded broker) and memory_limit_mib set, a partition more than 8 MiB of events past the one furthest behind with events pending waits, at most 15 s a pull, so the broker keeps fewer blocks of the stream in memory. /readyz's body says catching up in stream order while any waits (not unready: 200 when nothing else is wrong)."})
	m.floorWaits = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_pull_floor_waits_total",
		Help: "Pulls that waited for the partition furthest behind in the events stream (gttsplit_pull_floor_waiting)."})
	m.floorWaitSeconds = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_pull_floor_wait_seconds_total",
		Help: "Seconds the pulls waited for the partition furthest behind in the events stream, added as each wait ends (gttsplit_pull_floor_waiting)."})
	m.expiredEarly = prometheus.NewCounter(prometheus.CounterOpts{Name: "gttsplit_runs_expired_early_total",
		Help: "Closed runs deleted from the state bucket before store.retention, those closed first: the closed runs kept (their summaries and stubs in the run index, with the embedded broker its index of their keys) passed 3/8 of the runs' memory bound (from memory_limit_mib). A late event of such a run starts it anew."})
	m.members = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_fleet_members",
		Help: "Live aggregators of this group as this aggregator sees them."})
	m.owner = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gttsplit_partition_owned",
		Help: "1 for each partition this aggregator owns, 0 for one another live member owns, -1 for one without a live owner (no lease, or its holder stopped heartbeating; as this aggregator sees the leases and members)."}, []string{"partition"})
	m.unowned = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_partitions_unowned",
		Help: "Partitions no live member holds: no lease, or its holder stopped heartbeating (killed, cut off) while its lease runs out (as this aggregator sees the leases and members)."})
	m.stalled = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_partitions_stalled",
		Help: "Partitions this aggregator owns whose events stopped reaching it: messages wait in the stream but none was delivered (nor a heartbeat of the consumer) for several seconds."})
	m.legacy = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_legacy_stream",
		Help: "1 while the partitioned stream of earlier versions is still being drained."})
	m.closeLat = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gttsplit_close_seconds",
		Help: "Time from a run's run-finished event being folded to its split handed to the sinks.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 12)})
	m.streamBytes = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gttsplit_stream_bytes",
		Help: "Size of the events stream."})
	m.storeUsed = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gttsplit_store_used_ratio",
		Help: "How full a JetStream store with a limit is (0 to 1), by store: stream (the events stream's max_bytes), bucket (the state bucket's max_bytes), account (the account's store limit), server (the embedded server's store and its disk)."}, []string{"store"})
	m.laneChecks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gttsplit_lane_comment_checks_total",
		Help: "Lanes whose changes comment this aggregator looked at (it owns the lane's partition: a run of the lane closed, or the partition was acquired), by outcome: posted (a comment created or edited), unchanged (as posted before), nothing (no change beyond the thresholds, no comment), failed (retried with the sinks' backoff; refused for good: at the lane's next change)."}, []string{"outcome"})
	m.lanes = newLaneGauges()
	m.Registry.MustRegister(m.lanes, m.folded, m.redelivered, m.redeliveredBy, m.duplicates, m.dead, m.runsOpen, m.completed, m.sinkErrors, m.sinkWrites,
		m.sinkDefer, m.sinkRequeue, m.foldSeconds, m.persistErrs, m.lag, m.owned, m.ckptAge, m.splitPubErr, m.compacted,
		m.checkpoints, m.stateWrites, m.writeCauses, m.progress, m.repulls, m.pulledLate, m.shed, m.runsShed, m.runMemory, m.runIndexMemory, m.unlisted, m.evicted, m.memWaits, m.memHeld, m.memHolds, m.floorWaiting, m.floorWaits, m.floorWaitSeconds, m.expiredEarly, m.members, m.owner, m.unowned, m.stalled, m.legacy, m.closeLat,
		m.streamBytes, m.storeUsed, m.laneChecks, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ObserveSink counts a sink event of the Fanout.
func (m *Metrics) ObserveSink(e sinks.Event) {
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

// ObserveFleet sets the fleet's metrics from a member's view. A partition
// is unowned when no lease of it is held, or the member holding it is no
// live member any more (killed: its lease lives on until its time to live
// runs out, its partition folded by nobody meanwhile).
func (m *Metrics) ObserveFleet(view []fleet.PartitionView, members []string) {
	m.members.Set(float64(len(members)))
	unowned := 0
	for _, v := range view {
		x := 0.0
		switch {
		case v.Mine:
			x = 1
		case v.Owner == "" || len(members) > 0 && !slices.Contains(members, v.Owner):
			x = -1
			unowned++
		}
		m.owner.WithLabelValues(strconv.Itoa(v.Partition)).Set(x)
	}
	m.unowned.Set(float64(unowned))
}
