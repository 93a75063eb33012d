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
// events gttsplit sends, written with the same jsoniter calls in the same
// order into one buffer sized for the data up front, instead of the SDK's
// growing stream and buffer. Other events (another spec version, data that
// is not application/json or is base64) take the SDK's path.
// FuzzMarshalMatchesSDK holds the two to the same bytes.
func marshalJSON(ev event.Event) ([]byte, error) {
	c, ok := ev.Context.(*event.EventContextV1)
	if !ok || ev.DataBase64 || c.DataContentType == nil || *c.DataContentType != event.ApplicationJSON {
		return ev.MarshalJSON()
	}
	s := jsoniter.ConfigFastest.BorrowStream(nil)
	defer jsoniter.ConfigFastest.ReturnStream(s)
	s.SetBuffer(make([]byte, 0, len(ev.DataEncoded)+512))
	s.WriteObjectStart()
	s.WriteObjectField("specversion")
	writeString(s, event.CloudEventsVersionV1)
	s.WriteMore()
	s.WriteObjectField("id")
	writeString(s, c.ID)
	s.WriteMore()
	s.WriteObjectField("source")
	writeString(s, sourceString(&c.Source.URL))
	s.WriteMore()
	s.WriteObjectField("type")
	writeString(s, c.Type)
	if c.Subject != nil {
		s.WriteMore()
		s.WriteObjectField("subject")
		writeString(s, *c.Subject)
	}
	s.WriteMore()
	s.WriteObjectField("datacontenttype")
	writeString(s, *c.DataContentType)
	if c.DataSchema != nil {
		s.WriteMore()
		s.WriteObjectField("dataschema")
		writeString(s, c.DataSchema.String())
	}
	if c.Time != nil {
		s.WriteMore()
		s.WriteObjectField("time")
		// c.Time.String() written in place: RFC 3339 needs no escapes.
		b := append(s.Buffer(), '"')
		b = c.Time.UTC().AppendFormat(b, time.RFC3339Nano)
		s.SetBuffer(append(b, '"'))
	}
	if ev.DataEncoded != nil {
		s.WriteMore()
		s.WriteObjectField("data")
		s.SetBuffer(append(s.Buffer(), ev.DataEncoded...))
	}
	names := make([]string, 0, 8)
	for n := range c.Extensions {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		s.WriteMore()
		s.WriteObjectField(n)
		if v, ok := c.Extensions[n].(string); ok {
			writeString(s, v) // what WriteVal does with a string
		} else {
			s.WriteVal(c.Extensions[n])
		}
	}
	s.WriteObjectEnd()
	if s.Error != nil {
		return ev.MarshalJSON() // the SDK says what is wrong
	}
	b := s.Buffer()
	s.SetBuffer(nil)
	return b, nil
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

// writeString is s.WriteString(v): a string of printable ASCII other than
// '"' and '\\' (ids, sources, types, hosts) is written as it is in one
// append, rather than a byte at a time after each byte's check.
func writeString(s *jsoniter.Stream, v string) {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			s.WriteString(v)
			return
		}
	}
	b := append(s.Buffer(), '"')
	b = append(b, v...)
	s.SetBuffer(append(b, '"'))
}
