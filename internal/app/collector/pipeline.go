package collector

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/rs/zerolog"

	"github.com/gttsplit/gttsplit/internal/bus"
	"github.com/gttsplit/gttsplit/pkg/events"
	"github.com/gttsplit/gttsplit/pkg/sources"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/present"
)

// pipeline is the downstream of a collector's sources: it turns records into
// CloudEvents (pkg/events), records them under --out, folds them locally for
// the --out split, and publishes them (internal/bus). A record's Ack is
// called once every event built from it is durable: acknowledged by the
// broker or spooled, or, offline, written under --out.
type pipeline struct {
	origin   events.Origin
	pub      *bus.Publisher // nil: offline
	out      *recorder      // nil: no --out
	maxLines int
	log      zerolog.Logger

	// detail is what the run-started event carries beyond split.RunInfo.
	detail events.StartDetail

	// sampling, when set, says how the fdinfo sampler sampled (for the
	// run-finished event).
	sampling func() *split.Sampling

	// mu serialises emit: sources run concurrently. It is taken after
	// the detacher's mu and before the publisher's locks (emit publishes
	// under it).
	mu      sync.Mutex
	fold    *split.Fold
	sent    *sentLog // what was handed on, for the run-finished event
	events  atomic.Uint64
	invalid atomic.Uint64
}

// emit is the sources.Emit of the collector.
func (p *pipeline) emit(ctx context.Context, r sources.Record) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, evs, err := p.prepare(r)
	if err != nil {
		// A record the contract cannot carry (a bad stream name, say) is
		// counted and skipped: one bad record must not stop a run.
		p.invalid.Add(1)
		p.log.Warn().Err(err).Msg("skipped a record that is not a valid event")
		if r.Ack != nil {
			r.Ack()
		}
		return nil
	}
	p.foldRecord(r)
	if p.out != nil {
		if err := p.out.write(r, evs); err != nil {
			return err
		}
	}
	p.events.Add(uint64(len(evs)))
	ack := joinAcks(r.Ack, len(evs))
	if p.pub == nil {
		for range evs {
			ack()
		}
		return nil
	}
	for _, ev := range evs {
		if err := p.pub.Publish(ctx, ev, ack); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	return nil
}

// joinAcks returns a function that calls ack once it was itself called n
// times (n == 0 calls ack at once).
func joinAcks(ack func(), n int) func() {
	if ack == nil {
		return func() {}
	}
	if n == 0 {
		ack()
		return func() {}
	}
	var left atomic.Int64
	left.Store(int64(n))
	return func() {
		if left.Add(-1) == 0 {
			ack()
		}
	}
}

// prepare builds the events of r and counts what they send (and, for
// attach, saves that) before they go out: see sentLog. A run-finished
// record gets the announcement of what was sent before it.
func (p *pipeline) prepare(r sources.Record) (sources.Record, []event.Event, error) {
	if p.sent == nil {
		p.sent, _ = openSentLog("")
	}
	if r.Finished != nil {
		fi := *r.Finished
		fi.Sent = p.sent.sent()
		if p.sampling != nil {
			fi.Sent.Sampling = p.sampling()
		}
		r.Finished = &fi
	}
	evs, err := p.build(r)
	if err != nil {
		return r, nil, err
	}
	if err := p.sent.add(r); err != nil {
		p.log.Warn().Err(err).Msg("could not save what was sent; a restarted attach may announce less than this run sent")
	}
	return r, evs, nil
}

func (p *pipeline) build(r sources.Record) ([]event.Event, error) {
	switch {
	case r.Started != nil:
		ev, err := events.NewRunStarted(*r.Started, p.detail)
		return []event.Event{ev}, err
	case r.Lines != nil:
		return events.LogLinesEvents(p.origin, r.Lines, p.maxLines)
	case r.Sample != nil:
		ev, err := events.NewFDInfoSample(p.origin, *r.Sample)
		return []event.Event{ev}, err
	case r.Finished != nil:
		d := events.FinishDetail{DroppedEvents: r.Finished.DroppedEvents, Duration: p.sent.duration(r.Finished.Finished)}
		ev, err := events.NewRunFinished(p.origin, *r.Finished, d)
		return []event.Event{ev}, err
	}
	return nil, fmt.Errorf("empty record")
}

func (p *pipeline) foldRecord(r sources.Record) {
	if p.fold == nil {
		return
	}
	switch {
	case r.Started != nil:
		p.fold.SetRun(*r.Started)
	case r.Lines != nil:
		for _, l := range r.Lines {
			p.fold.AddLine(l)
		}
	case r.Sample != nil:
		p.fold.AddSample(*r.Sample)
	case r.Finished != nil:
		p.fold.Finish(*r.Finished)
	}
}

// recorder writes the --out directory: split.log (the captured lines, in
// capture order), gtt.txt (the samples), events.jsonl (every event).
type recorder struct {
	dir     string
	madeDir bool // the directory did not exist before
	logf    *os.File
	gtt     *os.File
	jsonl   *events.Writer
	scratch bytes.Buffer
}

// newRecorder opens the --out directory. When resumeRun names the run that
// events.jsonl already records (a restarted attach of the same run), the
// files are appended to and what events.jsonl holds is folded into fold, so
// the local split covers the whole run; otherwise they start empty.
func newRecorder(dir, resumeRun string, fold *split.Fold) (*recorder, error) {
	_, err := os.Stat(dir)
	made := os.IsNotExist(err)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("out: %w", err)
	}
	rec := &recorder{dir: dir, madeDir: made}
	path := filepath.Join(dir, "events.jsonl")
	resume := resumeRun != "" && refold(path, resumeRun, fold)
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if resume {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	if rec.logf, err = os.OpenFile(filepath.Join(dir, "split.log"), flags, 0o644); err != nil {
		return nil, fmt.Errorf("out: %w", err)
	}
	if rec.gtt, err = os.OpenFile(filepath.Join(dir, "gtt.txt"), flags, 0o644); err != nil {
		rec.close()
		return nil, fmt.Errorf("out: %w", err)
	}
	if !resume {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			rec.close()
			return nil, fmt.Errorf("out: %w", err)
		}
	}
	if rec.jsonl, err = events.OpenWriter(path); err != nil {
		rec.close()
		return nil, fmt.Errorf("out: %w", err)
	}
	return rec, nil
}

// refold folds the events of run in a recorded stream into fold. It
// returns false, folding nothing, when the file is missing or records
// another run.
func refold(path, run string, fold *split.Fold) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	r := events.NewReader(f)
	first := true
	for r.Next() {
		d, err := events.Decode(r.Event())
		if err != nil {
			continue
		}
		if d.Origin.RunID != run {
			if first {
				return false
			}
			continue
		}
		first = false
		fold.Apply(d.Input())
	}
	return !first
}

// write records a record and the events built from it.
func (rec *recorder) write(r sources.Record, evs []event.Event) error {
	for _, ev := range evs {
		if err := rec.jsonl.Write(ev); err != nil {
			return fmt.Errorf("out: events.jsonl: %w", err)
		}
	}
	rec.scratch.Reset()
	switch {
	case r.Lines != nil:
		for _, l := range r.Lines {
			rec.scratch.WriteString(l.Text)
			rec.scratch.WriteByte('\n')
		}
		if _, err := rec.logf.Write(rec.scratch.Bytes()); err != nil {
			return fmt.Errorf("out: split.log: %w", err)
		}
	case r.Sample != nil:
		split.FormatSamples(&rec.scratch, *r.Sample)
		if _, err := rec.gtt.Write(rec.scratch.Bytes()); err != nil {
			return fmt.Errorf("out: gtt.txt: %w", err)
		}
	}
	return nil
}

// finish writes the local split (split.md, split.json) and closes the files.
func (rec *recorder) finish(r split.Report) error {
	js, err := split.JSON(r)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rec.dir, "split.json"), js, 0o644); err != nil {
		return fmt.Errorf("out: %w", err)
	}
	if err := os.WriteFile(filepath.Join(rec.dir, "split.md"), []byte(present.Markdown(r)), 0o644); err != nil {
		return fmt.Errorf("out: %w", err)
	}
	return rec.close()
}

// abandon closes the files of a run whose command could not start and
// removes them (empty: nothing ran), with a split.md and split.json an
// earlier run left in the directory, so none is mistaken for this one's;
// a directory this run made goes too.
func (rec *recorder) abandon() error {
	err := rec.close()
	for _, name := range outFiles {
		if rerr := os.Remove(filepath.Join(rec.dir, name)); rerr != nil && !os.IsNotExist(rerr) && err == nil {
			err = fmt.Errorf("out: %w", rerr)
		}
	}
	if rec.madeDir {
		_ = os.Remove(rec.dir) // only if empty
	}
	return err
}

// outFiles are the files of an --out directory.
var outFiles = []string{"split.log", "gtt.txt", "events.jsonl", "split.md", "split.json"}

func (rec *recorder) close() error {
	var first error
	for _, f := range []*os.File{rec.logf, rec.gtt} {
		if f != nil {
			if err := f.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	if rec.jsonl != nil {
		if err := rec.jsonl.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
