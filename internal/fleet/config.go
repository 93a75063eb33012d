package fleet

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gttsplit/gttsplit/pkg/conf"
)

// Config is the keys a member reads, which the aggregator composes into
// its consumer.* section (beside the run table's and the stream's): the
// group's name and its leases' time to live. A zero LeaseTTL given to
// Join is DefaultConfig's.
type Config struct {
	// Group is the name the members sharing the partitions have in
	// common: their leases are lease.<Group>.N (and the run table's
	// partition consumers <Group>-pNN).
	Group string `mapstructure:"durable" desc:"name of the aggregators' group: aggregators with the same name share the partitions (consumers <durable>-pNN, leases lease.<durable>.N)"`
	// LeaseTTL is a lease's time to live: a member that stops (killed,
	// paused, cut off) keeps its partitions that long; it must outlast a
	// cluster electing a new leader for the bucket (up to about 10 s), or
	// a node's loss makes partitions move. Every member of a group must
	// use the same: a lease that takes its key again after the expiry of
	// its previous revision (Lease.recheck) counts on it.
	LeaseTTL time.Duration `mapstructure:"lease_ttl" desc:"time to live of a partition's lease: a killed or cut-off aggregator's partitions are taken over this long after its last renewal (a stopping one hands them over at once); it must outlast a cluster electing a new leader (about 10 s); every aggregator of a group must use the same value (one that sees another warns)"`
}

// DefaultConfig returns the keys' defaults.
func DefaultConfig() Config {
	return Config{Group: "gttsplit-aggregator", LeaseTTL: 15 * time.Second}
}

// Validate reports every problem of c (conf.FieldError, keys relative to
// consumer.*).
func (c Config) Validate() error {
	var p conf.Problems
	p.Check("durable", conf.Name(c.Group))
	if l := c.LeaseTTL; l < 3*time.Second {
		p.Add("lease_ttl", "must be at least 3s, got %s", l)
	}
	return p.Err()
}

// renewEvery is how often a member key is renewed: two renewals can fail
// before the others take the member for dead (memberTTL).
func (c Config) renewEvery() time.Duration { return c.LeaseTTL / renewals }

// memberTTL is how long a member is taken for live after its member key
// or one of its leases was last renewed (others see both): more than two
// renewals, less than a lease's validity (LeaseTTL less the margin).
func (c Config) memberTTL() time.Duration { return 3 * c.LeaseTTL / 4 }

// Settings are what a member needs besides its keys: what the program
// decides. Zero Heartbeat and Step are their documented defaults.
type Settings struct {
	// Partitions is the number of partitions (the stream's,
	// bus.Layout.Partitions).
	Partitions int
	// Bucket is the name of the key-value bucket holding the leases (its
	// stream must allow per-message TTLs); KV is that bucket.
	Bucket string
	KV     jetstream.KeyValue
	// Replicas of the members bucket when a member creates it.
	Replicas int
	// Heartbeat is how often a member computes the assignment from what
	// it watches (zero: 1s; it asks the broker nothing unless a partition
	// moves). The member key and the leases are renewed at the rate their
	// time to live needs (Config.renewEvery).
	Heartbeat time.Duration
	// Step bounds the partitions a member takes a heartbeat (zero: 2):
	// members starting together see each other before one takes all.
	Step int
}

// withDefaults gives the zero values of cfg and set their documented
// defaults, in this one place.
func withDefaults(cfg Config, set Settings) (Config, Settings) {
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultConfig().LeaseTTL
	}
	if set.Heartbeat <= 0 {
		set.Heartbeat = time.Second
	}
	if set.Step <= 0 {
		set.Step = 2
	}
	return cfg, set
}
