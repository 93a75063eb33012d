// Command collector runs on every GPU host: it wraps (run) or attaches to
// (attach) llama.cpp processes, reads their log lines and samples their
// /proc/<pid>/fdinfo, and publishes both as CloudEvents on NATS; it can also
// publish a recorded stream (replay). See `collector --help`.
package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/gttsplit/gttsplit/internal/cli"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	code := cli.Execute(newRoot(os.Stdin, os.Stdout, os.Stderr, sigs), os.Args[1:], os.Stderr)
	os.Exit(code)
}
