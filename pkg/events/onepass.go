package events

import (
	"bytes"
	"encoding/binary"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// decodeOnePass is DecodeBytes for a log-lines event, the bulk of the
// traffic: a single pass over the bytes that checks the JSON grammar as it
// reads the attributes and the lines (no validity scan first, no
// reflection). It takes only the plain shape: string attributes, the data
// members stream, first_seq (a canonical integer) and lines (objects of t
// and text), strings of valid UTF-8 whose escapes are not surrogates, no
// duplicate or unknown member, no null. Anything else returns false and
// takes the general path, which decides; FuzzDecodeOnePassMatchesDecode
// holds it to that path.
func decodeOnePass(b []byte) (Decoded, bool) {
	p := onePass{b: b}
	var (
		env   envelope
		data  onePassLines
		haveD bool
	)
	if !p.next('{') {
		return Decoded{}, false
	}
	for first := true; ; first = false {
		if first && p.next('}') {
			break
		}
		key, ok := p.key()
		if !ok || !p.next(':') {
			return Decoded{}, false
		}
		if string(key) == "data" {
			if env.v[attrType] != TypeLogLines || haveD {
				return Decoded{}, false
			}
			haveD = true
			if !p.logLines(&data) {
				return Decoded{}, false
			}
		} else {
			a := envelopeAttr(string(key))
			if a < 0 || env.has(a) {
				return Decoded{}, false
			}
			v, ok := p.str()
			if !ok {
				return Decoded{}, false
			}
			env.put(a, v)
		}
		if p.next(',') {
			continue
		}
		if !p.next('}') {
			return Decoded{}, false
		}
		break
	}
	p.ws()
	if p.i != len(p.b) || !haveD {
		return Decoded{}, false
	}
	d, ok := env.decoded()
	if !ok {
		return Decoded{}, false
	}
	wantID, err := d.takeLines(data.stream, data.firstSeq, data.lines)
	d, err = d.checkID(wantID, err)
	return d, err == nil
}

// onePassLines is the data of a log-lines event as the one pass reads it:
// lines hold each line's text and time.
type onePassLines struct {
	stream   string
	firstSeq uint64
	lines    []split.Line
}

// onePass reads JSON from b at i.
type onePass struct {
	b   []byte
	i   int
	buf []byte // unescaping
	// texts holds the text of every line read so far, one after the
	// other, and ends where each ends: the lines share one string.
	texts *textScratch
}

// textScratch is the texts of one event's lines while they are read.
type textScratch struct {
	b    []byte
	ends []int
}

var textScratches = sync.Pool{New: func() any { return new(textScratch) }}

func (p *onePass) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next consumes c (after white space) if it comes next.
func (p *onePass) next(c byte) bool {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// plain marks the bytes a JSON string holds as they are: not the quote,
// the backslash, a control character or a byte of a multi-byte UTF-8
// sequence.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// plainWord says whether all 8 bytes of w are plain (a SWAR test: a
// byte below 0x20, a quote, a backslash or a high bit sets the byte's
// high bit in the result).
func plainWord(w uint64) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	q := w ^ (ones * '"')
	s := w ^ (ones * '\\')
	return ((w-ones*0x20)|(q-ones)|(s-ones)|w)&highs == 0
}

// raw reads a string and returns its bytes between the quotes, whether
// it has escapes, and ok. Control characters and invalid UTF-8 are not
// taken.
func (p *onePass) raw() (seg []byte, esc, ok bool) {
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false, false
	}
	b := p.b
	start := p.i + 1
	high := false
	for i := start; i < len(b); i++ {
		for i+8 <= len(b) && plainWord(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			seg = b[start:i]
			if high && !utf8.Valid(seg) {
				return nil, false, false
			}
			p.i = i + 1
			return seg, esc, true
		case c == '\\':
			esc = true
			i++ // the escaped byte: checked by unescape
			if i >= len(b) {
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		default: // c >= 0x80
			high = true
		}
	}
	return nil, false, false
}

// key reads a member name without escapes.
func (p *onePass) key() ([]byte, bool) {
	seg, esc, ok := p.raw()
	return seg, ok && !esc
}

// str reads a string value.
func (p *onePass) str() (string, bool) {
	seg, esc, ok := p.raw()
	if !ok {
		return "", false
	}
	if !esc {
		return string(seg), true
	}
	out, ok := unescape(p.buf[:0], seg)
	p.buf = out
	return string(out), ok
}

// text reads a line's text onto p.texts.
func (p *onePass) text() bool {
	seg, esc, ok := p.raw()
	if !ok {
		return false
	}
	if !esc {
		p.texts.b = append(p.texts.b, seg...)
	} else if p.texts.b, ok = unescape(p.texts.b, seg); !ok {
		return false
	}
	return true
}

// unescape appends seg, a string's bytes between the quotes, with its
// escapes replaced, to out. Surrogate escapes are refused (the general
// path decides about them).
func unescape(out, seg []byte) ([]byte, bool) {
	for len(seg) > 0 {
		i := bytes.IndexByte(seg, '\\')
		if i < 0 {
			return append(out, seg...), true
		}
		out = append(out, seg[:i]...)
		if i+1 >= len(seg) {
			return out, false
		}
		switch c := seg[i+1]; c {
		case '"', '\\', '/':
			out = append(out, c)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if i+6 > len(seg) {
				return out, false
			}
			var r rune
			for _, h := range seg[i+2 : i+6] {
				switch {
				case '0' <= h && h <= '9':
					r = r<<4 | rune(h-'0')
				case 'a' <= h && h <= 'f':
					r = r<<4 | rune(h-'a'+10)
				case 'A' <= h && h <= 'F':
					r = r<<4 | rune(h-'A'+10)
				default:
					return out, false
				}
			}
			if 0xD800 <= r && r <= 0xDFFF {
				return out, false // surrogates: the general path
			}
			out = utf8.AppendRune(out, r)
			seg = seg[i+6:]
			continue
		default:
			return out, false
		}
		seg = seg[i+2:]
	}
	return out, true
}

// uint reads a canonical non-negative integer (no sign, fraction,
// exponent or leading zero: the caller's next delimiter check refuses
// what follows otherwise).
func (p *onePass) uint() (uint64, bool) {
	p.ws()
	if p.i >= len(p.b) {
		return 0, false
	}
	if p.b[p.i] == '0' {
		p.i++
		return 0, true
	}
	var v uint64
	n := 0
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' && n < 19 {
		v = v*10 + uint64(p.b[p.i]-'0')
		p.i++
		n++
	}
	return v, n > 0
}

// logLines reads the data of a log-lines event into d.
func (p *onePass) logLines(d *onePassLines) bool {
	var haveStream, haveSeq, haveLines bool
	if !p.next('{') {
		return false
	}
	for first := true; ; first = false {
		if first && p.next('}') {
			return true
		}
		key, ok := p.key()
		if !ok || !p.next(':') {
			return false
		}
		switch string(key) {
		case "stream":
			if haveStream {
				return false
			}
			haveStream = true
			if d.stream, ok = p.str(); !ok {
				return false
			}
		case "first_seq":
			if haveSeq {
				return false
			}
			haveSeq = true
			if d.firstSeq, ok = p.uint(); !ok {
				return false
			}
		case "lines":
			if haveLines {
				return false
			}
			haveLines = true
			if d.lines, ok = p.lines(); !ok {
				return false
			}
		default:
			return false
		}
		if p.next(',') {
			continue
		}
		return p.next('}')
	}
}

// lineStart is how Marshal starts a line object; counting it sizes the
// lines at once (an estimate only: the lines may be written otherwise).
var lineStart = []byte(`{"t`)

// lines reads the lines: each one's Text and Time.
func (p *onePass) lines() ([]split.Line, bool) {
	if !p.next('[') {
		return nil, false
	}
	out := make([]split.Line, 0, max(bytes.Count(p.b[p.i:], lineStart), 1))
	if p.next(']') {
		return out, true
	}
	p.texts = textScratches.Get().(*textScratch)
	defer func() {
		p.texts.b, p.texts.ends = p.texts.b[:0], p.texts.ends[:0]
		textScratches.Put(p.texts)
		p.texts = nil
	}()
	for {
		var l split.Line
		if !p.line(&l) {
			return nil, false
		}
		out = append(out, l)
		p.texts.ends = append(p.texts.ends, len(p.texts.b))
		if p.next(',') {
			continue
		}
		if !p.next(']') {
			return nil, false
		}
		break
	}
	// One string for all the texts, each line's a slice of it.
	all, start := string(p.texts.b), 0
	for i, end := range p.texts.ends {
		out[i].Text, start = all[start:end], end
	}
	return out, true
}

// line reads one line object: its t into l, its text onto p.texts.
func (p *onePass) line(l *split.Line) bool {
	var haveT, haveTxt bool
	if !p.next('{') {
		return false
	}
	for first := true; ; first = false {
		if first && p.next('}') {
			return true
		}
		key, ok := p.key()
		if !ok || !p.next(':') {
			return false
		}
		switch string(key) {
		case "t":
			if haveT {
				return false
			}
			haveT = true
			p.ws()
			start := p.i
			_, esc, ok := p.raw()
			if !ok || esc {
				return false
			}
			if t, ok := utcTime(p.b[start+1 : p.i-1]); ok {
				l.Time = t
			} else if l.Time.UnmarshalJSON(p.b[start:p.i]) != nil {
				// The general path's parse (time.Time's own) refused it.
				return false
			}
		case "text":
			if haveTxt {
				return false
			}
			haveTxt = true
			if !p.text() {
				return false
			}
		default:
			return false
		}
		if p.next(',') {
			continue
		}
		return p.next('}')
	}
}

// utcTime parses the times the collector writes,
// 2006-01-02T15:04:05.999999999Z (1 to 9 digits of fraction, or none),
// as time.Time's UnmarshalJSON does; anything else is not ok (and left to
// it).
func utcTime(b []byte) (time.Time, bool) {
	if len(b) < len("2006-01-02T15:04:05Z") || b[len(b)-1] != 'Z' ||
		b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' {
		return time.Time{}, false
	}
	ok := true
	num := func(s []byte) int {
		n := 0
		for _, c := range s {
			if c < '0' || c > '9' {
				ok = false
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	year, month, day := num(b[0:4]), num(b[5:7]), num(b[8:10])
	hour, minute, sec := num(b[11:13]), num(b[14:16]), num(b[17:19])
	nsec := 0
	if frac := b[19 : len(b)-1]; len(frac) > 0 {
		if len(frac) < 2 || len(frac) > 10 || frac[0] != '.' {
			return time.Time{}, false
		}
		nsec = num(frac[1:])
		for range 10 - len(frac) {
			nsec *= 10
		}
	}
	if !ok || month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
}

// daysIn is the number of days of month in year.
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
