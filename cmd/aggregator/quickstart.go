package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/gttsplit/gttsplit/internal/app/aggregator"
	"github.com/gttsplit/gttsplit/internal/app/collector"
	"github.com/gttsplit/gttsplit/internal/cli"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/split"
)

func newQuickstart(stdout io.Writer) *cobra.Command {
	var out string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "quickstart [--out DIR] [FILE...]",
		Short: "Run the whole pipeline on the embedded default with the recorded runs",
		Long: `quickstart runs the real pipeline in one process: an aggregator with an embedded
NATS server (a fresh store, a free port) consumes; a collector publishes
recorded runs to it as 'collector replay' would; every split is printed and
written to the file and JSON sinks under --out (and, with --comment-api,
posted as 'aggregator serve' does). Without FILE it uses the bundled
testdata/runs/*/events.jsonl (run it from the repository's root).
--log-level debug shows the partition mechanics too. Ctrl-C stops it
(exit 130), keeping the splits written and removing what is empty.`,
		Example: `  go run ./cmd/aggregator quickstart
  aggregator quickstart --out /tmp/q my-run/events.jsonl`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			if len(args) == 0 {
				args, _ = filepath.Glob(filepath.Join("testdata", "runs", "*", "events.jsonl"))
				if len(args) == 0 {
					return cli.Usage(errors.New("no FILE given and no testdata/runs/*/events.jsonl here: run it from the repository's root"))
				}
			}
			// One member on one machine: the partition mechanics (and
			// its "not ready" while it takes them on a slow machine) are
			// at debug here; serve keeps them for a fleet.
			log := cli.QuietLogger(cmd.ErrOrStderr(), cfg.Log.Level, cfg.Log.Format, []string{"quickstart", "sinks"}, "fleet")
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigs)
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			var caught atomic.Pointer[os.Signal]
			go func() {
				select {
				case sig := <-sigs:
					caught.Store(&sig)
					cancel()
				case <-ctx.Done():
				}
			}()
			res, err := quickstart(ctx, cfg, args, out, timeout, stdout, log)
			if sig := caught.Load(); sig != nil {
				return &cli.ExitError{Code: 128 + signalNumber(*sig), Err: errors.New("interrupted: " + res.said())}
			}
			if errors.Is(err, aggregator.ErrInput) {
				return cli.Usage(err)
			}
			return err
		},
	}
	c.Flags().StringVar(&out, "out", "quickstart-out", "directory for the file and JSON sinks")
	c.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up when the splits are not all written by then")
	addFlags(c.Flags(), "format", "log-level", "comment-api", "comment-issue", "comment-dry-run")
	return c
}

// qsResult is what a quickstart wrote.
type qsResult struct {
	written, want int
	out           string // the --out directory
	tidied        bool   // empty files and directories it made were removed
}

// said is what an interrupted quickstart left, in words.
func (r qsResult) said() string {
	switch {
	case r.want == 0 || r.written == 0 && r.tidied:
		return "no split written; nothing left under " + r.out
	case r.written == 0:
		return "no split written"
	case r.written < r.want:
		return fmt.Sprintf("%d of %d splits written under %s (the others are missing: run it again for all)", r.written, r.want, r.out)
	}
	return fmt.Sprintf("all %d splits written under %s", r.written, r.out)
}

// quickstart runs the real pipeline on the embedded default, in one
// process: an aggregator with an embedded NATS server (fresh store, free
// port) consumes; a collector publishes the recorded streams to it over
// NATS as `collector replay` does; each run's split is printed and written
// to the file and JSON sinks under outDir; it returns once every run in the
// files was written (or ctx ends, or the timeout passes). When not every
// split was written, the empty files and directories it made under outDir
// (the sinks make theirs at start) are removed.
func quickstart(ctx context.Context, cfg config.Aggregator, files []string, outDir string, timeout time.Duration, stdout io.Writer, log zerolog.Logger) (res qsResult, err error) {
	res.out = outDir
	want, err := runIDs(files)
	if err != nil {
		return res, err
	}
	if len(want) == 0 {
		return res, fmt.Errorf("no run in %v", files)
	}
	res.want = len(want)
	store, err := os.MkdirTemp("", "gttsplit-quickstart-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(store)
	c := cfg
	c.NATS.URL = ""
	c.Embedded.Listen, c.Embedded.Store = "127.0.0.1:0", filepath.Join(store, "nats")
	c.HTTP.Listen = ""
	c.Sinks.File.Dir = filepath.Join(outDir, "reports")
	c.Sinks.JSON.Dir = filepath.Join(outDir, "json")
	made := notYet(outDir, c.Sinks.File.Dir, c.Sinks.JSON.Dir, filepath.Join(c.Sinks.JSON.Dir, "splits.jsonl"))
	var (
		mu   sync.Mutex
		done = map[string]bool{}
	)
	defer func() {
		mu.Lock()
		res.written = len(done)
		mu.Unlock()
		if res.written < res.want {
			res.tidied = tidy(made)
		}
	}()

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	serveCtx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	ready := make(chan string, 1)
	opt := aggregator.ServeOptions{
		Stdout: stdout,
		// Stopped once every split is written (not interrupted, not
		// timed out): the tracker gets its shutdown_timeout.
		OneShot: func() bool { return ctx.Err() == nil },
		Ready:   func(url string) { ready <- url },
		OnClose: func(id string, _ split.Report) {
			mu.Lock()
			defer mu.Unlock()
			done[id] = true
			for w := range want {
				if !done[w] {
					return
				}
			}
			stopServe() // every run is written: drain and stop
		},
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- aggregator.Serve(serveCtx, c, opt, log) }()
	var url string
	select {
	case url = <-ready:
	case err := <-serveErr:
		return res, err
	}
	qlog := log.With().Str("component", "quickstart").Logger()
	qlog.Info().Msg("an aggregator with an embedded NATS server (a fresh store, removed at exit) is consuming")
	cc := config.DefaultCollector()
	cc.NATS.URL = url
	cc.Spool.Dir = filepath.Join(store, "spool")
	cc.Log = c.Log
	st, err := collector.Replay(ctx, cc, files, collector.IO{}, log.With().Str("component", "collector").Logger())
	if err != nil {
		stopServe()
		<-serveErr
		return res, fmt.Errorf("publish: %w", err)
	}
	qlog.Info().Int("events", st.Delivered).Int("runs", len(want)).Msg("published the recorded runs through NATS; waiting for their splits")
	err = <-serveErr
	mu.Lock()
	missing := len(want) - len(done)
	mu.Unlock()
	if missing > 0 {
		return res, errors.Join(err, fmt.Errorf("%d of %d runs got no split before the timeout (%s)", missing, len(want), timeout))
	}
	if err != nil {
		return res, err
	}
	if cfg.Format == "json" {
		// stdout holds only JSON Lines: the summary goes to the log.
		qlog.Info().Int("splits", len(want)).Str("markdown_dir", c.Sinks.File.Dir).Str("json_dir", c.Sinks.JSON.Dir).Msg("wrote the splits")
		return res, nil
	}
	fmt.Fprintf(stdout, "wrote %d splits: Markdown under %s, JSON under %s (and %s)\n",
		len(want), c.Sinks.File.Dir, c.Sinks.JSON.Dir, filepath.Join(c.Sinks.JSON.Dir, "splits.jsonl"))
	return res, nil
}

// notYet returns the paths that do not exist yet, in the order given
// (parents first).
func notYet(paths ...string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			out = append(out, p)
		}
	}
	return out
}

// tidy removes, children first, those of made that are an empty file or
// an empty directory, and reports whether none of made is left.
func tidy(made []string) bool {
	left := false
	for _, p := range slices.Backward(made) {
		st, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil, st.Mode().IsRegular() && st.Size() > 0:
			left = true
			continue
		}
		if os.Remove(p) != nil { // a directory that is not empty
			left = true
		}
	}
	return !left
}

// signalNumber is the number of a caught signal (its exit code is 128+N).
func signalNumber(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return int(n)
	}
	return int(syscall.SIGINT)
}

// runIDs lists the runs of recorded streams.
func runIDs(files []string) (map[string]bool, error) {
	ids := map[string]bool{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", aggregator.ErrInput, err)
		}
		r := events.NewReader(f)
		for r.Next() {
			if d, err := events.Decode(r.Event()); err == nil && d.Type != events.TypeSplit {
				ids[d.Origin.RunID] = true
			}
		}
		f.Close()
		if err := r.Err(); err != nil {
			return nil, err
		}
	}
	return ids, nil
}
