package events

import (
	"slices"
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
	s.WriteString(event.CloudEventsVersionV1)
	s.WriteMore()
	s.WriteObjectField("id")
	s.WriteString(c.ID)
	s.WriteMore()
	s.WriteObjectField("source")
	s.WriteString(c.Source.String())
	s.WriteMore()
	s.WriteObjectField("type")
	s.WriteString(c.Type)
	if c.Subject != nil {
		s.WriteMore()
		s.WriteObjectField("subject")
		s.WriteString(*c.Subject)
	}
	s.WriteMore()
	s.WriteObjectField("datacontenttype")
	s.WriteString(*c.DataContentType)
	if c.DataSchema != nil {
		s.WriteMore()
		s.WriteObjectField("dataschema")
		s.WriteString(c.DataSchema.String())
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
			s.WriteString(v) // what WriteVal does with a string
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
