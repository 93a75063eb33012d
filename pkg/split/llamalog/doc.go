// Package llamalog reads llama.cpp's log lines for gttsplit: which lines
// can matter to where a process's GPU memory went, the decoration around
// a line's message, and what the message says, as a Record of one Kind.
// It knows nothing of what the lines mean together: package split folds
// the records of a run into its split.
//
// It does no I/O and has no clock, goroutines, randomness or logger.
//
//	p := llamalog.MustParser()
//	if p.Relevant(line, true) {
//		var scratch []byte
//		r, ok := p.Parse(seq, llamalog.Payload(line, &scratch))
//		port := llamalog.RouterPort(line) // the llama-server router's child, 0 for none
//		...
//	}
//
// # From a raw line to a Record
//
//  1. Selection. Only a line holding an anchor (a few literals such as
//     "MiB" or "-value pairs"), a line only -v prints, or a custom trace
//     pattern's match can matter. Parser.Relevant asks it of one line,
//     Parser.ScanPiece of a whole piece of a log at once (one pass for
//     every anchor), LineFilter of a line still inside a JSON string;
//     MemoryLine, the collector's sampling trigger, of a raw line.
//  2. The envelope. Payload strips the decoration around a message
//     (colour codes, a router's "[port] " prefix, time stamps, tags);
//     RouterPort reads the router's port, behind a supervisor's prefix
//     too.
//  3. The grammar. Parser.Parse classifies the message into a Record
//     with its figures (docs/formats.md describes every shape); ParseWith
//     does the same without allocating for a shape seen before, with a
//     Scratch. A line that looks relevant but does not parse is a
//     KindMalformed record: the fold counts it.
//
// # Files
//
//	parse.go               Parser, Kind, Record; the grammar: the loop and its table of rules, one read method per kind
//	anchors.go             the anchors a relevant line holds; Relevant, MemoryLine, the -v markers
//	trace.go               host-weight trace lines
//	buffer.go              buffer lines and their echo
//	breakdown.go           the memory breakdown table
//	build.go               build and verbosity lines
//	markers.go             loads, contexts, reservations, the lines that say which loads are live, devices, the counted-only kinds
//	failure.go             the lines that say a context, a projector or a buffer failed
//	literals.go            the literals a relevant line's kind is told by, found in one pass
//	envelope.go            Payload and RouterPort
//	scan.go                Parser.ScanPiece and Piece: the lines of a piece of a log that may be relevant
//	pairscan*.go           the one-pass search for every anchor (assembly on amd64)
//	linefilter.go          LineFilter: relevance read inside a JSON string
//	decimal.go, intern.go  number parsing; the Scratch's string reuse
//	errors.go              PatternError
//
// # Where a change goes
//
// A new shape of an existing line goes to the read method of its kind (the
// file the file map names; envelope.go for decoration), with a case in
// parse_test.go, and a fixture log under testdata/logs that the split
// package's conformance and real-log tests fold. A new kind of line is a
// rule in parse.go's grammar table and its read method; it also needs its
// anchor (anchors.go, literals.go, the pairs of pairscan.go:
// TestPairsCoverAnchors), a Kind appended to the list (folds persist kinds
// by number) and, in package split, a method of the reader. Every fast path has a plain form that a fuzz target holds
// it to (fastpath_test.go, scan_test.go).
//
// # Concurrency
//
// A Parser is safe for concurrent use (ScanPiece may scan the pieces of
// one log on several goroutines); a Piece, a Scratch and a LineFilter
// serve one goroutine.
package llamalog
