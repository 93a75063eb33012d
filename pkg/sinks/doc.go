// Package sinks defines where the aggregator delivers split reports (a
// Markdown file, a JSON document and a splits.jsonl line, an issue comment)
// and the Fanout that writes each report to every configured sink.
//
// Each sink type is a package (filesink, jsonsink, commentsink) that
// exports its Config, the keys of its section (sinks.file.*, sinks.json.*,
// sinks.issue_comment.*), and New; the aggregator opens the sinks its
// configuration switches on and a Fanout over them. RetryPolicy is the
// sinks.retry.* keys.
//
// # Switching a sink on
//
// A sink is on when its section names where it writes: sinks.file.dir,
// sinks.json.dir, sinks.issue_comment.api (Config.Enabled). Empty, the
// default, is off; there is no "enabled" key, so a sink cannot be on
// without a place to write, nor configured and silently off. Every other
// key of a sink that is off is still validated, and keeps its default.
//
// # Lifecycle
//
// A sink is built by its package's New, receives reports through Write and is
// closed once with Close. Write may be called concurrently and any number
// of times for the same run: a later report of a run replaces the earlier
// one (a file is rewritten, a comment edited, an identical splits.jsonl line
// is not appended again), so retries and re-sent splits never duplicate
// output. Close flushes, releases resources, honours its context's deadline,
// is idempotent and is safe without any Write. After Close, Write returns an
// error wrapping ErrClosed.
//
// A Fanout owns its sinks: Fanout.Close drains the queues (bounded by its
// context) and then closes every sink. The aggregator opens the sinks before
// it consumes and closes the Fanout last (downstream first, upstream last).
//
// # Errors
//
// A sink returns an error when the report was not delivered. Errors that
// retrying cannot fix (a report that cannot be rendered, an issue that does
// not exist, Write after Close) are marked with Permanent
// and detected with IsPermanent; every other error is transient. A
// transient error may carry the delay the remote end asked for
// (RetryAfter), such as an HTTP Retry-After or a rate-limit reset. Errors
// quote foreign input with %q and never contain credentials.
//
// # Retries
//
// A sink makes one attempt per Write; retrying is the Fanout's job. Every
// sink has its own queue and goroutine, so a failing sink never blocks the
// others. After a transient error the report goes to the back of that
// sink's queue and the worker waits: the RetryAfter delay when there is one
// (capped by RetryPolicy.MaxHint), else a capped exponential backoff with
// jitter (RetryPolicy, by default 1s doubling to 5m, ±20%). While Close
// drains, its own backoff is at most a second and a sink that fails three
// times is given up; a RetryAfter delay is still waited for when it ends
// before Close's deadline (else the sink is given up at once). The clock is
// Settings.Sleep and Settings.Now, which tests replace. A permanent error
// drops the report for that sink. A report stays queued until it is
// delivered, fails permanently, or is superseded by a newer report of the
// same run; only a full queue (FanoutConfig.MaxPending) or Close's deadline
// drops it, and both are reported. A caller that can produce a run's report
// again (the aggregator reads it back from its state bucket) sets
// FanoutConfig.Reload: a report that finds MaxPending reports held is then
// deferred instead (its place in the queue kept, only its run id held, at
// most MaxDeferred of them) and reloaded when its turn comes, so a burst
// larger than the queue loses nothing and memory stays bounded. Every
// outcome goes to the Observer (Counters counts them per sink, for logs and
// /metrics).
package sinks
