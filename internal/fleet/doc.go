// Package fleet decides which aggregator owns which partition of the runs,
// so that each partition has exactly one owner and the partitions are
// shared evenly, leaning on JetStream for every guarantee.
//
// # Members
//
// Every aggregator of a group (consumer.durable) is a Member: it renews a
// key of its own in the GTTSPLIT_MEMBERS bucket every third of
// consumer.lease_ttl (its leases too, all in one atomic batch where the
// bucket takes them), and watches the others' keys and leases. A member
// is live while its renewals (of either) keep coming. Nothing else
// reaches the broker while no partition moves.
//
// # Leases
//
// A partition is owned through a lease: the key lease.<group>.<partition>
// of the state bucket, created only when it is free (create-if-absent),
// with a per-message time to live (nats-server 2.11+ message TTLs), renewed
// by revision. The lease's revision is a fencing token: every write made
// for the partition carries it (Lease.Fenced, Fence.Opt), and the server
// takes the write only while the lease key is still at that revision. A
// member that was paused or cut off for longer than the time to live finds
// its lease invalid (Lease.Valid counts from its own monotonic clock, with a
// margin) and stops before it pulls, folds or hands a split to the sinks;
// a write of its that arrives late anyway is refused by the server.
//
// # Assignment
//
// Every heartbeat (a second; no request to the broker) each member
// computes from the live members and the lease holders what it alone does
// next (see decide in plan.go): each of n
// members owns ⌊P/n⌋ or ⌈P/n⌉ partitions, a member short of its share
// takes free partitions a few at a time, one above it gives one back only
// once someone is short and nothing is free, and no partition stays
// unowned. A stopping member hands every partition over at once (Handler.
// Release, then the lease is purged); a killed one's leases expire after
// their time to live.
//
// # Lifecycle
//
// Config is the keys a member reads (consumer.durable and
// consumer.lease_ttl of the aggregator's configuration), Settings what the
// program gives it besides (the partitions, the bucket of the leases).
// Join announces the member; Run follows the assignment until its context
// ends, then hands everything over at once and leaves; Freeze, before,
// stops the assignment (nothing taken or given back) while the leases are
// kept, so a stopping caller writes what it holds first. Handler's methods tell the
// caller what to do with each partition. Ready and View report the
// member's health and its view of every partition's owner.
package fleet
