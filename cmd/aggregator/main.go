// Command aggregator folds gttsplit events into GTT splits: live from NATS
// (serve), from recorded streams (replay), or from a saved llama.cpp log
// (parse). See `aggregator --help`.
package main

import (
	"os"

	"github.com/gttsplit/gttsplit/internal/cli"
)

func main() {
	os.Exit(cli.Execute(newRoot(os.Stdout, os.Stderr), os.Args[1:], os.Stderr))
}
