// Package events is the CloudEvents contract of gttsplit: the event types,
// their payloads, their ids and subjects, and the recorded-stream file
// format. It is the only package that builds or parses a CloudEvent; every
// other package hands events around as values and asks this package for
// their bytes, subject and meaning.
//
// # Events
//
// Events are CloudEvents 1.0 in structured JSON mode (the whole event is one
// JSON object, datacontenttype "application/json"). The types are versioned
// reverse-DNS names:
//
//	io.gttsplit.run.started.v1     a run began         (split.RunInfo + StartDetail)
//	io.gttsplit.log.lines.v1       a batch of log lines of one stream ([]split.Line)
//	io.gttsplit.fdinfo.sample.v1   one sampling tick   (split.Sample)
//	io.gttsplit.run.finished.v1    the run ended       (split.FinishInfo + FinishDetail)
//	io.gttsplit.split.v1           the aggregator's split of a run (split.Report)
//
// A new, incompatible payload gets a new type (".v2"); a consumer that meets a
// type or version it does not know gets ErrUnknownType from Decode and skips
// the event.
//
// # Attributes
//
// Every event carries the extension attributes runid, host and lane, its
// subject is the run id, its source is "urn:gttsplit:collector:<host>" and its
// time comes from the payload (the first line's capture time, the sample
// time, the start or finish time).
//
// # Ids
//
// Ids are deterministic from the event's position in its run, never random:
//
//	<runid>/<stream>/<first seq>   a log-lines batch (stream "stderr", "stdout", "log")
//	<runid>/fdinfo/<seq>           a sample
//	<runid>/started/0              run started
//	<runid>/finished/0             run finished
//	<runid>/split/<n>              the n-th split published for the run
//
// Building the same event from the same input gives the same id and the same
// bytes, so re-publishing after a restart is de-duplicated by JetStream
// (Nats-Msg-Id) and by the fold (a repeated id counts once). Run ids must be
// unique across the fleet: JetStream de-duplicates on the id alone.
//
// # Subjects
//
// Events travel on gttsplit.<kind>.<host>.<lane>.<runid>, kind being run, log,
// fdinfo, split or dlq; see Subject, SubjectOf, Filter and Token.
//
// # Decoding, not folding
//
// This package turns bytes into values and values into bytes; it never
// folds. Decoded.Input is what an event brings to its run's fold, and
// split.Fold.Apply folds it. A consumer that folds log lines can decode
// them through a LineFilter (DecodeFiltered): the lines no rule reads are
// counted, not unescaped.
//
// # Errors
//
// Constructors and Decode never panic. A malformed or inconsistent event
// wraps ErrInvalid, an unknown type or version wraps ErrUnknownType; test them
// with errors.Is.
//
// # Recorded streams
//
// A recorded stream (events.jsonl) holds one structured event per line.
// Writer appends whole lines; Reader yields the events one by one and counts
// and skips a bad line, reporting it with its line number.
package events
