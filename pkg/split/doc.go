// Package split is gttsplit's pure core: it reads the log lines and the
// fdinfo samples of one llama.cpp run and says where the process's GTT
// went, as a Report whose rows docs/accounting.md defines (model buffer,
// packed copies, KV + state, compute + output, not attributed).
//
// It does no I/O and has no clock, goroutines, randomness or logger. A
// Fold is a value that lines and samples are applied to and that a
// Report is read from; the report is a function of the set of lines and
// samples applied, whatever their order and however often each came.
//
//	f := split.NewFold(split.Options{})
//	f.ReadLog(logFile, "log") // a saved log, or Apply one event's Input at a time
//	f.AddSample(s)
//	out, err := split.JSON(f.Report())
//
// # From a line to a row
//
// A log line passes four rooms, each in its own files:
//
//  1. Selection. Only lines holding an anchor (a few literals such as
//     "MiB" or "-value pairs") can matter. ReadLog and LogFeed search a
//     whole chunk for all anchors at once and visit only the lines of the
//     hits; Parser.Relevant asks the same of one line; LineFilter asks it
//     of a line still inside a JSON string.
//  2. The line grammar. Payload strips the decoration around a message
//     (colours, a router's "[port] " prefix, time stamps, tags), and
//     Parser.Parse classifies the message into a Record of one Kind with
//     its figures (docs/formats.md describes every shape).
//  3. The fold's state. Fold keeps what the rules need in bounded memory:
//     the trace folded as it comes, the first build and verbosity lines,
//     the other records up to MaxRecords, the ticks' peak and final, the
//     timeline. MarshalJSON persists it, UnmarshalJSON restores it.
//  4. The reader. Report reads the kept records in log order with a
//     logReader: a loop that hands each record to the method of its kind
//     (recordReaders), building model loads and their contexts. It then
//     settles which loads are live (a reload, a router's unload, a --fit
//     probe) and fills the rows, flags, warnings and cross-checks.
//
// # Files by job
//
//	types.go, report.go    the input (Line, Sample, RunInfo) and the output (Report)
//	scan.go                ReadLog and LogFeed: a whole log, piece by piece
//	pairscan*.go           the one-pass search for every anchor (assembly on amd64)
//	literals.go            the literals a relevant line's kind is told by
//	jsonline.go            LineFilter: relevance read inside a JSON string
//	envelope.go            Payload and RouterPort: the decoration around a message
//	line.go                Parser: the grammar of llama.cpp and trace lines, Kind, Record
//	decimal.go, intern.go  number parsing and string reuse for the parser
//	fold.go                Fold: applying lines and samples, the state, persistence
//	input.go               Input and Fold.Apply: what one decoded event brings
//	bounded.go             the bounds of the state: the trace fold, which records are kept
//	                       (and, past the cap, which figures are unknown)
//	series.go, seqset.go   the GTT timeline; sets of sequence numbers
//	complete.go            whether the fold holds all the collector sent
//	reader.go              logReader: one method per record kind
//	loads.go               model loads and their figures; which loads are live
//	rows.go                from the loads to the report's rows, flags and warnings
//	devices.go             the rows regrouped by the device their buffers are on
//	cardmem.go             the memory per card and region, folded over the ticks
//	cards.go               the report's cards: devices matched to them, each card's not attributed
//	compute.go             Report, the samples' rows, the checks, the verdict
//	fdinfo.go, samples.go  fdinfo texts (GTT, and the regions per card) and the gtt.txt samples file
//	render.go, bar.go      the report as JSON, Markdown and text
//	compare.go             two reports side by side (offload on and off)
//
// # Where a change goes
//
// A new shape of an existing llama.cpp line goes to line.go (and
// envelope.go for decoration), with a case in conformance_test.go or a
// fixture log in testdata/logs. A new kind of line also needs its anchor
// (line.go, literals.go), a Kind, and a method in reader.go's
// recordReaders. A rule of what counts goes to loads.go or rows.go and to
// docs/accounting.md, with a test in rules_test.go whose fixture gives
// another figure under the naive rule.
//
// # Errors
//
// Bad input never stops a fold and never loses anything else: a line that
// looks relevant but does not parse is counted and flagged
// (lines_skipped), a malformed fdinfo text likewise (fds_skipped). A
// figure that cannot be known is nil (null in JSON), never 0. NewParser
// returns a *PatternError for a trace pattern that does not compile;
// ParseSamples wraps ErrParse.
//
// # Concurrency
//
// A Parser is safe for concurrent use (Parser.ScanPiece may scan the
// pieces of one log on several goroutines); a Fold and a LogFeed are not.
package split
