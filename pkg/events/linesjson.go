package events

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// appendLogLinesData appends d encoded as marshalData encodes it
// (encoding/json, compact, without HTML escaping), byte for byte, without
// reflection. It reports false for what it does not write itself (a time
// that is not UTC or whose year encoding/json refuses): the caller then
// takes marshalData. FuzzLogLinesDataMatchesMarshal holds the two equal.
func appendLogLinesData(dst []byte, d LogLinesData) ([]byte, bool) {
	dst = append(dst, `{"stream":`...)
	dst = appendJSONString(dst, d.Stream)
	dst = append(dst, `,"first_seq":`...)
	dst = strconv.AppendUint(dst, d.FirstSeq, 10)
	dst = append(dst, `,"lines":`...)
	if d.Lines == nil {
		return append(dst, "null}"...), true
	}
	dst = append(dst, '[')
	for i, l := range d.Lines {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '{')
		if !l.T.IsZero() {
			if l.T.Location() != time.UTC || l.T.Year() < 0 || l.T.Year() > 9999 {
				return dst, false
			}
			dst = append(dst, `"t":"`...)
			dst = l.T.AppendFormat(dst, time.RFC3339Nano)
			dst = append(dst, `",`...)
		}
		dst = append(dst, `"text":`...)
		dst = appendJSONString(dst, l.Text)
		dst = append(dst, '}')
	}
	return append(dst, "]}"...), true
}

// appendJSONString appends s as a JSON string the way encoding/json does
// without HTML escaping: the short escapes, \u00XX for other control
// bytes, \ufffd for each invalid UTF-8 byte, and U+2028 and U+2029
// escaped.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// logLinesSize is a close upper guess of d's encoded size when its text
// needs few escapes.
func logLinesSize(d LogLinesData) int {
	n := 64 + len(d.Stream)
	for _, l := range d.Lines {
		n += len(l.Text) + 56
	}
	return n
}
