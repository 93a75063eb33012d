package logtail_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/sources/logtail"
)

// Follow a log file whose writer has already exited: Run reads it to the
// end, emits its lines (the last one has no newline) and returns.
func Example() {
	dir, err := os.MkdirTemp("", "logtail-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "llama-server.log")
	log := "load_tensors: loading model tensors\r\nllama_kv_cache: size = 512.00 MiB\nmain: exiting"
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		fmt.Println(err)
		return
	}

	cfg := logtail.DefaultConfig()
	cfg.Path = path
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.RunID = "example"
	exited := make(chan struct{})
	close(exited) // the attached process is gone
	cfg.Done = exited

	src, err := logtail.New(cfg, sources.Settings{})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = src.Run(context.Background(), func(_ context.Context, r sources.Record) error {
		for _, l := range r.Lines {
			fmt.Printf("%s %d %q\n", l.Stream, l.Seq, l.Text)
		}
		r.Ack() // durable downstream: the checkpoint may move past these lines
		return nil
	})
	fmt.Println("run:", err)
	// Output:
	// log 1 "load_tensors: loading model tensors\r"
	// log 2 "llama_kv_cache: size = 512.00 MiB"
	// log 3 "main: exiting"
	// run: <nil>
}
