package events

import (
	"fmt"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// Batches cuts lines, in capture order, into batches NewLogLines accepts:
// runs of one stream with consecutive Seq values, each of at most maxLines
// lines and about maxBytes of text (0 means no limit; a line longer than
// maxBytes is alone in its batch). The batches share lines' backing array.
func Batches(lines []split.Line, maxLines, maxBytes int) [][]split.Line {
	var out [][]split.Line
	start, size := 0, 0
	for i, l := range lines {
		if i > start {
			prev := lines[i-1]
			if l.Stream != prev.Stream || l.Seq != prev.Seq+1 ||
				(maxLines > 0 && i-start >= maxLines) ||
				(maxBytes > 0 && size+len(l.Text) > maxBytes) {
				out = append(out, lines[start:i:i])
				start, size = i, 0
			}
		}
		size += len(l.Text)
	}
	if start < len(lines) {
		out = append(out, lines[start:len(lines):len(lines)])
	}
	return out
}

// MaxEventBytes bounds the size of every log-lines event LogLinesEvents
// builds, as Marshal encodes it: the NATS default max_payload (1 MiB, the
// least a gttsplit broker must take), less room for the message's headers
// (its Nats-Msg-Id).
const MaxEventBytes = 1<<20 - 16<<10

// batchTextBytes is the text LogLinesEvents puts in one batch before it
// measures the event: a batch of plain text fits at once, one whose escapes
// make it larger is halved.
const batchTextBytes = MaxEventBytes * 3 / 4

// LogLinesEvents builds the log-lines events of lines (in capture order,
// see Batches): each of at most maxLines lines (0: no limit) and at most
// MaxEventBytes encoded. A batch over it is halved until it fits. A line
// that does not fit an event by itself is an error wrapping ErrInvalid:
// the sources cut longer lines into pieces that do (sources.MaxLineBytes).
func LogLinesEvents(o Origin, lines []split.Line, maxLines int) ([]event.Event, error) {
	var out []event.Event
	var err error
	for _, b := range Batches(lines, maxLines, batchTextBytes) {
		if out, err = appendFitting(out, o, b); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// appendFitting appends the events of batch b, halving it until each is
// at most MaxEventBytes.
func appendFitting(out []event.Event, o Origin, b []split.Line) ([]event.Event, error) {
	ev, err := NewLogLines(o, b)
	if err != nil {
		return out, err
	}
	if n := encodedSize(ev); n > MaxEventBytes {
		if len(b) == 1 {
			return out, fmt.Errorf("%w: %s line %d of %d bytes is %d bytes as an event, over %d", ErrInvalid,
				b[0].Stream, b[0].Seq, len(b[0].Text), n, MaxEventBytes)
		}
		half := len(b) / 2
		if out, err = appendFitting(out, o, b[:half]); err != nil {
			return out, err
		}
		return appendFitting(out, o, b[half:])
	}
	return append(out, ev), nil
}

// encodedSize bounds from above what Marshal makes of ev: its data, and its
// attributes each at most six times their length once escaped, with the
// members' names.
func encodedSize(ev event.Event) int {
	attrs := len(ev.ID()) + len(ev.Source()) + len(ev.Type()) + len(ev.Subject()) + len(ev.DataContentType())
	for _, v := range ev.Extensions() {
		if s, ok := v.(string); ok {
			attrs += len(s)
		}
	}
	return len(ev.DataEncoded) + 6*attrs + 512
}
