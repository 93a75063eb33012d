package aggregator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/offline"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// Reports finds the split of a compare input: a run id (looked up in the
// state bucket), a split.json file, a recorded stream (events.jsonl), a
// saved log (with samples), or a `collector run --out` directory.
type Reports struct {
	cfg   config.Aggregator
	log   zerolog.Logger
	opts  split.Options
	b     *broker
	kv    jetstream.KeyValue
	parts int // the events stream's partition count
}

// NewReports returns a finder; Close releases the broker it may open.
func NewReports(cfg config.Aggregator, log zerolog.Logger) (*Reports, error) {
	opts, err := FoldOptions(cfg)
	if err != nil {
		return nil, err
	}
	return &Reports{cfg: cfg, log: log, opts: opts}, nil
}

// Close closes the broker connection, if one was opened.
func (f *Reports) Close() {
	if f.b != nil {
		f.b.close()
	}
}

var runIDLike = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)

// Find returns the split of input; samples are samples files for an input
// that is a saved log. A missing file or an unknown run wraps ErrInput.
func (f *Reports) Find(ctx context.Context, input string, samples []string) (split.Report, error) {
	st, err := os.Stat(input)
	switch {
	case err == nil && st.IsDir():
		return f.dir(input, samples)
	case err == nil:
		return f.file(input, samples)
	case !errors.Is(err, os.ErrNotExist):
		return split.Report{}, fmt.Errorf("%w: %w", ErrInput, err)
	case !runIDLike.MatchString(input):
		return split.Report{}, fmt.Errorf("%w: %s: no such file, and not a run id", ErrInput, input)
	}
	if len(samples) > 0 {
		return split.Report{}, fmt.Errorf("%w: %s: samples are for a saved log, and there is no such file (a run id has its samples in the store)", ErrInput, input)
	}
	return f.run(ctx, input)
}

func (f *Reports) dir(dir string, samples []string) (split.Report, error) {
	has := func(n string) bool { _, err := os.Stat(filepath.Join(dir, n)); return err == nil }
	switch {
	case has("events.jsonl") && len(samples) == 0:
		return f.stream(filepath.Join(dir, "events.jsonl"))
	case has("split.log"):
		if len(samples) == 0 && has("gtt.txt") {
			samples = []string{filepath.Join(dir, "gtt.txt")}
		}
		return f.parse(filepath.Join(dir, "split.log"), samples)
	case has("split.json"):
		return readSplitJSON(filepath.Join(dir, "split.json"))
	}
	return split.Report{}, fmt.Errorf("%w: %s holds no events.jsonl, split.log or split.json", ErrInput, dir)
}

func (f *Reports) file(path string, samples []string) (split.Report, error) {
	fh, err := os.Open(path)
	if err != nil {
		return split.Report{}, fmt.Errorf("%w: %w", ErrInput, err)
	}
	head, _ := bufio.NewReader(fh).Peek(4096)
	fh.Close()
	head = bytes.TrimLeft(head, " \t\r\n")
	switch {
	case len(samples) == 0 && bytes.HasPrefix(head, []byte(`{"specversion"`)):
		return f.stream(path)
	case len(samples) == 0 && bytes.HasPrefix(head, []byte("{")):
		return readSplitJSON(path)
	}
	return f.parse(path, samples)
}

// readSplitJSON reads a gttsplit.split.v1 object (split.json, or a JSON
// sink's report).
func readSplitJSON(path string) (split.Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return split.Report{}, fmt.Errorf("%w: %w", ErrInput, err)
	}
	var r split.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%w: %s: not a split (%w)", ErrInput, path, err)
	}
	if r.Schema != split.Schema {
		return r, fmt.Errorf("%w: %s: not a %s split (schema %q)", ErrInput, path, split.Schema, r.Schema)
	}
	return r, nil
}

func (f *Reports) stream(path string) (split.Report, error) {
	runs := runtable.NewRuns(f.opts)
	if _, err := ReplayFiles(runs, []string{path}, f.log); err != nil {
		return split.Report{}, err
	}
	ids := runs.IDs()
	if len(ids) != 1 {
		return split.Report{}, fmt.Errorf("%w: %s holds %d runs; give a stream of one run (aggregator export --run ID)", ErrInput, path, len(ids))
	}
	return runtable.Report(runs.Get(ids[0])), nil
}

func (f *Reports) parse(log string, samples []string) (split.Report, error) {
	fold := split.NewFold(f.opts)
	warnings, err := offline.Parse(fold, log, samples)
	for _, w := range warnings {
		f.log.Warn().Str("input", log).Msg(w)
	}
	if err != nil {
		if errors.Is(err, offline.ErrInput) {
			return split.Report{}, fmt.Errorf("%w: %w", ErrInput, err)
		}
		return split.Report{}, err
	}
	return fold.Report(), nil
}

// run looks a run up in the state bucket: through --nats-url, or the
// embedded server's store (which must exist, and not be in use).
func (f *Reports) run(ctx context.Context, id string) (split.Report, error) {
	if f.kv == nil {
		c := f.cfg
		if c.NATS.URL == "" {
			if _, err := os.Stat(c.Embedded.Store); err != nil {
				return split.Report{}, fmt.Errorf("%w: %s: no such file, and no store at %s to look the run up in (give --store DIR or --nats-url)", ErrInput, id, c.Embedded.Store)
			}
			c.Embedded.Listen = "127.0.0.1:0"
		}
		b, err := openBroker(ctx, c, f.log)
		if err != nil {
			return split.Report{}, err
		}
		f.b = b
		kv, err := b.js.KeyValue(ctx, runtable.Bucket)
		if err != nil {
			if errors.Is(err, jetstream.ErrBucketNotFound) {
				return split.Report{}, fmt.Errorf("%w: run %s: the store has no runs yet", ErrInput, id)
			}
			return split.Report{}, fmt.Errorf("state bucket %s: %w", runtable.Bucket, err)
		}
		if f.parts, err = bus.StreamPartitions(ctx, b.js, c.NATS.Stream); err != nil {
			return split.Report{}, err
		}
		f.kv = kv
	}
	st, err := runtable.ReadState(ctx, f.b.js, f.kv, f.parts, id, f.opts)
	if errors.Is(err, runtable.ErrNoRun) {
		return split.Report{}, fmt.Errorf("%w: no run %s in the store (and no such file)", ErrInput, id)
	}
	if err != nil {
		return split.Report{}, fmt.Errorf("run %s: %w", id, err)
	}
	return runtable.Report(st), nil
}

// WriteComparison writes a comparison as text, md or json.
func WriteComparison(w io.Writer, format string, c split.Comparison) error {
	var out []byte
	switch format {
	case "json":
		// One compact object per line, as the splits are printed.
		b, err := json.Marshal(c)
		if err != nil {
			return err
		}
		out = append(b, '\n')
	case "md":
		out = []byte(split.CompareMarkdown(c) + "\n")
	default:
		out = []byte(split.CompareText(c) + "\n")
	}
	_, err := w.Write(out)
	return err
}
