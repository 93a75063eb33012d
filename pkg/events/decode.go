package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
	jsoniter "github.com/json-iterator/go"
)

// dataJSON decodes event data. jsoniter (the SDK's own JSON library) in its
// standard-library-compatible mode reads the same documents into the same
// values as encoding/json, several times faster; decoding dominates the
// aggregator's cost per event.
var dataJSON = jsoniter.ConfigCompatibleWithStandardLibrary

// Marshal validates ev and returns its structured JSON encoding: one JSON
// object on one line (no newline). The attributes come in a fixed order, so
// equal events give equal bytes.
func Marshal(ev event.Event) ([]byte, error) {
	if !surelyValid(ev) {
		if err := ev.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	b, err := marshalJSON(ev)
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrInvalid, err)
	}
	if bytes.IndexByte(b, '\n') >= 0 {
		// The data of our events is compact; a foreign event with an
		// indented data member would break the one-event-per-line format.
		var c bytes.Buffer
		if err := json.Compact(&c, b); err != nil {
			return nil, fmt.Errorf("%w: encode: %w", ErrInvalid, err)
		}
		b = c.Bytes()
	}
	return b, nil
}

// surelyValid says, for the events gttsplit builds, what ev.Validate()
// == nil says, without its allocations (an error map, a copy of the
// context, the source's string, the media type's parse): a CloudEvents
// 1.0 context with a non-blank id, type and source, datacontenttype
// application/json or none, no dataschema, a subject non-blank or none.
// false means "ask Validate". FuzzMarshalMatchesSDK holds it to Validate.
func surelyValid(ev event.Event) bool {
	c, ok := ev.Context.(*event.EventContextV1)
	if !ok || len(ev.FieldErrors) > 0 || c.DataSchema != nil ||
		strings.TrimSpace(c.ID) == "" || strings.TrimSpace(c.Type) == "" ||
		(c.DataContentType != nil && *c.DataContentType != event.ApplicationJSON) ||
		(c.Subject != nil && strings.TrimSpace(*c.Subject) == "") {
		return false
	}
	// The source's String is not blank when it has a scheme (url.Parse
	// takes only letters, digits, '+', '-' and '.' there) and an opaque
	// part or a host: the "urn:gttsplit:collector:<host>" of Source.
	u := &c.Source.URL
	return validScheme(u.Scheme) && (u.Opaque != "" || u.Host != "")
}

// validScheme says s is a URL scheme url.Parse takes: a letter, then
// letters, digits, '+', '-' or '.'.
func validScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// Unmarshal parses one structured JSON CloudEvent and validates it. It does
// not look at the type; Decode does. Malformed input gives an error wrapping
// ErrInvalid, never a panic.
func Unmarshal(b []byte) (ev event.Event, err error) {
	// encoding/json's check is strict (jsoniter's, and the SDK's parser,
	// accept trailing garbage after the object).
	if !json.Valid(b) {
		return event.Event{}, fmt.Errorf("%w: not a JSON document", ErrInvalid)
	}
	defer func() {
		// The SDK's parser can panic on some malformed members (e.g. a
		// non-string data_base64); bad input must never crash us.
		if r := recover(); r != nil {
			ev, err = event.Event{}, fmt.Errorf("%w: parse: %v", ErrInvalid, r)
		}
	}()
	if err := ev.UnmarshalJSON(b); err != nil {
		return event.Event{}, fmt.Errorf("%w: parse: %w", ErrInvalid, err)
	}
	if err := ev.Validate(); err != nil {
		return event.Event{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return ev, nil
}

// LineFilter chooses, of the lines of a log-lines event, those a consumer
// needs, before their text is unescaped: DecodeFiltered unescapes and keeps
// only those. *llamalog.LineFilter is the fold's (the lines no rule can
// read are counted, not kept).
type LineFilter interface {
	// Keep reports whether the consumer needs a line, given its text as
	// the event's JSON string holds it: the bytes between the quotes,
	// escapes and all. A filter serves one event; Keep is called once per
	// line, in order, from one goroutine.
	Keep(seg []byte) bool
}

var _ LineFilter = (*llamalog.LineFilter)(nil)

// DecodeFiltered is DecodeBytes for a consumer that applies the lines to
// a fold and needs only some of them: a log-lines event keeps in Lines only
// the lines f keeps, and sets Span to the lines it held; the fold counts
// the others as read (Input). The other lines are checked as DecodeBytes
// checks them but not unescaped or kept, so an event is accepted or
// refused alike. An event the one-pass decoder does not take is decoded
// whole (Span nil).
func DecodeFiltered(b []byte, f LineFilter) (Decoded, error) {
	if d, ok := decodeOnePassKeep(b, f); ok {
		return d, nil
	}
	return DecodeBytes(b)
}

// DecodeBytes is Unmarshal followed by Decode.
func DecodeBytes(b []byte) (Decoded, error) {
	if d, ok := decodeOnePass(b); ok {
		return d, nil
	}
	if json.Valid(b) {
		if d, ok := decodeFast(b); ok {
			return d, nil
		}
	}
	ev, err := Unmarshal(b)
	if err != nil {
		return Decoded{}, err
	}
	return Decode(ev)
}

// Wire is what a transport needs to send one event.
type Wire struct {
	Subject string
	ID      string
	Data    []byte // the structured JSON event (Marshal)
}

// ToWire validates ev and returns its subject, id and bytes.
func ToWire(ev event.Event) (Wire, error) {
	subj, err := SubjectOf(ev)
	if err != nil {
		return Wire{}, err
	}
	b, err := Marshal(ev)
	if err != nil {
		return Wire{}, err
	}
	return Wire{Subject: subj, ID: ev.ID(), Data: b}, nil
}

// Decode checks that ev is a gttsplit event of a known type and version and
// returns its typed content. An unknown type or version wraps
// ErrUnknownType; anything malformed or inconsistent (attributes, id,
// payload) wraps ErrInvalid.
func Decode(ev event.Event) (Decoded, error) {
	d, err := checkAttributes(ev)
	if err != nil {
		return Decoded{}, err
	}
	if ev.DataBase64 || len(ev.DataEncoded) == 0 {
		return Decoded{}, fmt.Errorf("%w: %s has no JSON data", ErrInvalid, d.Type)
	}
	var wantID string
	switch d.Type {
	case TypeRunStarted:
		wantID, err = d.decodeStarted(ev.DataEncoded)
	case TypeLogLines:
		var data LogLinesData
		if data, err = decodeLogLinesData(ev.DataEncoded); err == nil {
			wantID, err = d.fromLines(data)
		}
	case TypeFDInfoSample:
		var data FDInfoSampleData
		if err = dataJSON.Unmarshal(ev.DataEncoded, &data); err == nil {
			wantID, err = d.fromSample(data)
		}
	case TypeRunFinished:
		wantID, err = d.decodeFinished(ev.DataEncoded)
	case TypeSplit:
		wantID, err = d.decodeSplit(ev.DataEncoded)
	}
	return d.checkID(wantID, err)
}

// checkAttributes runs every check of Decode that looks only at the
// event's context attributes, and returns the Decoded they give.
func checkAttributes(ev event.Event) (Decoded, error) {
	if err := ev.Validate(); err != nil {
		return Decoded{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	typ := ev.Type()
	if !known(typ) {
		return Decoded{}, unknownType(typ)
	}
	if ev.SpecVersion() != event.CloudEventsVersionV1 {
		return Decoded{}, fmt.Errorf("%w: specversion %q", ErrInvalid, ev.SpecVersion())
	}
	o, err := origin(ev)
	if err != nil {
		return Decoded{}, err
	}
	if got, want := ev.Source(), Source(o.Host); got != want {
		return Decoded{}, fmt.Errorf("%w: source %q, want %q", ErrInvalid, got, want)
	}
	if ev.Subject() != o.RunID {
		return Decoded{}, fmt.Errorf("%w: subject %q is not the run id %q", ErrInvalid, ev.Subject(), o.RunID)
	}
	if mt := ev.DataMediaType(); mt != ContentType {
		return Decoded{}, fmt.Errorf("%w: datacontenttype %q", ErrInvalid, ev.DataContentType())
	}
	return Decoded{Type: typ, ID: ev.ID(), Origin: o, Time: ev.Time()}, nil
}

// checkID finishes a decode: the payload's error, then the id the payload's
// position gives against the event's id.
func (d Decoded) checkID(wantID string, err error) (Decoded, error) {
	if err != nil {
		return Decoded{}, fmt.Errorf("%w: %s %q: %w", ErrInvalid, d.Type, d.ID, err)
	}
	if d.ID != wantID {
		return Decoded{}, fmt.Errorf("%w: %s id %q, want %q", ErrInvalid, d.Type, d.ID, wantID)
	}
	return d, nil
}

// decodeFast is DecodeBytes for the two kinds that make up almost all the
// traffic, log lines and fdinfo samples, in the shape Marshal writes them
// (context attributes, then data): one pass over the bytes instead of the
// SDK's parse followed by a second decode of the data. Anything else (an
// unexpected member, data before type, another type) returns false and
// takes the general path, which gives the same result:
// FuzzDecodeFastMatchesDecode holds it to that.
func decodeFast(b []byte) (Decoded, bool) {
	it := dataJSON.BorrowIterator(b)
	defer dataJSON.ReturnIterator(it)
	var (
		env    envelope
		lines  *LogLinesData
		sample *FDInfoSampleData
		ok     = true
	)
	it.ReadObjectCB(func(it *jsoniter.Iterator, key string) bool {
		if key == "data" {
			switch env.v[attrType] {
			case TypeLogLines:
				if lines != nil {
					ok = false
					return false
				}
				data, err := decodeLogLinesData(it.SkipAndReturnBytes())
				if err != nil {
					ok = false
					return false
				}
				lines = &data
			case TypeFDInfoSample:
				if sample != nil {
					ok = false
					return false
				}
				sample = new(FDInfoSampleData)
				it.ReadVal(sample)
			default:
				ok = false
				return false
			}
			return it.Error == nil
		}
		a := envelopeAttr(key)
		if a < 0 || it.WhatIsNext() != jsoniter.StringValue || env.set&(1<<a) != 0 {
			ok = false
			return false
		}
		env.put(a, it.ReadString())
		return it.Error == nil
	})
	if !ok || it.Error != nil || (lines == nil) == (sample == nil) {
		return Decoded{}, false
	}
	d, ok := env.decoded()
	if !ok {
		return Decoded{}, false
	}
	var (
		wantID string
		err    error
	)
	if lines != nil {
		wantID, err = d.fromLines(*lines)
	} else {
		wantID, err = d.fromSample(*sample)
	}
	d, err = d.checkID(wantID, err)
	return d, err == nil
}

// The context attributes a fast path reads, in envelope.v.
const (
	attrSpecVersion = iota
	attrID
	attrSource
	attrType
	attrSubject
	attrDataContentType
	attrTime
	attrRunID
	attrHost
	attrLane
	numAttrs
)

// envelopeAttr is the index of a context attribute's member name, or -1.
func envelopeAttr(key string) int {
	switch key {
	case "specversion":
		return attrSpecVersion
	case "id":
		return attrID
	case "source":
		return attrSource
	case "type":
		return attrType
	case "subject":
		return attrSubject
	case "datacontenttype":
		return attrDataContentType
	case "time":
		return attrTime
	case AttrRunID:
		return attrRunID
	case AttrHost:
		return attrHost
	case AttrLane:
		return attrLane
	}
	return -1
}

// envelope is the string context attributes a fast path read.
type envelope struct {
	v   [numAttrs]string
	set uint16 // bit a: v[a] was read
}

func (e *envelope) put(a int, v string) {
	e.v[a] = v
	e.set |= 1 << a
}

func (e *envelope) has(a int) bool { return e.set&(1<<a) != 0 }

// decoded builds the event of the attributes and checks them as Decode
// does; the caller adds the data.
func (e *envelope) decoded() (Decoded, bool) {
	if !e.has(attrSpecVersion) || e.v[attrSpecVersion] != event.CloudEventsVersionV1 {
		return Decoded{}, false
	}
	ev := event.New(event.CloudEventsVersionV1)
	ev.SetID(e.v[attrID])
	ev.SetSource(e.v[attrSource])
	ev.SetType(e.v[attrType])
	if e.has(attrSubject) {
		ev.SetSubject(e.v[attrSubject])
	}
	if e.has(attrDataContentType) {
		ev.SetDataContentType(e.v[attrDataContentType])
	}
	if e.has(attrTime) {
		t, err := types.ParseTime(e.v[attrTime])
		if err != nil {
			return Decoded{}, false
		}
		ev.SetTime(t)
	}
	for _, a := range [...]struct {
		i    int
		name string
	}{{attrRunID, AttrRunID}, {attrHost, AttrHost}, {attrLane, AttrLane}} {
		if e.has(a.i) {
			ev.SetExtension(a.name, e.v[a.i])
		}
	}
	d, err := checkAttributes(ev)
	return d, err == nil
}

func known(typ string) bool {
	for _, t := range Types {
		if t == typ {
			return true
		}
	}
	return false
}

// unknownType is the error of an unknown typ: it says whether typ is a
// known type at an unknown version.
func unknownType(typ string) error {
	base, _, ok := cutVersion(typ)
	if ok {
		for _, t := range Types {
			if b, _, _ := cutVersion(t); b == base {
				return &UnknownTypeError{Type: typ, Base: base}
			}
		}
	}
	return &UnknownTypeError{Type: typ}
}

// UnknownTypeError is the error of an event whose type (or version of a
// known type) this package does not know. It wraps ErrUnknownType.
type UnknownTypeError struct {
	Type string // the event's type attribute
	Base string // the known type it is another version of; "" for none
}

func (e *UnknownTypeError) Error() string {
	if e.Base != "" {
		return fmt.Sprintf("%v: unknown version %q of %s", ErrUnknownType, e.Type, e.Base)
	}
	return fmt.Sprintf("%v: %q", ErrUnknownType, e.Type)
}

func (e *UnknownTypeError) Unwrap() error { return ErrUnknownType }

// cutVersion splits "io.gttsplit.log.lines.v1" into its base and "v1".
func cutVersion(typ string) (base, version string, ok bool) {
	i := strings.LastIndexByte(typ, '.')
	if i < 0 || i+2 > len(typ) || typ[i+1] != 'v' {
		return "", "", false
	}
	if _, err := strconv.ParseUint(typ[i+2:], 10, 32); err != nil {
		return "", "", false
	}
	return typ[:i], typ[i+1:], true
}

func origin(ev event.Event) (Origin, error) {
	var o Origin
	var ext map[string]any
	if c, ok := ev.Context.(*event.EventContextV1); ok {
		ext = c.Extensions // read only: no copy
	} else {
		ext = ev.Extensions() // a copy: take it once
	}
	var err error
	if o.RunID, err = extString(ext, AttrRunID); err != nil {
		return Origin{}, err
	}
	if o.Host, err = extString(ext, AttrHost); err != nil {
		return Origin{}, err
	}
	if o.Lane, err = extString(ext, AttrLane); err != nil {
		return Origin{}, err
	}
	if err := checkOrigin(o); err != nil {
		return Origin{}, err
	}
	return o, nil
}

// extString is the extension attribute name of ext as a string.
func extString(ext map[string]any, name string) (string, error) {
	v, ok := ext[name]
	if !ok {
		return "", fmt.Errorf("%w: missing extension attribute %q", ErrInvalid, name)
	}
	s, err := types.ToString(v)
	if err != nil {
		return "", fmt.Errorf("%w: extension attribute %q: %w", ErrInvalid, name, err)
	}
	return s, nil
}

func (d *Decoded) decodeStarted(b []byte) (string, error) {
	var data RunStartedData
	if err := dataJSON.Unmarshal(b, &data); err != nil {
		return "", err
	}
	d.Started = &Started{
		Info: split.RunInfo{
			ID:               d.Origin.RunID,
			Host:             d.Origin.Host,
			Lane:             d.Origin.Lane,
			Command:          data.Command,
			Issue:            data.Issue,
			ControlOf:        data.ControlOf,
			NoLog:            data.NoLog,
			Started:          data.Started,
			SourceCommit:     data.SourceCommit,
			SourceDirty:      data.SourceDirty,
			SourceCommitTime: data.SourceCommitTime,
			CollectorVersion: data.CollectorVersion,
		},
		Detail: StartDetail{
			Args:            data.Args,
			Env:             data.Env,
			EnvAdded:        data.EnvAdded,
			VerboseAppended: data.VerboseAppended,
			SourceDir:       data.SourceDir,
			PID:             data.PID,
		},
	}
	return ID(d.Origin.RunID, posStarted, 0), nil
}

func (d *Decoded) fromLines(data LogLinesData) (string, error) {
	lines := make([]split.Line, len(data.Lines))
	for i, l := range data.Lines {
		lines[i] = split.Line{Text: l.Text, Time: l.T}
	}
	return d.takeLines(data.Stream, data.FirstSeq, lines)
}

// takeLines checks a log-lines event's data, lines holding each line's
// text and time, sets each line's stream and seq and keeps lines as
// d.Lines; it returns the event id the data gives.
func (d *Decoded) takeLines(stream string, firstSeq uint64, lines []split.Line) (string, error) {
	last, err := lineSpan(stream, firstSeq, len(lines))
	if err != nil {
		return "", err
	}
	for i := range lines {
		lines[i].Stream, lines[i].Seq = stream, firstSeq+uint64(i)
	}
	d.Lines = lines
	return LinesID(d.Origin.RunID, stream, firstSeq, last), nil
}

// takeSomeLines is takeLines for the lines a filter kept of n (each with
// its index among them in Seq): the same checks and id, and Span.
func (d *Decoded) takeSomeLines(stream string, firstSeq uint64, lines []split.Line, n int) (string, error) {
	last, err := lineSpan(stream, firstSeq, n)
	if err != nil {
		return "", err
	}
	for i := range lines {
		lines[i].Stream, lines[i].Seq = stream, firstSeq+lines[i].Seq
	}
	d.Lines = lines
	d.Span = &split.LineSpan{Stream: stream, First: firstSeq, Last: last}
	return LinesID(d.Origin.RunID, stream, firstSeq, last), nil
}

// lineSpan checks a batch of n lines of stream from firstSeq and returns
// its last seq.
func lineSpan(stream string, firstSeq uint64, n int) (uint64, error) {
	if err := checkStream(stream); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("no lines")
	}
	last := firstSeq + uint64(n-1)
	if last < firstSeq {
		return 0, fmt.Errorf("seq overflows at first_seq %d", firstSeq)
	}
	return last, nil
}

func (d *Decoded) fromSample(data FDInfoSampleData) (string, error) {
	s := &split.Sample{Seq: data.Seq, Time: data.T}
	for _, p := range data.Procs {
		fds := make([]split.FDInfo, len(p.FDs))
		for j, fd := range p.FDs {
			fds[j] = split.FDInfo{FD: fd.FD, Link: fd.Link, Text: fd.Text}
		}
		s.Procs = append(s.Procs, split.ProcFDs{PID: p.PID, FDs: fds})
	}
	for _, c := range data.Cards {
		s.Cards = append(s.Cards, split.CardGTT{Card: c.Card, UsedBytes: c.GTTUsedBytes, TotalBytes: c.GTTTotalBytes})
	}
	d.Sample = s
	return ID(d.Origin.RunID, posFDInfo, data.Seq), nil
}

func (d *Decoded) decodeFinished(b []byte) (string, error) {
	var data RunFinishedData
	if err := dataJSON.Unmarshal(b, &data); err != nil {
		return "", err
	}
	if data.DurationNS < 0 {
		return "", fmt.Errorf("negative duration_ns %d", data.DurationNS)
	}
	d.Finished = &Finished{
		Info: split.FinishInfo{
			Finished:   data.Finished,
			ExitCode:   data.ExitCode,
			Signal:     data.Signal,
			Incomplete: data.Incomplete,
		},
		Detail: FinishDetail{Duration: time.Duration(data.DurationNS), DroppedEvents: data.DroppedEvents},
	}
	if s := data.Sent; s != nil {
		if err := s.check(); err != nil {
			return "", err
		}
		sent := &split.Sent{Streams: make([]split.StreamSent, len(s.Streams)), Samples: s.Samples, LastSampleSeq: s.LastSampleSeq}
		for i, st := range s.Streams {
			sent.Streams[i] = split.StreamSent{Stream: st.Stream, Lines: st.Lines, LastSeq: st.LastSeq}
		}
		if sm := s.Sampling; sm != nil {
			sent.Sampling = &split.Sampling{Interval: time.Duration(sm.IntervalNS), Triggered: sm.Triggered, LargestGap: time.Duration(sm.LargestGapNS)}
		}
		d.Finished.Info.Sent = sent
	}
	return ID(d.Origin.RunID, posFinished, 0), nil
}

func (d *Decoded) decodeSplit(b []byte) (string, error) {
	var r split.Report
	if err := dataJSON.Unmarshal(b, &r); err != nil {
		return "", err
	}
	if r.Schema != split.Schema {
		return "", fmt.Errorf("report schema %q, want %q", r.Schema, split.Schema)
	}
	if r.Run.ID != d.Origin.RunID || r.Run.Host != d.Origin.Host || r.Run.Lane != d.Origin.Lane {
		return "", fmt.Errorf("report run %q/%q/%q does not match the attributes", r.Run.ID, r.Run.Host, r.Run.Lane)
	}
	prefix := ID(d.Origin.RunID, posSplit, 0)
	prefix = prefix[:len(prefix)-1]
	rest, ok := strings.CutPrefix(d.ID, prefix)
	if !ok {
		return "", fmt.Errorf("id is not %s<n>", prefix)
	}
	n, err := strconv.ParseUint(rest, 10, 31)
	if err != nil {
		return "", fmt.Errorf("id is not %s<n>: %w", prefix, err)
	}
	d.Split, d.SplitN = &r, int(n)
	return ID(d.Origin.RunID, posSplit, n), nil
}
