// Package split is gttsplit's pure core: it folds the log lines and the
// fdinfo samples of one llama.cpp run and says where the process's GTT
// went, as a Report whose rows docs/accounting.md defines (model buffer,
// packed copies, KV + state, compute + output, not attributed). What a
// single log line says is package llamalog's (the llama.cpp line
// grammar); what the lines and samples mean together is this package's.
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
//  1. The line. A line the parser (llamalog.Parser, Options.Parser)
//     finds relevant is stripped of its envelope and parsed into a
//     llamalog.Record; ReadLog and LogFeed visit only the lines a scan of
//     each chunk picks, AddLine asks of each line.
//  2. The fold's state. Fold keeps what the rules need in bounded memory:
//     the trace folded as it comes, the first build and verbosity lines,
//     the other records up to MaxRecords, the ticks' peak and final, the
//     timeline. MarshalJSON persists it, UnmarshalJSON restores it.
//  3. The reader. Report reads the kept records in log order with a
//     logReader: a loop that hands each record to the method of its kind
//     (recordReaders), building model loads and their contexts. It then
//     settles which loads are live (a reload, a router's unload, a --fit
//     probe) and fills the rows, flags, warnings and cross-checks.
//
// # Files by job
//
//	types.go, report.go    the input (Line, Sample, RunInfo) and the output (Report, its JSON)
//	rowtable.go            Rows: the split's rows declared once (names, labels, unit, kind, how each
//	                       is read from a report, compared and gated); every output reads them
//	flags.go               the flags: names, order and words in one table
//	config.go              Config: the split.* keys, and the fold's Options they make
//	fold.go                Fold: applying lines and samples, the state, persistence
//	input.go               Input and Fold.Apply: what one decoded event brings
//	scan.go                ReadLog and LogFeed: a whole log, piece by piece
//	intern.go              the trace names' hashes of a log read in bulk
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
//	figures.go             Figures: what a split says of its lane over time (history, trend, gauges)
//	errors.go              ErrParse
//
// # Where a change goes
//
// A new shape of a llama.cpp line goes to package llamalog. A new kind of
// line also needs a method in reader.go's recordReaders. A rule of what
// counts goes to loads.go or rows.go and to docs/accounting.md, with a
// test in rules_test.go whose fixture gives another figure under the
// naive rule; a real log under testdata/logs/real with its figures worked
// out by hand (expected.json, reallogs_test.go) pins them. A new row of
// the split is an entry of Rows (rowtable.go), its field in Report (and
// in Figures, for a row kept over a lane's runs) and the rule that
// computes it: docs/architecture.md, "Add a split row". A new flag is a
// constant and an entry of flagTable (flags.go). How a report is written
// out (text, Markdown, bars, a comparison) is package present's.
//
// # Errors
//
// Bad input never stops a fold and never loses anything else: a line that
// looks relevant but does not parse is counted and flagged
// (lines_skipped), a malformed fdinfo text likewise (fds_skipped). A
// figure that cannot be known is nil (null in JSON), never 0.
// ParseSamples wraps ErrParse.
//
// # Concurrency
//
// A Fold and a LogFeed are not safe for concurrent use; the pieces a
// LogFeed applies may be scanned on other goroutines
// (llamalog.Parser.ScanPiece).
package split
