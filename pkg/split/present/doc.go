// Package present writes a split out for a reader: the report as text and
// Markdown (what the terminal, the Markdown file and the tracker comment
// show), its stacked bars (in text, and as the parts the live page's
// charts lay out), and two splits side by side with a verdict (Compare:
// the same command with offload on and off).
//
// What a split holds is package split's; this package only reads a
// Report. Its rows come from split.Rows: each output takes the rows of
// the kinds it shows (the report's table the parts, not attributed and
// what is outside the GTT; the bars the parts and the rest; a comparison
// every row but the shares), in that table's order and with the label it
// names for that output. No output lists rows of its own.
//
// It does no I/O and has no clock, goroutines or logger.
//
//	r := fold.Report()
//	fmt.Print(present.Text(r))
//	c := present.Compare(on, off, "run-ngl99", "run-ngl0")
//	fmt.Print(present.CompareMarkdown(c))
//
// # Files
//
//	report.go        Markdown and Text: the report's table, shares, models, flags, checks, provenance
//	devices.go       the device table, a line per device and per card
//	bar.go           BarParts, TextBars, DeviceBars: the split as stacked bars
//	compare.go       Compare and Comparison: two splits' rows, devices and verdict
//	compare_text.go  CompareText, CompareMarkdown, CompareJSON
//
// # Where a change goes
//
// A new row of the split is an entry of split.Rows: every output here
// shows it without a change (TestEveryRowIsRendered, TestEveryRowIsCompared).
// A new flag's words are split's (flags.go). A change of layout goes to
// the output's file, with the golden files (testdata/golden, rewritten by
// `go test ./pkg/split/present -update`) and the testscripts of
// cmd/aggregator showing the new bytes.
package present
