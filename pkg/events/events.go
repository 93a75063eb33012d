package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// Started is the decoded content of a run-started event.
type Started struct {
	Info   split.RunInfo
	Detail StartDetail
}

// Finished is the decoded content of a run-finished event.
type Finished struct {
	Info   split.FinishInfo
	Detail FinishDetail
}

// Decoded is a decoded gttsplit event. Type says which one of Started,
// Lines, Sample, Finished and Split is set.
type Decoded struct {
	Type   string
	ID     string
	Origin Origin
	// Time is the event's time attribute (zero when absent).
	Time time.Time

	Started *Started
	Lines   []split.Line
	// Span, when set, is the lines a log-lines event decoded with
	// DecodeFiltered held: Lines then holds only those the filter kept,
	// and the fold counts the others as read (see Input).
	Span     *split.LineSpan
	Sample   *split.Sample
	Finished *Finished
	Split    *split.Report
	// SplitN is the n of a split event's id <runid>/split/<n>.
	SplitN int
}

// Source returns the CloudEvents source of events produced on host.
func Source(host string) string { return SourcePrefix + url.PathEscape(host) }

// ID returns the deterministic id of the event at position (pos, n) of run
// runID: pos is a log stream name, "fdinfo", "started", "finished" or
// "split".
func ID(runID, pos string, n uint64) string {
	return runID + "/" + pos + "/" + strconv.FormatUint(n, 10)
}

// LinesID returns the id of the log batch holding lines first..last of
// stream: <runid>/<stream>/<first>-<last>. Naming both ends keeps a batch
// that a restarted source re-reads with other bounds from being dropped by
// JetStream as a duplicate of a shorter one (the fold ignores the lines it
// already has).
func LinesID(runID, stream string, first, last uint64) string {
	return ID(runID, stream, first) + "-" + strconv.FormatUint(last, 10)
}

// NewRunStarted builds the run-started event of the run described by info;
// info.ID, info.Host and info.Lane are the event's origin.
func NewRunStarted(info split.RunInfo, d StartDetail) (event.Event, error) {
	o := Origin{RunID: info.ID, Host: info.Host, Lane: info.Lane}
	data := RunStartedData{
		Command:          info.Command,
		Args:             nonNil(d.Args),
		Env:              d.Env,
		EnvAdded:         nonNil(d.EnvAdded),
		VerboseAppended:  d.VerboseAppended,
		Issue:            info.Issue,
		ControlOf:        info.ControlOf,
		NoLog:            info.NoLog,
		SourceDir:        d.SourceDir,
		SourceCommit:     info.SourceCommit,
		SourceDirty:      info.SourceDirty,
		SourceCommitTime: utc(info.SourceCommitTime),
		CollectorVersion: info.CollectorVersion,
		PID:              d.PID,
		Started:          utc(info.Started),
	}
	if data.Env == nil {
		data.Env = map[string]string{}
	}
	return build(o, TypeRunStarted, ID(o.RunID, posStarted, 0), data.Started, data)
}

// NewLogLines builds the log-lines event of one batch. The lines must be of
// one stream, in order, with consecutive Seq values (see Batches).
func NewLogLines(o Origin, lines []split.Line) (event.Event, error) {
	if len(lines) == 0 {
		return event.Event{}, fmt.Errorf("%w: empty log batch", ErrInvalid)
	}
	stream := lines[0].Stream
	if err := checkStream(stream); err != nil {
		return event.Event{}, err
	}
	data := LogLinesData{Stream: stream, FirstSeq: lines[0].Seq, Lines: make([]LineData, len(lines))}
	for i, l := range lines {
		if l.Stream != stream {
			return event.Event{}, fmt.Errorf("%w: log batch mixes streams %q and %q", ErrInvalid, stream, l.Stream)
		}
		if l.Seq != data.FirstSeq+uint64(i) {
			return event.Event{}, fmt.Errorf("%w: log batch seq %d at position %d, want %d", ErrInvalid, l.Seq, i, data.FirstSeq+uint64(i))
		}
		data.Lines[i] = LineData{T: utc(l.Time), Text: l.Text}
	}
	return build(o, TypeLogLines, LinesID(o.RunID, stream, data.FirstSeq, data.FirstSeq+uint64(len(lines))-1), data.Lines[0].T, data)
}

// NewFDInfoSample builds the event of one sampling tick.
func NewFDInfoSample(o Origin, s split.Sample) (event.Event, error) {
	data := FDInfoSampleData{Seq: s.Seq, T: utc(s.Time), Procs: make([]ProcData, len(s.Procs)), Cards: make([]CardData, len(s.Cards))}
	for i, p := range s.Procs {
		fds := make([]FDData, len(p.FDs))
		for j, fd := range p.FDs {
			fds[j] = FDData{FD: fd.FD, Link: fd.Link, Text: fd.Text}
		}
		data.Procs[i] = ProcData{PID: p.PID, FDs: fds}
	}
	for i, c := range s.Cards {
		data.Cards[i] = CardData{Card: c.Card, GTTUsedBytes: c.UsedBytes, GTTTotalBytes: c.TotalBytes}
	}
	return build(o, TypeFDInfoSample, ID(o.RunID, posFDInfo, s.Seq), data.T, data)
}

// NewRunFinished builds the run-finished event.
func NewRunFinished(o Origin, f split.FinishInfo, d FinishDetail) (event.Event, error) {
	if d.Duration < 0 {
		return event.Event{}, fmt.Errorf("%w: negative duration %s", ErrInvalid, d.Duration)
	}
	data := RunFinishedData{
		Finished:      utc(f.Finished),
		ExitCode:      f.ExitCode,
		Signal:        f.Signal,
		Incomplete:    f.Incomplete,
		DurationNS:    int64(d.Duration),
		DroppedEvents: d.DroppedEvents,
	}
	if s := f.Sent; s != nil {
		data.Sent = &SentData{Streams: make([]StreamSentData, len(s.Streams)), Samples: s.Samples, LastSampleSeq: s.LastSampleSeq}
		for i, st := range s.Streams {
			data.Sent.Streams[i] = StreamSentData{Stream: st.Stream, Lines: st.Lines, LastSeq: st.LastSeq}
		}
		if sm := s.Sampling; sm != nil {
			data.Sent.Sampling = &SamplingData{IntervalNS: int64(sm.Interval), Triggered: sm.Triggered, LargestGapNS: int64(sm.LargestGap)}
		}
		if err := data.Sent.check(); err != nil {
			return event.Event{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return build(o, TypeRunFinished, ID(o.RunID, posFinished, 0), data.Finished, data)
}

// NewSplit builds the n-th split event of the run r describes (n counts the
// splits the aggregator published for the run, from 0). The origin is
// r.Run.ID, r.Run.Host and r.Run.Lane; the time is r.Run.Finished, else
// r.Run.Started.
func NewSplit(r split.Report, n int) (event.Event, error) {
	if n < 0 {
		return event.Event{}, fmt.Errorf("%w: negative split number %d", ErrInvalid, n)
	}
	if r.Schema != split.Schema {
		return event.Event{}, fmt.Errorf("%w: report schema %q, want %q", ErrInvalid, r.Schema, split.Schema)
	}
	o := Origin{RunID: r.Run.ID, Host: r.Run.Host, Lane: r.Run.Lane}
	var t time.Time
	for _, s := range []string{r.Run.Finished, r.Run.Started} {
		if p, err := time.Parse(time.RFC3339Nano, s); err == nil {
			t = p
			break
		}
	}
	return build(o, TypeSplit, ID(o.RunID, posSplit, uint64(n)), utc(t), r)
}

// build assembles and validates one event.
func build(o Origin, typ, id string, t time.Time, data any) (event.Event, error) {
	if err := checkOrigin(o); err != nil {
		return event.Event{}, err
	}
	var b []byte
	var err error
	ok := false
	if d, isLines := data.(LogLinesData); isLines {
		b, ok = appendLogLinesData(make([]byte, 0, logLinesSize(d)), d)
	}
	if !ok {
		b, err = marshalData(data)
	}
	if err != nil {
		return event.Event{}, fmt.Errorf("%w: encode %s data: %w", ErrInvalid, typ, err)
	}
	ev := event.New(event.CloudEventsVersionV1)
	ev.SetID(id)
	ev.SetSource(Source(o.Host))
	ev.SetType(typ)
	ev.SetSubject(o.RunID)
	if !t.IsZero() {
		ev.SetTime(t)
	}
	ev.SetExtension(AttrRunID, o.RunID)
	ev.SetExtension(AttrHost, o.Host)
	ev.SetExtension(AttrLane, o.Lane)
	ev.SetDataContentType(ContentType)
	ev.DataEncoded = b
	ev.DataBase64 = false
	if err := ev.Validate(); err != nil {
		return event.Event{}, fmt.Errorf("%w: %s %s: %w", ErrInvalid, typ, id, err)
	}
	return ev, nil
}

// marshalData encodes a payload as compact JSON without HTML escaping, so
// log text reads as written ("->", "<unk>").
func marshalData(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func checkOrigin(o Origin) error {
	if o.RunID == "" {
		return fmt.Errorf("%w: empty run id", ErrInvalid)
	}
	if o.Host == "" {
		return fmt.Errorf("%w: empty host", ErrInvalid)
	}
	for _, f := range []struct{ name, v string }{{"run id", o.RunID}, {"host", o.Host}, {"lane", o.Lane}} {
		if !printable(f.v) {
			return fmt.Errorf("%w: %s %q is not printable UTF-8", ErrInvalid, f.name, f.v)
		}
		if strings.TrimSpace(f.v) != f.v {
			return fmt.Errorf("%w: %s %q has surrounding whitespace", ErrInvalid, f.name, f.v)
		}
	}
	return nil
}

func checkStream(s string) error {
	switch s {
	case "":
		return fmt.Errorf("%w: empty stream name", ErrInvalid)
	case posStarted, posFinished, posFDInfo, posSplit:
		return fmt.Errorf("%w: stream name %q is reserved", ErrInvalid, s)
	}
	if !printable(s) || strings.TrimSpace(s) != s {
		return fmt.Errorf("%w: stream name %q is not printable UTF-8 without surrounding whitespace", ErrInvalid, s)
	}
	return nil
}

// printable reports whether s is valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Input is what d brings to its run's fold (split.Fold.Apply): the run's
// start, its lines, a sample, or its finish with the collector's drop
// count. A split event brings nothing.
func (d Decoded) Input() split.Input {
	switch {
	case d.Started != nil:
		return split.Input{Run: &d.Started.Info}
	case d.Lines != nil || d.Span != nil:
		return split.Input{Lines: d.Lines, Span: d.Span}
	case d.Sample != nil:
		return split.Input{Sample: d.Sample}
	case d.Finished != nil:
		fi := d.Finished.Info
		fi.DroppedEvents = d.Finished.Detail.DroppedEvents
		return split.Input{Finish: &fi}
	}
	return split.Input{}
}

// check rejects an announcement the contract does not allow: a stream name
// that is not one, or a stream named twice.
func (s *SentData) check() error {
	seen := map[string]bool{}
	for _, st := range s.Streams {
		if err := checkStream(st.Stream); err != nil {
			return fmt.Errorf("sent: %w", err)
		}
		if seen[st.Stream] {
			return fmt.Errorf("sent: stream %q twice", st.Stream)
		}
		seen[st.Stream] = true
	}
	return nil
}
