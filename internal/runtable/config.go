package runtable

import (
	"strings"
	"time"

	"github.com/gttsplit/gttsplit/pkg/conf"
)

// ConsumerConfig is the keys of the consumer.* section the run table
// reads: how each partition is consumed and which lanes. The aggregator
// composes it into consumer.* beside the group's keys (fleet.Config:
// durable, lease_ttl) and the stream's (bus.Partitioning: partitions). A
// zero AckWait, MaxAckPending or CheckpointInterval given to New is
// DefaultConsumerConfig's.
type ConsumerConfig struct {
	// AckWait and MaxAckPending are the partition consumers'.
	AckWait       time.Duration `mapstructure:"ack_wait" desc:"time after which an unacknowledged message is redelivered"`
	MaxAckPending int           `mapstructure:"max_ack_pending" desc:"maximum messages of a partition delivered and not yet acknowledged; a checkpoint starts once half of them wait"`
	// CheckpointInterval is how often a partition checkpoints the
	// changed runs none of whose messages waits (runs read back
	// changed), sheds and retries a failing bucket; a changed run whose
	// messages wait is written when one of the partition's, its progress
	// acknowledged twice, nears its third progress acknowledgement
	// (checkpoint.go: toWrite), every changed run when half of
	// MaxAckPending messages wait. A complete
	// run does not wait for either: the partition's loop closes it as it
	// is (closeDue).
	CheckpointInterval time.Duration `mapstructure:"checkpoint_interval" desc:"how often a partition checkpoints the changed runs none of whose messages waits, and retries a failing state bucket; a changed run's state is written, and its messages acknowledged, once a message of its partition waiting for such a write, its progress acknowledged twice (each time it waited 40 % of ack_wait), nears its third (with every changed run one of whose messages is half as far from it), every changed run once half of max_ack_pending messages wait; a complete run is closed, and its messages acknowledged, without waiting; at most half of ack_wait"`
	// Lanes restricts the partition consumers to these lanes,
	// comma-separated (see LaneList); empty is every lane.
	Lanes string `mapstructure:"lanes" desc:"lanes whose runs this aggregator folds, comma-separated; empty means every lane"`
}

// DefaultConsumerConfig returns the defaults of the run table's consumer.*
// keys.
func DefaultConsumerConfig() ConsumerConfig {
	return ConsumerConfig{
		AckWait:            10 * time.Second,
		MaxAckPending:      4096,
		CheckpointInterval: 2 * time.Second,
	}
}

// withDefaults gives the zero values of c their defaults (those of
// DefaultConsumerConfig), in this one place.
func (c ConsumerConfig) withDefaults() ConsumerConfig {
	d := DefaultConsumerConfig()
	if c.AckWait <= 0 {
		c.AckWait = d.AckWait
	}
	if c.MaxAckPending <= 0 {
		c.MaxAckPending = d.MaxAckPending
	}
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = d.CheckpointInterval
	}
	return c
}

// LaneList returns the lanes of Lanes (nil: every lane).
func (c ConsumerConfig) LaneList() []string {
	var out []string
	for _, l := range strings.Split(c.Lanes, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// Validate reports every problem of c (conf.FieldError, keys relative to
// consumer.*).
func (c ConsumerConfig) Validate() error {
	var p conf.Problems
	p.Positive("ack_wait", c.AckWait)
	if ci, w := c.CheckpointInterval, c.AckWait; ci <= 0 {
		p.Positive("checkpoint_interval", ci)
	} else if w > 0 && ci > w/2 {
		// A message is acknowledged after the checkpoint that holds it:
		// well before the server would deliver it again.
		p.Add("checkpoint_interval", "must be at most half of consumer.ack_wait (%s), got %s", w, ci)
	}
	for _, l := range c.LaneList() {
		p.Check("lanes", conf.Token(l, conf.MaxLaneLen))
	}
	p.AtLeast("max_ack_pending", int64(c.MaxAckPending), 1)
	return p.Err()
}

// StoreConfig is the store.* keys: how long the state bucket keeps what.
// Zero keeps everything.
type StoreConfig struct {
	// Retention: closed runs whose split was written longer ago are
	// deleted (checked hourly by the owner of their partition); 0 keeps
	// them. Past their share of the runs' memory bound the closed runs
	// that closed first are deleted sooner (trim.go).
	Retention time.Duration `mapstructure:"retention" desc:"closed runs whose split was written longer ago are deleted from the state bucket (checked hourly; sooner, those closed first, while the closed runs kept pass 3/8 of the runs' memory bound from memory_limit_mib); 0 keeps them as long as that bound lets them"`
	// CompactAfter is the grace a closed run keeps its full state for (a
	// late event within it re-opens the run and folds as before); then
	// the state is compacted, and a new event for the run is
	// dead-lettered with reason "late". 0 never compacts.
	CompactAfter time.Duration `mapstructure:"compact_after" desc:"a closed run keeps its full fold state this long (a late event re-opens it and folds as before), then only a compact record (its split and what it folded); a new event after that is dead-lettered with reason late; 0 keeps the full state"`
}

// DefaultStoreConfig returns the defaults of the store.* keys.
func DefaultStoreConfig() StoreConfig {
	return StoreConfig{Retention: 30 * 24 * time.Hour, CompactAfter: time.Hour}
}

// Validate reports every problem of c (conf.FieldError, keys relative to
// store.*).
func (c StoreConfig) Validate() error {
	var p conf.Problems
	if c.Retention < 0 {
		p.Add("retention", "must not be negative, got %s", c.Retention)
	}
	if c.CompactAfter < 0 {
		p.Add("compact_after", "must not be negative, got %s", c.CompactAfter)
	}
	return p.Err()
}
