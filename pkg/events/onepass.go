package events

import (
	"time"
	"unicode/utf8"
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
	attrs := make(map[string]string, 10)
	var (
		lines              *LogLinesData
		typ, spec, tm      string
		haveSpec, haveTime bool
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
		switch string(key) {
		case "data":
			if typ != TypeLogLines || lines != nil {
				return Decoded{}, false
			}
			if lines, ok = p.logLines(); !ok {
				return Decoded{}, false
			}
		case "specversion", "id", "source", "type", "subject", "datacontenttype", "time", AttrRunID, AttrHost, AttrLane:
			k := string(key)
			if _, dup := attrs[k]; dup {
				return Decoded{}, false
			}
			v, ok := p.str()
			if !ok {
				return Decoded{}, false
			}
			attrs[k] = v
			switch k {
			case "type":
				typ = v
			case "specversion":
				spec, haveSpec = v, true
			case "time":
				tm, haveTime = v, true
			}
		default:
			return Decoded{}, false
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
	if p.i != len(p.b) || lines == nil {
		return Decoded{}, false
	}
	return finishFast(attrs, lines, nil, haveSpec, spec, haveTime, tm)
}

// onePass reads JSON from b at i.
type onePass struct {
	b   []byte
	i   int
	buf []byte // unescaping
}

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

// raw reads a string and returns its bytes between the quotes, whether
// it has escapes, and ok. Control characters and invalid UTF-8 are not
// taken.
func (p *onePass) raw() (seg []byte, esc, ok bool) {
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false, false
	}
	start := p.i + 1
	high := false
	for i := start; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			seg = p.b[start:i]
			if high && !utf8.Valid(seg) {
				return nil, false, false
			}
			p.i = i + 1
			return seg, esc, true
		case c == '\\':
			esc = true
			i++ // the escaped byte: checked by unescape
			if i >= len(p.b) {
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		case c >= 0x80:
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
	return p.unescape(seg)
}

func (p *onePass) unescape(seg []byte) (string, bool) {
	out := p.buf[:0]
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		switch seg[i] {
		case '"', '\\', '/':
			out = append(out, seg[i])
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
			if i+4 >= len(seg) {
				return "", false
			}
			var r rune
			for _, h := range seg[i+1 : i+5] {
				switch {
				case '0' <= h && h <= '9':
					r = r<<4 | rune(h-'0')
				case 'a' <= h && h <= 'f':
					r = r<<4 | rune(h-'a'+10)
				case 'A' <= h && h <= 'F':
					r = r<<4 | rune(h-'A'+10)
				default:
					return "", false
				}
			}
			if 0xD800 <= r && r <= 0xDFFF {
				return "", false // surrogates: the general path
			}
			out = utf8.AppendRune(out, r)
			i += 4
		default:
			return "", false
		}
	}
	p.buf = out
	return string(out), true
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

// logLines reads the data of a log-lines event.
func (p *onePass) logLines() (*LogLinesData, bool) {
	d := new(LogLinesData)
	var haveStream, haveSeq, haveLines bool
	if !p.next('{') {
		return nil, false
	}
	for first := true; ; first = false {
		if first && p.next('}') {
			return d, true
		}
		key, ok := p.key()
		if !ok || !p.next(':') {
			return nil, false
		}
		switch string(key) {
		case "stream":
			if haveStream {
				return nil, false
			}
			haveStream = true
			if d.Stream, ok = p.str(); !ok {
				return nil, false
			}
		case "first_seq":
			if haveSeq {
				return nil, false
			}
			haveSeq = true
			if d.FirstSeq, ok = p.uint(); !ok {
				return nil, false
			}
		case "lines":
			if haveLines {
				return nil, false
			}
			haveLines = true
			if d.Lines, ok = p.lines(); !ok {
				return nil, false
			}
		default:
			return nil, false
		}
		if p.next(',') {
			continue
		}
		if !p.next('}') {
			return nil, false
		}
		return d, true
	}
}

func (p *onePass) lines() ([]LineData, bool) {
	if !p.next('[') {
		return nil, false
	}
	out := make([]LineData, 0, 16)
	if p.next(']') {
		return out, true
	}
	for {
		l, ok := p.line()
		if !ok {
			return nil, false
		}
		out = append(out, l)
		if p.next(',') {
			continue
		}
		if !p.next(']') {
			return nil, false
		}
		return out, true
	}
}

func (p *onePass) line() (LineData, bool) {
	var (
		l              LineData
		haveT, haveTxt bool
	)
	if !p.next('{') {
		return l, false
	}
	for first := true; ; first = false {
		if first && p.next('}') {
			return l, true
		}
		key, ok := p.key()
		if !ok || !p.next(':') {
			return l, false
		}
		switch string(key) {
		case "t":
			if haveT {
				return l, false
			}
			haveT = true
			p.ws()
			start := p.i
			_, esc, ok := p.raw()
			if !ok || esc {
				return l, false
			}
			// The same parse as the general path's (time.Time's own).
			var t time.Time
			if t.UnmarshalJSON(p.b[start:p.i]) != nil {
				return l, false
			}
			l.T = t
		case "text":
			if haveTxt {
				return l, false
			}
			haveTxt = true
			if l.Text, ok = p.str(); !ok {
				return l, false
			}
		default:
			return l, false
		}
		if p.next(',') {
			continue
		}
		if !p.next('}') {
			return l, false
		}
		return l, true
	}
}
