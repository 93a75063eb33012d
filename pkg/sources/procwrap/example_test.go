package procwrap_test

import (
	"context"
	"fmt"
	"io"

	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/sources/procwrap"
)

// A wrapped command: its output passes through (here to io.Discard) and
// comes back as records.
func Example() {
	cfg := procwrap.DefaultConfig()
	cfg.AddVerbose = false
	opt := procwrap.Options{Command: []string{"echo", "hello world"}, Stdout: io.Discard}
	src, err := procwrap.New(cfg, opt, sources.Settings{})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = src.Run(context.Background(), func(_ context.Context, r sources.Record) error {
		switch {
		case r.Started != nil:
			fmt.Println("started:", r.Started.Command)
		case r.Lines != nil:
			for _, l := range r.Lines {
				fmt.Println(l.Stream, l.Seq, l.Text)
			}
		case r.Finished != nil:
			fmt.Println("finished, exit code", *r.Finished.ExitCode)
		}
		return nil
	})
	fmt.Println(err, src.ExitCode())
	// Output:
	// started: echo 'hello world'
	// stdout 1 hello world
	// finished, exit code 0
	// <nil> 0
}
