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
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/internal/offline"
	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/internal/runtable"
	"github.com/gttsplit/gttsplit/pkg/sinks/jsonsink"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/present"
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

// Find returns the split of input, which must hold one run; samples are
// samples files for an input that is a saved log. A missing file or an
// unknown run wraps ErrInput.
func (f *Reports) Find(ctx context.Context, input string, samples []string) (split.Report, error) {
	reps, one, err := f.load(ctx, input, samples)
	if err != nil {
		return split.Report{}, err
	}
	if len(reps) != 1 {
		return split.Report{}, fmt.Errorf("%w: %s holds %d runs; %s", ErrInput, input, len(reps), one)
	}
	return reps[0], nil
}

// Load returns every split input holds: a recorded stream, or a JSON
// sink's splits.jsonl (or its directory), may hold many runs, in run id
// order; a split.json, a saved log and a run id hold one.
func (f *Reports) Load(ctx context.Context, input string, samples []string) ([]split.Report, error) {
	reps, _, err := f.load(ctx, input, samples)
	return reps, err
}

// load is Load; one says how to give an input of one run instead.
func (f *Reports) load(ctx context.Context, input string, samples []string) (reps []split.Report, one string, err error) {
	st, err := os.Stat(input)
	switch {
	case err == nil && st.IsDir():
		return f.dir(input, samples)
	case err == nil:
		return f.file(input, samples)
	case !errors.Is(err, os.ErrNotExist):
		return nil, "", fmt.Errorf("%w: %w", ErrInput, err)
	case !runIDLike.MatchString(input):
		return nil, "", fmt.Errorf("%w: %s: no such file, and not a run id", ErrInput, input)
	}
	if len(samples) > 0 {
		return nil, "", fmt.Errorf("%w: %s: samples are for a saved log, and there is no such file (a run id has its samples in the store)", ErrInput, input)
	}
	r, err := f.run(ctx, input)
	if err != nil {
		return nil, "", err
	}
	return []split.Report{r}, "", nil
}

// Hints of load: how to give one run of an input that holds several.
const (
	oneOfStream = "give a stream of one run (aggregator export --run ID)"
	oneOfSplits = "give one run's split (DIR/<host>/<lane>/<run>.json)"
)

func (f *Reports) dir(dir string, samples []string) ([]split.Report, string, error) {
	has := func(n string) bool { _, err := os.Stat(filepath.Join(dir, n)); return err == nil }
	switch {
	case has("events.jsonl") && len(samples) == 0:
		return f.stream(filepath.Join(dir, "events.jsonl"))
	case has("split.log"):
		if len(samples) == 0 && has("gtt.txt") {
			samples = []string{filepath.Join(dir, "gtt.txt")}
		}
		r, err := f.parse(filepath.Join(dir, "split.log"), samples)
		return []split.Report{r}, "", err
	case has("split.json"):
		return readSplits(filepath.Join(dir, "split.json"))
	case has(jsonsink.LinesFile):
		return readSplits(filepath.Join(dir, jsonsink.LinesFile))
	}
	return nil, "", fmt.Errorf("%w: %s holds no events.jsonl, split.log, split.json or %s", ErrInput, dir, jsonsink.LinesFile)
}

func (f *Reports) file(path string, samples []string) ([]split.Report, string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrInput, err)
	}
	head, _ := bufio.NewReader(fh).Peek(4096)
	fh.Close()
	head = bytes.TrimLeft(head, " \t\r\n")
	switch {
	case len(samples) == 0 && bytes.HasPrefix(head, []byte(`{"specversion"`)):
		return f.stream(path)
	case len(samples) == 0 && bytes.HasPrefix(head, []byte("{")):
		return readSplits(path)
	}
	r, err := f.parse(path, samples)
	return []split.Report{r}, "", err
}

// readSplits reads gttsplit.split.v1 objects: a split.json, a JSON sink's
// report, or its splits.jsonl (one per line, every version of a run's
// split in turn: the last one of each run is kept), in run id order.
func readSplits(path string) ([]split.Report, string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrInput, err)
	}
	defer fh.Close()
	dec := json.NewDecoder(bufio.NewReader(fh))
	byID := map[string]split.Report{}
	var ids []string
	for n := 1; ; n++ {
		var r split.Report
		err := dec.Decode(&r)
		if errors.Is(err, io.EOF) {
			break
		}
		where := path
		if n > 1 {
			where = fmt.Sprintf("%s: split %d", path, n)
		}
		if err != nil {
			return nil, "", fmt.Errorf("%w: %s: not a split (%w)", ErrInput, where, err)
		}
		if r.Schema != split.Schema {
			return nil, "", fmt.Errorf("%w: %s: not a %s split (schema %q)", ErrInput, where, split.Schema, r.Schema)
		}
		if _, ok := byID[r.Run.ID]; !ok {
			ids = append(ids, r.Run.ID)
		}
		byID[r.Run.ID] = r
	}
	sort.Strings(ids)
	out := make([]split.Report, len(ids))
	for i, id := range ids {
		out[i] = byID[id]
	}
	return out, oneOfSplits, nil
}

func (f *Reports) stream(path string) ([]split.Report, string, error) {
	runs := runtable.NewRuns(f.opts)
	if _, err := ReplayFiles(runs, []string{path}, f.log); err != nil {
		return nil, "", err
	}
	var out []split.Report
	for _, id := range runs.IDs() {
		out = append(out, runtable.Report(runs.Get(id)))
	}
	return out, oneOfStream, nil
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

// errNoBucket says the store has no state bucket yet (no run was folded).
var errNoBucket = errors.New("the store has no runs yet")

// openStore opens the state bucket: through --nats-url, or the embedded
// server's store (which must exist, and not be in use); noStore is what
// to say when there is none.
func (f *Reports) openStore(ctx context.Context, noStore func(store string) string) error {
	if f.kv != nil {
		return nil
	}
	c := f.cfg
	if c.NATS.URL == "" {
		if _, err := os.Stat(c.Embedded.Store); err != nil {
			return fmt.Errorf("%w: %s", ErrInput, noStore(c.Embedded.Store))
		}
		c.Embedded.Listen = "127.0.0.1:0"
	}
	b, err := openBroker(ctx, c, f.log)
	if err != nil {
		return forReader(err)
	}
	f.b = b
	kv, err := b.js.KeyValue(ctx, runtable.Bucket)
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return errNoBucket
		}
		return fmt.Errorf("state bucket %s: %w", runtable.Bucket, err)
	}
	if f.parts, err = bus.StreamPartitions(ctx, b.js, c.NATS.Stream); err != nil {
		return err
	}
	f.kv = kv
	return nil
}

// run looks a run up in the state bucket.
func (f *Reports) run(ctx context.Context, id string) (split.Report, error) {
	err := f.openStore(ctx, func(store string) string {
		return id + ": no such file, and no store at " + store + " to look the run up in (give --store DIR or --nats-url)"
	})
	if errors.Is(err, errNoBucket) {
		return split.Report{}, fmt.Errorf("%w: run %s: %w", ErrInput, id, err)
	}
	if err != nil {
		return split.Report{}, err
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

// StoredRuns are the closed runs of a store with their figures.
type StoredRuns struct {
	Runs []regress.Run
	// Open counts the runs not closed yet (no split to show).
	Open int
	// FromState counts the closed runs whose summary an earlier version
	// wrote without figures: their figures were read from their states.
	FromState int
}

// storeIndexWait bounds the read of a store's run index.
const storeIndexWait = time.Minute

// Stored returns every closed run of the store (the embedded server's
// --store, or the server at --nats-url) with its figures, read from the
// run index; a run an earlier version summarised without its figures is
// read from its state. keep selects the runs whose state is worth
// reading by their summary (host, lane).
func (f *Reports) Stored(ctx context.Context, keep func(runtable.RunSummary) bool) (StoredRuns, error) {
	var out StoredRuns
	err := f.openStore(ctx, func(store string) string {
		return "no store at " + store + " to read the runs from (give --store DIR, --nats-url, or the inputs)"
	})
	if errors.Is(err, errNoBucket) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	ictx, cancel := context.WithTimeout(ctx, storeIndexWait)
	defer cancel()
	sums, err := runtable.ReadIndex(ictx, f.kv, f.log)
	if err != nil {
		return out, err
	}
	for _, s := range sums {
		switch {
		case s.State != "closed":
			out.Open++
			continue
		case !keep(s):
			continue
		case s.Split != nil:
			out.Runs = append(out.Runs, regress.Run{ID: s.ID, Host: s.Host, Lane: s.Lane, F: *s.Split})
			continue
		}
		st, err := runtable.ReadState(ctx, f.b.js, f.kv, f.parts, s.ID, f.opts)
		if errors.Is(err, runtable.ErrNoRun) {
			continue // expired meanwhile
		}
		if err != nil {
			return out, fmt.Errorf("run %s: %w", s.ID, err)
		}
		out.FromState++
		out.Runs = append(out.Runs, regress.Run{ID: s.ID, Host: s.Host, Lane: s.Lane, F: split.FiguresOf(runtable.Report(st))})
	}
	return out, nil
}

// WriteComparison writes a comparison as text, md or json.
func WriteComparison(w io.Writer, format string, c present.Comparison) error {
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
		out = []byte(present.CompareMarkdown(c) + "\n")
	default:
		out = []byte(present.CompareText(c) + "\n")
	}
	_, err := w.Write(out)
	return err
}
