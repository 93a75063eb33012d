package fdinfo_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/sources/fdinfo"
)

// Sampling this very process for one tick: it has no DRM fds.
func Example() {
	cfg := fdinfo.DefaultConfig()
	var proc fdinfo.Process
	proc.PID = os.Getpid()
	src, err := fdinfo.New(cfg, proc, sources.Settings{})
	if err != nil {
		fmt.Println(err)
		return
	}
	errStop := errors.New("one sample is enough")
	err = src.Run(context.Background(), func(_ context.Context, r sources.Record) error {
		for _, p := range r.Sample.Procs {
			if p.PID == proc.PID {
				fmt.Println("seq", r.Sample.Seq, "DRM fds:", len(p.FDs))
			}
		}
		return errStop
	})
	fmt.Println(errors.Is(err, errStop))
	// Output:
	// seq 1 DRM fds: 0
	// true
}
