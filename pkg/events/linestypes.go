package events

import (
	"fmt"

	jsoniter "github.com/json-iterator/go"
)

// decodeLogLinesData decodes the data of a log-lines event after checking
// that its members have the JSON types docs/events.md gives them: stream a
// string, first_seq a number, lines an array of objects, each with a text
// that is a string and a t, if any, that is a string. A null is none of
// these, and first_seq and each line's text are required. Members the
// contract does not name are not looked at (a later version may add some).
// The one-pass decoder takes only this shape and leaves any other to here.
func decodeLogLinesData(b []byte) (LogLinesData, error) {
	var data LogLinesData
	if err := checkLogLinesTypes(b); err != nil {
		return data, err
	}
	err := dataJSON.Unmarshal(b, &data)
	return data, err
}

// checkLogLinesTypes is decodeLogLinesData's check. A member counts under
// the name it binds to in LogLinesData (ASCII letters of any case, as
// the decoder binds them); a document that is not JSON is left to the
// decoder to refuse.
func checkLogLinesTypes(b []byte) error {
	it := dataJSON.BorrowIterator(b)
	defer dataJSON.ReturnIterator(it)
	if it.WhatIsNext() != jsoniter.ObjectValue {
		return nil // the decoder says what it is
	}
	var (
		err     error
		haveSeq bool
	)
	it.ReadObjectCB(func(it *jsoniter.Iterator, key string) bool {
		switch asciiLower(key) {
		case "stream":
			err = skipTyped(it, jsoniter.StringValue, "stream", "a string")
		case "first_seq":
			haveSeq = true
			err = skipTyped(it, jsoniter.NumberValue, "first_seq", "a number")
		case "lines":
			err = checkLinesTypes(it)
		default:
			it.Skip()
		}
		return err == nil && it.Error == nil
	})
	switch {
	case it.Error != nil:
		return nil
	case err != nil:
		return err
	case !haveSeq:
		return fmt.Errorf("no first_seq")
	}
	return nil
}

// checkLinesTypes checks the lines member: an array of objects, each with
// a string text and maybe a string t.
func checkLinesTypes(it *jsoniter.Iterator) error {
	if it.WhatIsNext() != jsoniter.ArrayValue {
		return fmt.Errorf("lines is %s, not an array", jsonKind(it.WhatIsNext()))
	}
	var err error
	i := 0
	it.ReadArrayCB(func(it *jsoniter.Iterator) bool {
		if it.WhatIsNext() != jsoniter.ObjectValue {
			err = fmt.Errorf("lines[%d] is %s, not an object", i, jsonKind(it.WhatIsNext()))
			return false
		}
		haveText := false
		it.ReadObjectCB(func(it *jsoniter.Iterator, key string) bool {
			switch asciiLower(key) {
			case "text":
				haveText = true
				err = skipTyped(it, jsoniter.StringValue, fmt.Sprintf("lines[%d].text", i), "a string")
			case "t":
				err = skipTyped(it, jsoniter.StringValue, fmt.Sprintf("lines[%d].t", i), "a time string")
			default:
				it.Skip()
			}
			return err == nil && it.Error == nil
		})
		if err == nil && it.Error == nil && !haveText {
			err = fmt.Errorf("lines[%d] has no text", i)
		}
		i++
		return err == nil && it.Error == nil
	})
	return err
}

// skipTyped skips the next value if it is of kind want, else says that
// name is not what.
func skipTyped(it *jsoniter.Iterator, want jsoniter.ValueType, name, what string) error {
	if got := it.WhatIsNext(); got != want {
		return fmt.Errorf("%s is %s, not %s", name, jsonKind(got), what)
	}
	it.Skip()
	return nil
}

// jsonKind names a JSON value's kind.
func jsonKind(t jsoniter.ValueType) string {
	switch t {
	case jsoniter.StringValue:
		return "a string"
	case jsoniter.NumberValue:
		return "a number"
	case jsoniter.NilValue:
		return "null"
	case jsoniter.BoolValue:
		return "a boolean"
	case jsoniter.ArrayValue:
		return "an array"
	case jsoniter.ObjectValue:
		return "an object"
	}
	return "not JSON"
}

// asciiLower is s with its ASCII capitals made small.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
