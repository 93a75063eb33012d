package llamalog

import "bytes"

// Payload strips the llama.cpp line envelope (docs/formats.md, "The line envelope") from line and
// returns the message. The steps, in order: ANSI CSI sequences anywhere; the
// trailing "\r" (and "\n"); then, repeatedly at the start, a byte order
// mark, router "[port] " prefixes (and the legacy "[unix-seconds] "
// timestamp), runs of progress dots, the common_log "M.SS.mmm.uuu L "
// timestamp/level prefix, and leading blanks; finally a "cmn  func: " style
// tag when a message follows it.
//
// The result aliases line when no ANSI sequence had to be removed, or when
// the only ones are those of llama.cpp's coloured prefix (see
// colouredPrefix), and scratch (grown as needed) otherwise. Payload never anchors on column 0 of the raw
// line: whatever prefix order a build or a router produced, it is removed.
//
// Progress dots before the coloured prefix ("...\x1b[34m0.00.670.828...",
// a line that continues a row of dots) are passed over first: the
// trimming removes leading dots before any other prefix of what follows
// them, so Payload of the line is Payload of the rest.
func Payload(line []byte, scratch *[]byte) []byte {
	d := 0
	for d < len(line) && line[d] == '.' {
		d++
	}
	if rest, ok := colouredPrefix(line[d:]); ok {
		return payloadTail(rest)
	}
	return payloadPlain(line, scratch)
}

// payloadPlain is Payload without the look at llama.cpp's coloured prefix
// (the form FuzzPayloadMatchesPlain holds Payload to).
func payloadPlain(line []byte, scratch *[]byte) []byte {
	if bytes.IndexByte(line, 0x1b) >= 0 {
		*scratch = stripANSI((*scratch)[:0], line)
		line = *scratch
	}
	if hasLostCSI(line) {
		// Colour codes whose ESC byte was lost (a log pasted into an
		// issue tracker): "[0m", "[1;33m".
		if len(*scratch) == 0 || &line[0] != &(*scratch)[0] {
			*scratch = append((*scratch)[:0], line...)
		}
		*scratch = stripLostCSI(*scratch)
		line = *scratch
	}
	return payloadTail(line)
}

// payloadTail is Payload of a line without colour codes: the line end and
// the prefixes, then the tag.
func payloadTail(line []byte) []byte {
	for len(line) > 0 && (line[len(line)-1] == '\n' || line[len(line)-1] == '\r') {
		line = line[:len(line)-1]
	}
	for {
		n := len(line)
		line = trimBOM(line)
		line = trimLeftSpace(line)
		line = trimBracketNumber(line)
		line = trimLegacyPrefix(line)
		line = trimDots(line)
		line = trimTimestamp(line)
		if len(line) == n {
			break
		}
	}
	return trimTag(line)
}

// colouredPrefix reads llama.cpp's coloured prefix where the line lies,
// without copying it: colour codes at the start of the line, or around a
// time stamp and a level ("\x1b[34m0.00.035.322\x1b[0m \x1b[32mI
// \x1b[0m"). A line whose only codes are at its start is the rest without
// them. Otherwise, when the rest of the
// line holds no escape and no colour code without its ESC, Payload of the
// line is payloadTail of that rest: removing the codes would leave "<time
// stamp> <level> <rest>", and the first prefix the trimming removes is
// that time stamp and level, the same as it starts on the rest. Any other
// line (false) takes payloadPlain.
func colouredPrefix(line []byte) ([]byte, bool) {
	if len(line) == 0 || line[0] != 0x1b {
		return nil, false
	}
	i := skipCSI(line, 0)
	if i < 0 {
		return nil, false
	}
	if rest := line[i:]; bytes.IndexByte(rest, 0x1b) < 0 {
		// Codes only before the message ("\x1b[0m" and progress
		// dots, a line that continues a coloured one).
		return rest, !hasLostCSI(rest)
	}
	if rest, ok := plainStampPrefix(line, i); ok {
		return rest, true
	}
	var pre [24]byte // the prefix without its codes
	n := 0
	for {
		if i >= len(line) || n == len(pre) {
			return nil, false
		}
		c := line[i]
		if c == 0x1b {
			if i = skipCSI(line, i); i < 0 {
				return nil, false
			}
			continue
		}
		pre[n] = c
		n++
		i++
		if c == ' ' && n > 1 && len(trimTimestamp(pre[:n])) == 0 {
			break // "<time stamp> <level> "
		}
	}
	if i = skipCSI(line, i); i < 0 {
		return nil, false
	}
	rest := line[i:]
	if bytes.IndexByte(rest, 0x1b) >= 0 || hasLostCSI(rest) {
		return nil, false
	}
	return rest, true
}

// plainStampPrefix is the common case of colouredPrefix's look at a time
// stamp and level starting at line[i] (after codes): the time stamp in one
// run ("0.00.035.322", at most 10 digits before its first dot, as the
// prefix colouredPrefix collects holds 24 bytes), codes, a blank, codes,
// the level and a blank, codes, and the rest without escapes or colour
// codes: the same rest colouredPrefix would find byte by byte. false:
// not this form (colouredPrefix looks byte by byte).
func plainStampPrefix(line []byte, i int) ([]byte, bool) {
	j := i
	for j < len(line) && isDigit(line[j]) {
		j++
	}
	if j == i || j-i > 10 {
		return nil, false
	}
	for _, n := range [...]int{2, 3, 3} {
		if j+n >= len(line) || line[j] != '.' {
			return nil, false
		}
		j++
		for k := 0; k < n; k++ {
			if !isDigit(line[j]) {
				return nil, false
			}
			j++
		}
	}
	if j = skipCSI(line, j); j < 0 || j >= len(line) || line[j] != ' ' {
		return nil, false
	}
	if j = skipCSI(line, j+1); j < 0 || j+1 >= len(line) || line[j+1] != ' ' {
		return nil, false
	}
	switch line[j] {
	case 'I', 'W', 'E', 'D':
	default:
		return nil, false
	}
	if j = skipCSI(line, j+2); j < 0 {
		return nil, false
	}
	rest := line[j:]
	if bytes.IndexByte(rest, 0x1b) >= 0 || hasLostCSI(rest) {
		return nil, false
	}
	return rest, true
}

// skipCSI returns the index of the first byte at or after i that starts no
// CSI sequence (ESC '[' params final), or -1 when a sequence is not
// finished within the line or an ESC starts some other sequence.
func skipCSI(line []byte, i int) int {
	for i < len(line) && line[i] == 0x1b {
		if i+1 >= len(line) || line[i+1] != '[' {
			return -1
		}
		j := i + 2
		for j < len(line) && (line[j] < 0x40 || line[j] > 0x7e) {
			j++
		}
		if j >= len(line) {
			return -1
		}
		i = j + 1
	}
	return i
}

// stripANSI appends src to dst without CSI sequences (ESC '[' params final)
// and without lone two-byte ESC sequences. The text between escapes is
// copied a run at a time (stripANSIPlain, byte by byte, is the form
// FuzzStripANSIMatchesPlain holds it to).
func stripANSI(dst, src []byte) []byte {
	for {
		e := bytes.IndexByte(src, 0x1b)
		if e < 0 {
			return append(dst, src...)
		}
		dst = append(dst, src[:e]...)
		i := e
		if i+1 < len(src) && src[i+1] == '[' {
			j := i + 2
			for j < len(src) && (src[j] < 0x40 || src[j] > 0x7e) {
				j++
			}
			i = j // the final byte
		} else {
			i++ // ESC + one byte
		}
		if i+1 >= len(src) {
			return dst
		}
		src = src[i+1:]
	}
}

// lostCSILen returns the length of a colour code without its ESC byte at
// the start of b ("[0m", "[34m", "[1;33m"), or 0.
func lostCSILen(b []byte) int {
	if len(b) < 3 || b[0] != '[' {
		return 0
	}
	i := 1
	for i < len(b) && i < 12 && (isDigit(b[i]) || b[i] == ';') {
		i++
	}
	if i == 1 || i >= len(b) || b[i] != 'm' {
		return 0
	}
	return i + 1
}

func hasLostCSI(b []byte) bool {
	for off := 0; ; {
		i := bytes.IndexByte(b[off:], '[')
		if i < 0 {
			return false
		}
		if lostCSILen(b[off+i:]) > 0 {
			return true
		}
		off += i + 1
	}
}

// stripLostCSI removes every lost-ESC colour code from b, in place.
func stripLostCSI(b []byte) []byte {
	out := b[:0]
	for i := 0; i < len(b); {
		if n := lostCSILen(b[i:]); n > 0 {
			i += n
			continue
		}
		out = append(out, b[i])
		i++
	}
	return out
}

// RouterPort returns the port of a llama-server router's "[port] " prefix
// at the start of a raw line (after colour codes and blanks), or 0. A
// bracketed number of more than 5 digits is the legacy unix-seconds time
// stamp, not a port.
//
// A log kept by a supervisor has the supervisor's prefix in front of the
// router's: journald's "Mar 12 07:01:05 host llama-server[4337]: ",
// docker compose's "llama-server-1  | ", kubectl's "[pod/name/container] ",
// a container runtime's time stamp.
// So a "[port] " within the line's first wrapperSpan bytes counts too when
// it follows a blank and what precedes it is such a prefix (isWrapper); a
// "[port]" after a function name is not a router's.
func RouterPort(line []byte) int {
	i := skipColour(line, 0)
	switch {
	case i >= len(line):
		return 0
	case line[i] == '[':
		if p := portAt(line, i); p > 0 {
			return p
		}
		// kubectl's "[pod/name/container] " prefix, or the legacy time
		// stamp.
	case line[i] == '.' || isDigit(line[i]) && i+1 < len(line) && line[i+1] == '.':
		return 0 // llama.cpp's own time stamp or progress dots: no prefix before them
	}
	return wrappedPort(line, i)
}

// wrappedPort is RouterPort behind a supervisor's prefix starting at
// line[i].
func wrappedPort(line []byte, i int) int {
	// A ']' is rare in a line where no port is, and no colour code holds
	// one: look for it rather than for each '['.
	end := min(len(line), wrapperSpan)
	for m := i; m < end; m++ {
		n := bytes.IndexByte(line[m:end], ']')
		if n < 0 {
			return 0
		}
		m += n
		if m < i+2 {
			continue // no "[d" before it
		}
		k := m - 1
		for k > i && isDigit(line[k]) {
			k--
		}
		for k > i && line[k] == ' ' {
			k--
		}
		if line[k] != '[' {
			continue
		}
		// The prefix ends at a blank, and only blanks and colour codes
		// (a reset can start a line) lie between it and the port: the
		// first such blank.
		pre := -1
		for w := k - 1; w > i; w-- {
			if (line[w] == ' ' || line[w] == '\t') && skipColour(line, w) == k {
				pre = w
			}
		}
		if pre > 0 && isWrapper(bytes.TrimRight(line[i:pre], " \t")) {
			return portAt(line, k)
		}
	}
	return 0
}

// wrapperSpan is how far into a line a supervisor's prefix can reach.
const wrapperSpan = 128

// skipColour returns the index of the first byte at or after i that is not
// a blank or part of a colour code.
func skipColour(line []byte, i int) int {
	for i < len(line) {
		switch {
		case line[i] == ' ' || line[i] == '\t':
			i++
			continue
		case line[i] == 0x1b && i+1 < len(line) && line[i+1] == '[':
			j := i + 2
			for j < len(line) && (line[j] < 0x40 || line[j] > 0x7e) {
				j++
			}
			i = j + 1
			continue
		case lostCSILen(line[i:]) > 0:
			i += lostCSILen(line[i:])
			continue
		}
		break
	}
	return i
}

// portAt returns the port of a "[port] " at line[i:], or 0.
func portAt(line []byte, i int) int {
	if i >= len(line) || line[i] != '[' {
		return 0
	}
	i++
	for i < len(line) && line[i] == ' ' {
		i++
	}
	p, d := 0, 0
	for i < len(line) && isDigit(line[i]) && d < 6 {
		p = p*10 + int(line[i]-'0')
		i++
		d++
	}
	if d == 0 || d > 5 || i+1 >= len(line) || line[i] != ']' || line[i+1] != ' ' {
		return 0
	}
	return p
}

// isWrapper reports whether pre (blanks after it trimmed) is a
// supervisor's prefix: docker compose's "name  |", syslog's and journald's
// "Mar 12 07:01:05 host ident[pid]:" (a time of day, then a colon at the
// end), or one word that is not a function name (a time stamp, kubectl's
// "[pod/name/container]").
func isWrapper(pre []byte) bool {
	switch {
	case len(pre) == 0:
		return false
	case pre[len(pre)-1] == '|':
		return true
	case pre[len(pre)-1] == ':':
		return hasTimeOfDay(pre)
	}
	return bytes.IndexByte(pre, ' ') < 0
}

// hasTimeOfDay reports whether b holds "hh:mm:ss" between blanks.
func hasTimeOfDay(b []byte) bool {
	for j := 0; j+8 <= len(b); j++ {
		w := b[j : j+8]
		if (j == 0 || b[j-1] == ' ') && (j+8 == len(b) || b[j+8] == ' ') &&
			w[2] == ':' && w[5] == ':' && isDigit(w[0]) && isDigit(w[1]) && isDigit(w[3]) && isDigit(w[4]) && isDigit(w[6]) && isDigit(w[7]) {
			return true
		}
	}
	return false
}

// trimBOM removes a byte order mark (U+FEFF), which an editor or a
// Windows shell that saved the log may have put in front of its first line.
func trimBOM(b []byte) []byte {
	if len(b) >= 3 && b[0] == 0xef && b[1] == 0xbb && b[2] == 0xbf {
		return b[3:]
	}
	return b
}

func trimLeftSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// trimBracketNumber removes "[  123] " (router child port, or the legacy
// unix-seconds timestamp).
func trimBracketNumber(b []byte) []byte {
	if len(b) < 4 || b[0] != '[' {
		return b
	}
	i := 1
	for i < len(b) && b[i] == ' ' {
		i++
	}
	d := i
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	if i == d || i+1 >= len(b) || b[i] != ']' || b[i+1] != ' ' {
		return b
	}
	return b[i+2:]
}

// trimLegacyPrefix removes the ≤ b3760 log file's "[%24s:%5d][%24s] "
// file/line/function prefix ("[   llama.cpp: 1234][ llm_load_tensors] ").
func trimLegacyPrefix(b []byte) []byte {
	if len(b) < 8 || b[0] != '[' {
		return b
	}
	i := bytes.IndexByte(b, ']')
	if i < 0 || i+1 >= len(b) || b[i+1] != '[' {
		return b
	}
	first := b[1:i]
	c := bytes.LastIndexByte(first, ':')
	if c < 0 || len(bytes.TrimSpace(first[c+1:])) == 0 {
		return b
	}
	for _, d := range bytes.TrimSpace(first[c+1:]) {
		if !isDigit(d) {
			return b
		}
	}
	j := bytes.IndexByte(b[i+1:], ']')
	if j < 0 {
		return b
	}
	rest := b[i+1+j+1:]
	if len(rest) == 0 || rest[0] != ' ' {
		return b
	}
	return rest[1:]
}

func trimDots(b []byte) []byte {
	i := 0
	for i < len(b) && b[i] == '.' {
		i++
	}
	return b[i:]
}

// trimTimestamp removes "M.SS.mmm.uuu L " where M has one or more digits and
// L is one of I W E D.
func trimTimestamp(b []byte) []byte {
	i := 0
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	if i == 0 {
		return b
	}
	for _, n := range [...]int{2, 3, 3} {
		if i >= len(b) || b[i] != '.' {
			return b
		}
		i++
		for k := 0; k < n; k++ {
			if i >= len(b) || !isDigit(b[i]) {
				return b
			}
			i++
		}
	}
	if i+2 > len(b) || b[i] != ' ' {
		return b
	}
	switch b[i+1] {
	case 'I', 'W', 'E', 'D':
	default:
		return b
	}
	if i+2 == len(b) {
		return b[i+2:]
	}
	if b[i+2] != ' ' {
		return b
	}
	return b[i+3:]
}

// trimTag removes the common-library and server tags ("cmn  common_param: ",
// "srv    load_model: ", "slot ...", "que ...") when a message follows.
func trimTag(b []byte) []byte {
	if len(b) < 5 {
		return b
	}
	switch b[0] {
	case 'c', 's', 'q': // most messages start with none of them
		return trimKnownTag(b)
	}
	return b
}

// trimKnownTag is trimTag without the look at the first byte (the plain
// form FuzzEnvelopeStepsMatchPlain holds trimTag to).
func trimKnownTag(b []byte) []byte {
	var n int
	switch {
	case bytes.HasPrefix(b, []byte("cmn ")), bytes.HasPrefix(b, []byte("srv ")), bytes.HasPrefix(b, []byte("que ")):
		n = 3
	case bytes.HasPrefix(b, []byte("slot ")):
		n = 4
	default:
		return b
	}
	rest := trimLeftSpace(b[n:])
	i := bytes.Index(rest, []byte(": "))
	if i <= 0 || i > 16 || bytes.IndexByte(rest[:i], ' ') >= 0 {
		return b
	}
	if len(rest) == i+2 {
		return b
	}
	return rest[i+2:]
}
