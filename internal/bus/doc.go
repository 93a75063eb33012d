// Package bus carries gttsplit's CloudEvents over NATS JetStream: it
// connects and makes sure the stream exists (Dial, or Connect and
// EnsureStream), publishes with a disk spool for when the broker is away
// (Publisher), and hands what the stream holds to who consumes it (Msg,
// WrapMsg: the run table's partition consumers) or exports it (Export).
// It never builds or parses an event itself: pkg/events gives it each
// event's subject, id and bytes, and decodes what it receives.
//
// Config is the nats.* keys of both binaries and SpoolConfig the
// collector's spool.* keys: Dial and NewPublisher read them as they are.
//
//	collector ──Publish──▶ Publisher ──async, ≤ max_in_flight──▶ JetStream GTTSPLIT (gttsplit.>)
//	                          │  ▲                                    │
//	       broker away / lost │  │ drained in order when it is back   ├──▶ partition consumers (internal/runtable)
//	                          ▼  │                                    └──▶ Export (ordered, by subject and time)
//	                     disk spool (segments)
//
// # Publishing and acknowledgement
//
// Publisher.Publish sends one event and returns without waiting for the
// broker: itself while the broker is connected and nothing is spooled or
// handed over ahead of it, else through the publisher's goroutine, which
// keeps the order. The event is sent asynchronously with Nats-Msg-Id set
// to the event id, so JetStream drops a re-sent copy within the stream's
// duplicate window. At most max_in_flight
// events await the broker's acknowledgement; Publish blocks beyond that
// (back-pressure). The ack callback given to Publish is called exactly once,
// from the publisher's goroutine and in publish order, when the event is
// durable: the broker acknowledged it (also as a duplicate), or it was
// written and synced to the spool. It must not block. It is never called for
// a dropped event. A source calls its Record.Ack from there.
//
// # A slow broker
//
// An ack that times out while the connection is up comes from a broker
// that is slow (under load), not away: from then on the ack timeout is
// doubled for every send (up to 8 × AckTimeout), so the spool's drain
// succeeds where the first sends timed out. With BackPressure set (replay)
// the timed-out events are not spooled at all: every event in flight is
// sent again (the same ids: a copy the broker stored is dropped as a
// duplicate) and waited for, the window shrinks so that Publish blocks,
// and it grows back one event per ack; after BackPressure of late acks
// they go to the spool after all.
//
// # Spool
//
// A broker that goes silent without closing the connection (a network
// cut) is noticed by its unanswered pings within Config.CutOffAfter; the
// publisher reads the connection's state from its handlers, never waiting
// for the connection's lock, which a reconnect attempt holds while it
// waits for the broker.
//
// When the broker cannot be reached, or an event in flight fails (timeout,
// disconnection, no stream, a full store), that event, every event after it
// that is still in flight, and every new event go to the spool, an
// append-only directory
// of segment files with checksummed records; they count as durable once
// written. While the spool is not empty all new events go to it, so order is
// kept. When the connection is back the spool is drained, oldest first, with
// the same in-flight bound, and publishing goes direct again once it is
// empty. Drained segments are deleted. A spool left by an earlier process is
// drained by the next Publisher on the same directory; a torn record at the
// end (a crash mid-write) is cut off when the spool is opened. A corrupt
// record elsewhere costs only itself: the reader resyncs on the next
// record's marker, says the loss at WARN with its runs, and SpoolLoss
// counts it (the collector exits 1). Re-sending
// events after a crash can duplicate them in the stream only if more than
// the duplicate window passed; consumers de-duplicate by event id anyway.
//
// When the spool's disk is full (ENOSPC, EDQUOT), new events are dropped
// and counted as below, said once per episode; a run event frees what it
// needs from the spool's reserve file (1 MiB allocated on the disk when the
// spool opens, and again when it is empty) and is written. Should the
// reserve be used up, the run event is held in memory, in order, and tried
// again: on the spool, or directly once the broker is connected and the
// spool empty. Flush does not wait for held events. At Close, those still
// held are dropped and said with their run (RunLost reports it).
//
// The spool is bounded by spool.max_bytes, beyond which only run events
// (gttsplit.run.…: one start and one finish per run) may use a reserve of
// 1 MiB, so that a run's finish, with its drop count, is kept. When it is
// full, new events are dropped: Publish still returns nil, the ack callback is not called (so the
// source does not advance past them), Dropped() counts them, and a warning
// is logged once per episode (again only after the spool accepted events
// and filled up once more). The collector reports the count as the
// run-finished event's dropped_events (DroppedOf counts the drops of one
// run: a spool may hold an earlier run's events). An event that the broker
// rejects for good (larger than the server's max_payload, or answered 400,
// e.g. headers over 64 KB from a huge id) is dropped and counted the same
// way, and so is a spooled event the server answered with another error
// five times in a row; either is set aside, with the reason, as a JSON file
// in the spool's rejected/ directory (RejectedDir), and the events after it
// go on: it is never retried ahead of them. A broker whose store is full
// (503 "insufficient resources", err_code 10023, or the account's or a
// discard-new stream's limit) is unavailable, not refusing: the events are
// spooled and tried again for as long as it lasts, and none is set aside.
//
// # Lifecycle
//
// NewPublisher takes ownership of the connection. Close stops new
// publishes, waits for the events in flight, drains the spool while the
// broker is connected, all within its ctx, then drains and closes the
// connection. Events still in flight when ctx ends are written to the spool
// (for the next start); if the broker is not connected, Close does not wait
// for it. Close is idempotent; Publish after Close returns ErrClosed.
//
// # Errors
//
// Connect, EnsureStream and the constructors wrap the NATS error with the
// operation. Publish returns ErrClosed after Close, the ctx error when it
// gave up waiting for room, and an error wrapping events.ErrInvalid for an
// event that cannot be encoded.
//
// # Files
//
//	config.go                Config (nats.*), SpoolConfig (spool.*), Partitioning (consumer.partitions), PublisherConfig
//	conn.go                  Connect and Dial: the connection, its options and what its errors mean
//	tlsrefusal.go            why a server closed the connection after the TLS handshake: its alert, asked again
//	inbox.go                 InboxPrefix: a collector's reply subjects, its host's own
//	stream.go                StreamConfig and EnsureStream: the events stream's settings
//	partition.go             the stream's partitions: subjects, filters, EnsurePartitioned, the legacy stream
//	api.go                   Retry and Transient: JetStream requests on a busy or failing-over cluster
//	atomic.go                PublishAtomic: one JetStream atomic batch (all stored or none); whether a stream takes them
//	last.go                  GetLast: a subject's last message, read from the stream's leader (not a direct get)
//	msg.go                   Msg, AckRef, Metadata: a delivered message; Export
//	ordered.go               Ordered: a one-pass ordered consumer, deleted when the pass ends
//	publisher.go             Publisher: the front door (Publish, Flush, Stats, Close)
//	publisher_pump.go        the pump: the publisher's goroutine, the events in flight, the direct path, drops
//	publisher_spool.go       the pump's spool side: failover, draining, held run events
//	publisher_drops.go       PublisherStats, the counters, the drops and drains by run
//	publisher_rejected.go    RejectedDir: events refused for good set aside; which errors are which
//	spool.go                 the disk spool: segments, checksummed records with markers, the reserve
//	spool_record.go          a spool record: its encoding, reading one, a torn tail, resyncing past a hole
//	spoolloss.go             what corrupt spool records cost: SpoolLoss, the runs they held
//	ratelog.go               LogLimit and Clip: log lines a flood cannot multiply
//	lock_*.go, reserve_*.go  the spool's directory lock and its reserve, per platform
package bus
