// Package aggregator is what the aggregator binary's commands do;
// cmd/aggregator holds their flags and help text.
//
// Serve is `aggregator serve`: it opens the broker (or starts the embedded
// NATS server, StartEmbedded), joins its group's fleet (internal/fleet),
// folds the runs of the partitions it holds with the run table
// (internal/runtable), writes each finished run's split to the sinks
// (OpenSinks) and serves the HTTP endpoints: /healthz, /readyz, /metrics,
// /partitions, /runs and the live page (internal/web). Node is the one
// place that builds those parts and knows their start and stop order
// (node.go): Serve runs a Node, and so do the tests. Export, ReplayFiles,
// and Reports with WriteComparison are `export`, `replay` and `compare`;
// `parse` folds a saved log with internal/offline; `quickstart` runs Serve
// and a collector's replay together, in cmd/aggregator (no app imports
// the other).
package aggregator
