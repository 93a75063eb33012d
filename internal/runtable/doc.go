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
// pending. Closed states are compacted after a grace; an event the table
// cannot fold is dead-lettered, and so is one that does not speak for the
// host whose subject it came on, or that would change a run closed
// complete (origin.go). Index is the in-memory copy of the runs'
// summaries (/runs and the live page; a closed run's holds its figures),
// from which Metrics exports the last closed split of each lane
// (lanes.go); Runs folds recorded streams without a broker (replay).
package runtable
