package events

import (
	"bytes"
	"encoding/binary"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gttsplit/gttsplit/pkg/internal/jsonesc"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// decodeOnePass is DecodeBytes for a log-lines or fdinfo-sample event,
// the bulk of the traffic: a single pass over the bytes that checks the
// JSON grammar as it reads the attributes and the data (no validity scan
// first, no reflection). It takes only the plain shape: string attributes,
// the type before the data, the data members of the type (log lines:
// stream, first_seq and lines of text and t, all but t present; samples:
// seq, t, procs of pid and fds of fd, link and text, cards of card,
// gtt_used_bytes and gtt_total_bytes), integers in canonical form, strings
// of valid UTF-8 whose escapes are not surrogates, no duplicate or unknown
// member, no null. Anything else returns false and takes the general path,
// which decides; FuzzDecodeOnePassMatchesDecode holds it to that path.
func decodeOnePass(b []byte) (Decoded, bool) { return decodeOnePassKeep(b, nil) }

// decodeOnePassKeep is decodeOnePass; with keep, a log-lines event keeps
// only the lines whose text keep accepts as the JSON string holds it (see
// DecodeFiltered). The others are checked as much (their time, the
// escapes of their text) but not unescaped or kept.
func decodeOnePassKeep(b []byte, keep LineFilter) (Decoded, bool) {
	p := onePass{b: b, keep: keep}
	var (
		env    envelope
		data   onePassLines
		sample *split.Sample
		haveD  bool
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
			if haveD {
				return Decoded{}, false
			}
			haveD = true
			switch env.v[attrType] {
			case TypeLogLines:
				ok = p.logLines(&data)
			case TypeFDInfoSample:
				sample = new(split.Sample)
				ok = p.sample(sample)
			default:
				ok = false
			}
			if !ok {
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
	var (
		wantID string
		err    error
	)
	if sample != nil {
		d.Sample = sample
		wantID = ID(d.Origin.RunID, posFDInfo, sample.Seq)
	} else if keep != nil {
		wantID, err = d.takeSomeLines(data.stream, data.firstSeq, data.lines, data.n)
	} else {
		wantID, err = d.takeLines(data.stream, data.firstSeq, data.lines)
	}
	d, err = d.checkID(wantID, err)
	return d, err == nil
}

// onePassLines is the data of a log-lines event as the one pass reads it:
// lines hold each line's text and time.
type onePassLines struct {
	stream   string
	firstSeq uint64
	lines    []split.Line
	n        int // the lines read (more than lines when keep dropped some)
}

// onePass reads JSON from b at i.
type onePass struct {
	b   []byte
	i   int
	buf []byte // unescaping
	// keep, if set, picks the lines whose text is kept (see
	// decodeOnePassKeep); skipped says line dropped the last one.
	keep    LineFilter
	skipped bool
	// texts holds the text of every line read so far, one after the
	// other, and ends where each ends: the lines share one string.
	texts *textScratch
}

// textScratch is the texts of one event's lines (or the strings of one
// sample) while they are read.
type textScratch struct {
	b    []byte
	ends []int
	refs []sampleRef // a sample's: where each string goes
}

// getTexts takes a textScratch for p.texts; putTexts gives it back.
func (p *onePass) getTexts() {
	p.texts = textScratches.Get().(*textScratch)
}

func (p *onePass) putTexts() {
	p.texts.b, p.texts.ends, p.texts.refs = p.texts.b[:0], p.texts.ends[:0], p.texts.refs[:0]
	textScratches.Put(p.texts)
	p.texts = nil
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

// lineText reads a line's text onto p.texts; with keep, a text keep does
// not take is only checked (its escapes are those unescape reads) and
// skipped.
func (p *onePass) lineText() bool {
	if p.keep == nil {
		return p.text()
	}
	seg, esc, ok := p.raw()
	if !ok {
		return false
	}
	if !p.keep.Keep(seg) {
		p.skipped = true
		return !esc || validEscapes(seg)
	}
	return p.appendText(seg, esc)
}

// text reads a string onto p.texts.
func (p *onePass) text() bool {
	seg, esc, ok := p.raw()
	if !ok {
		return false
	}
	return p.appendText(seg, esc)
}

// appendText appends a string's bytes, seg, unescaped, to p.texts.
func (p *onePass) appendText(seg []byte, esc bool) bool {
	ok := true
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
		r, n, ok := jsonesc.Decode(seg[i:])
		if !ok || jsonesc.IsSurrogate(r) {
			return out, false // a surrogate: the general path
		}
		out = utf8.AppendRune(out, r)
		seg = seg[i+n:]
	}
	return out, true
}

// validEscapes reports whether unescape reads seg's escapes (it refuses
// the same ones), without writing anything.
func validEscapes(seg []byte) bool {
	for {
		i := bytes.IndexByte(seg, '\\')
		if i < 0 {
			return true
		}
		r, n, ok := jsonesc.Decode(seg[i:])
		if !ok || jsonesc.IsSurrogate(r) {
			return false
		}
		seg = seg[i+n:]
	}
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

// logLines reads the data of a log-lines event into d: stream, first_seq
// and lines, each once (the general path decides about anything else).
func (p *onePass) logLines(d *onePassLines) bool {
	var haveStream, haveSeq, haveLines bool
	if !p.next('{') {
		return false
	}
	for {
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
			if d.lines, d.n, ok = p.lines(); !ok {
				return false
			}
		default:
			return false
		}
		if p.next(',') {
			continue
		}
		return haveStream && haveSeq && haveLines && p.next('}')
	}
}

// lineStart is how Marshal starts a line object; counting it sizes the
// lines at once (an estimate only: the lines may be written otherwise).
var lineStart = []byte(`{"t`)

// lines reads the lines: each one's Text and Time, and how many there
// were. With keep, only the kept lines are returned, each with its index
// among all in Seq.
func (p *onePass) lines() ([]split.Line, int, bool) {
	if !p.next('[') {
		return nil, 0, false
	}
	var out []split.Line
	if p.keep == nil {
		out = make([]split.Line, 0, max(bytes.Count(p.b[p.i:], lineStart), 1))
	}
	if p.next(']') {
		return out, 0, true
	}
	p.getTexts()
	defer p.putTexts()
	n := 0
	for ; ; n++ {
		var l split.Line
		if !p.line(&l) {
			return nil, 0, false
		}
		if !p.skipped {
			l.Seq = uint64(n)
			out = append(out, l)
			p.texts.ends = append(p.texts.ends, len(p.texts.b))
		}
		if p.next(',') {
			continue
		}
		if !p.next(']') {
			return nil, 0, false
		}
		break
	}
	// One string for all the texts, each line's a slice of it.
	all, start := string(p.texts.b), 0
	for i, end := range p.texts.ends {
		out[i].Text, start = all[start:end], end
	}
	return out, n + 1, true
}

// line reads one line object, its text once and its t at most once: its
// t into l, its text onto p.texts (with keep, only when keep takes it:
// skipped says it did not).
func (p *onePass) line(l *split.Line) bool {
	var haveT, haveTxt bool
	p.skipped = false
	if !p.next('{') {
		return false
	}
	for {
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
			if !p.time(&l.Time) {
				return false
			}
		case "text":
			if haveTxt {
				return false
			}
			haveTxt = true
			if !p.lineText() {
				return false
			}
		default:
			return false
		}
		if p.next(',') {
			continue
		}
		return haveTxt && p.next('}')
	}
}

// time reads a time string as time.Time's UnmarshalJSON does.
func (p *onePass) time(t *time.Time) bool {
	p.ws()
	start := p.i
	_, esc, ok := p.raw()
	if !ok || esc {
		return false
	}
	if u, ok := utcTime(p.b[start+1 : p.i-1]); ok {
		*t = u
		return true
	}
	// The general path's parse (time.Time's own) decides.
	return t.UnmarshalJSON(p.b[start:p.i]) == nil
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

// int reads a canonical integer that fits in an int64 of at most 18
// digits (the caller's next delimiter check refuses what follows
// otherwise: a fraction, an exponent, more digits).
func (p *onePass) int() (int64, bool) {
	p.ws()
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	if p.i >= len(p.b) {
		return 0, false
	}
	if p.b[p.i] == '0' {
		p.i++
		return 0, !neg // -0: the general path decides
	}
	var v int64
	n := 0
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' && n < 18 {
		v = v*10 + int64(p.b[p.i]-'0')
		p.i++
		n++
	}
	if neg {
		v = -v
	}
	return v, n > 0
}

// intField reads an integer into an int (refusing what does not fit).
func (p *onePass) intField(dst *int) bool {
	v, ok := p.int()
	*dst = int(v)
	return ok && int64(*dst) == v
}

// sampleRef says where a string read for a sample goes: the link or
// text of fd fd of process proc, or (proc < 0) the name of card fd.
type sampleRef struct {
	proc, fd int32
	text     bool
}

// sharedStr reads a string onto p.texts, bound for ref.
func (p *onePass) sharedStr(ref sampleRef) bool {
	if !p.text() {
		return false
	}
	p.texts.ends = append(p.texts.ends, len(p.texts.b))
	p.texts.refs = append(p.texts.refs, ref)
	return true
}

// object reads a JSON object whose members member reads (after the
// colon); member returns false for a member it does not take.
func (p *onePass) object(member func(key []byte) bool) bool {
	if !p.next('{') {
		return false
	}
	if p.next('}') {
		return true
	}
	for {
		key, ok := p.key()
		if !ok || !p.next(':') || !member(key) {
			return false
		}
		if p.next(',') {
			continue
		}
		return p.next('}')
	}
}

// array reads a JSON array whose elements elem reads.
func (p *onePass) array(elem func() bool) bool {
	if !p.next('[') {
		return false
	}
	if p.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.next(',') {
			continue
		}
		return p.next(']')
	}
}

// sample reads the data of an fdinfo-sample event into s, as the general
// path's decode and fromSample build it: every process's FDs not nil,
// Procs and Cards nil when empty. Its strings share one string.
func (p *onePass) sample(s *split.Sample) bool {
	p.getTexts()
	defer p.putTexts()
	var seen [4]bool // seq, t, procs, cards
	once := func(i int) bool {
		if seen[i] {
			return false
		}
		seen[i] = true
		return true
	}
	ok := p.object(func(key []byte) bool {
		switch string(key) {
		case "seq":
			if !once(0) {
				return false
			}
			var ok bool
			s.Seq, ok = p.uint()
			return ok
		case "t":
			return once(1) && p.time(&s.Time)
		case "procs":
			return once(2) && p.array(func() bool { return p.proc(s) })
		case "cards":
			return once(3) && p.array(func() bool { return p.card(s) })
		}
		return false
	})
	if !ok {
		return false
	}
	all, start := string(p.texts.b), 0
	for i, end := range p.texts.ends {
		v, r := all[start:end], p.texts.refs[i]
		start = end
		switch {
		case r.proc < 0:
			s.Cards[r.fd].Card = v
		case r.text:
			s.Procs[r.proc].FDs[r.fd].Text = v
		default:
			s.Procs[r.proc].FDs[r.fd].Link = v
		}
	}
	return true
}

// proc reads one process of a sample onto s.Procs.
func (p *onePass) proc(s *split.Sample) bool {
	pi := int32(len(s.Procs))
	s.Procs = append(s.Procs, split.ProcFDs{})
	var havePID, haveFDs bool
	ok := p.object(func(key []byte) bool {
		pr := &s.Procs[pi]
		switch string(key) {
		case "pid":
			if havePID {
				return false
			}
			havePID = true
			return p.intField(&pr.PID)
		case "fds":
			if haveFDs {
				return false
			}
			haveFDs = true
			return p.array(func() bool { return p.fd(pr, pi) })
		}
		return false
	})
	if s.Procs[pi].FDs == nil {
		s.Procs[pi].FDs = []split.FDInfo{} // make([]FDInfo, 0), as fromSample
	}
	return ok
}

// fd reads one fd of process pi onto pr.FDs (by hand, not with object:
// the hot loop of a sample, without a closure each).
func (p *onePass) fd(pr *split.ProcFDs, pi int32) bool {
	fi := int32(len(pr.FDs))
	pr.FDs = append(pr.FDs, split.FDInfo{})
	if !p.next('{') {
		return false
	}
	if p.next('}') {
		return true
	}
	var haveFD, haveLink, haveText bool
	for {
		key, ok := p.key()
		if !ok || !p.next(':') {
			return false
		}
		switch string(key) {
		case "fd":
			if haveFD {
				return false
			}
			haveFD = true
			ok = p.intField(&pr.FDs[fi].FD)
		case "link":
			if haveLink {
				return false
			}
			haveLink = true
			ok = p.sharedStr(sampleRef{proc: pi, fd: fi})
		case "text":
			if haveText {
				return false
			}
			haveText = true
			ok = p.sharedStr(sampleRef{proc: pi, fd: fi, text: true})
		default:
			return false
		}
		if !ok {
			return false
		}
		if p.next(',') {
			continue
		}
		return p.next('}')
	}
}

// card reads one card of a sample onto s.Cards.
func (p *onePass) card(s *split.Sample) bool {
	ci := int32(len(s.Cards))
	s.Cards = append(s.Cards, split.CardGTT{})
	var seen [3]bool
	return p.object(func(key []byte) bool {
		c := &s.Cards[ci]
		var i int
		switch string(key) {
		case "card":
			i = 0
		case "gtt_used_bytes":
			i = 1
		case "gtt_total_bytes":
			i = 2
		default:
			return false
		}
		if seen[i] {
			return false
		}
		seen[i] = true
		var ok bool
		switch i {
		case 0:
			return p.sharedStr(sampleRef{proc: -1, fd: ci})
		case 1:
			c.UsedBytes, ok = p.int()
		case 2:
			c.TotalBytes, ok = p.int()
		}
		return ok
	})
}
