package events

import (
	"net/url"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	jsoniter "github.com/json-iterator/go"
)

// marshalJSON is ev.MarshalJSON (the SDK's structured encoding) for the
// events gttsplit sends: the same bytes its jsoniter stream writes, in the
// same order, appended to one buffer sized for the data up front (the
// punctuation and the plain strings by hand, any other string and the
// extension values other than strings by jsoniter itself), instead of the
// SDK's growing stream and buffer. Other events (another spec version,
// data that is not application/json or is base64) take the SDK's path.
// FuzzMarshalMatchesSDK holds the two to the same bytes.
func marshalJSON(ev event.Event) ([]byte, error) {
	c, ok := ev.Context.(*event.EventContextV1)
	if !ok || ev.DataBase64 || c.DataContentType == nil || *c.DataContentType != event.ApplicationJSON {
		return ev.MarshalJSON()
	}
	var s *jsoniter.Stream // borrowed for a string or value not written by hand
	defer func() {
		if s != nil {
			jsoniter.ConfigFastest.ReturnStream(s)
		}
	}()
	stream := func(b []byte) *jsoniter.Stream {
		if s == nil {
			s = jsoniter.ConfigFastest.BorrowStream(nil)
		}
		s.SetBuffer(b)
		return s
	}
	str := func(b []byte, v string) []byte {
		if plainString(v) {
			b = append(b, '"')
			b = append(b, v...)
			return append(b, '"')
		}
		w := stream(b)
		w.WriteString(v)
		b = w.Buffer()
		w.SetBuffer(nil)
		return b
	}
	// A field name (constant, plain) and its colon, after a comma unless
	// it is the first: jsoniter's WriteMore and WriteObjectField without
	// indentation.
	field := func(b []byte, name string) []byte {
		b = append(b, ',', '"')
		b = append(b, name...)
		return append(b, '"', ':')
	}
	b := make([]byte, 0, len(ev.DataEncoded)+512)
	b = append(b, `{"specversion":`...)
	b = str(b, event.CloudEventsVersionV1)
	b = str(field(b, "id"), c.ID)
	b = str(field(b, "source"), sourceString(&c.Source.URL))
	b = str(field(b, "type"), c.Type)
	if c.Subject != nil {
		b = str(field(b, "subject"), *c.Subject)
	}
	b = str(field(b, "datacontenttype"), *c.DataContentType)
	if c.DataSchema != nil {
		b = str(field(b, "dataschema"), c.DataSchema.String())
	}
	if c.Time != nil {
		// c.Time.String() written in place: RFC 3339 needs no escapes.
		b = append(field(b, "time"), '"')
		b = c.Time.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	if ev.DataEncoded != nil {
		b = append(field(b, "data"), ev.DataEncoded...)
	}
	var buf [8]string
	names := buf[:0]
	for n := range c.Extensions {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		b = append(b, ',')
		if plainString(n) {
			b = append(append(append(b, '"'), n...), '"', ':')
		} else {
			w := stream(b)
			w.WriteObjectField(n)
			b = w.Buffer()
			w.SetBuffer(nil)
		}
		if v, ok := c.Extensions[n].(string); ok {
			b = str(b, v) // what WriteVal does with a string
		} else {
			w := stream(b)
			w.WriteVal(c.Extensions[n])
			b = w.Buffer()
			w.SetBuffer(nil)
			if w.Error != nil {
				return ev.MarshalJSON() // the SDK says what is wrong
			}
		}
	}
	return append(b, '}'), nil
}

// plainString says whether v is printable ASCII other than '"' and '\\'
// (ids, sources, types, hosts, attribute names): JSON writes it as it is.
func plainString(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// lastSource is the source marshalJSON wrote last and its string: the
// events of a publisher share one source, and url.URL.String builds the
// string anew each time (an allocation an event).
var lastSource atomic.Pointer[sourceText]

type sourceText struct {
	u url.URL
	s string
}

// sourceString is u.String(), the last one remembered.
func sourceString(u *url.URL) string {
	if c := lastSource.Load(); c != nil && c.u == *u {
		return c.s
	}
	s := u.String()
	lastSource.Store(&sourceText{u: *u, s: s})
	return s
}
