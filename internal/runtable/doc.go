// Package runtable is the aggregator's run table: it folds the events of
// the runs of the partitions this aggregator holds into their states and
// writes each run's split when the run closes.
//
// A Table is a fleet.Handler: for each partition whose lease it is given
// (Acquired) it loads the partition's open runs from the state bucket
// (Bucket, whose keys store.go lists) and consumes the partition's events.
// A partition folds each event into its run's RunState (ApplyTo) and
// acknowledges the event only once a checkpoint has written the run's
// state under the partition's lease (every write is fenced by it). A run
// closes when it finished and its fold is complete, or after the idle
// timeout: its closed state and split are written, the split goes to the
// sinks and to the split subject, and Deliveries keeps it pending until
// every sink settled it; a partition's next owner re-sends what is still
// pending (and readiness says it is catching up until those are written).
// A stopping aggregator's table stops pulling on every partition at once
// and writes what each holds before the sinks close (stop.go), so nothing
// is closed after them. Past Config.RunMemory the partitions shed their
// written open runs to the bucket and read each back when its next event
// comes (memory.go). Closed states are compacted after a grace; an event the table
// cannot fold is dead-lettered, and so is one that does not speak for the
// host whose subject it came on, or that is not byte for byte an event a
// run closed complete folded (origin.go; each run keeps its events'
// fingerprints, digest.go). Index is the in-memory copy of the runs'
// summaries (/runs and the live page; a closed run's holds its figures),
// from which Metrics exports the last closed split of each lane
// (lanes.go), and from which the owner of each lane's partition keeps the
// lane's changes comment on its tracker issue (lanechanges.go); Runs
// folds recorded streams without a broker (replay).
//
// ConsumerConfig is the run table's keys of the aggregator's consumer.*
// section (ack_wait, max_ack_pending, checkpoint_interval, lanes), StoreConfig
// the store.* keys; the group's name (consumer.durable) is the fleet's and
// comes in Config.Group. A zero key given to New is its default.
//
// # Locks
//
// Each lock's field says where it stands; together, from first to last (a
// lock is never taken while one below it is held):
//
//	part.ckptMu      a partition's checkpoints and closes, one at a time
//	                 (checkpoint.go), held across the checkpoint's writes; a
//	                 retention pass deletes each run under it (index.go), so
//	                 a compaction never writes back a run the pass deleted
//	handler lock     a partition consumer's, one message at a time (consume.go),
//	                 taken before part.mu and the dead letters'; it never meets
//	                 ckptMu (a handler does not checkpoint, a checkpoint does
//	                 not handle messages; past the runs' memory bound a
//	                 handler waits for its partition's next checkpoint,
//	                 holding no lock but its own, and for its context)
//	fleet.Lease.mu   a fenced write or a renewal, one at a time; a checkpoint
//	                 takes it under ckptMu (a renewal waits for the write,
//	                 which bus.APITimeout bounds)
//	Table.drainMu    the deliveries' recorders of a stop's drained partitions
//	                 (stop.go); Table.mu is taken under it
//	the Fanout's mu  a closed run's split handed to the sinks (under ckptMu);
//	                 it tells Deliveries
//	Index.mu         the run index; the lane changes' hook (lanechanges.go)
//	                 takes lanePoster.mu under it
//	the leaves       part.mu, Table.mu, Deliveries.mu, deadLetters.mu,
//	                 health.mu, lanePoster.mu: no other lock is taken while
//	                 one of them is held, and none is held across a request
//	                 to the broker
package runtable
