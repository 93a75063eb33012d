package split

import "bytes"

// Payload strips the llama.cpp line envelope (docs/formats.md, "The line envelope") from line and
// returns the message. The steps, in order: ANSI CSI sequences anywhere; the
// trailing "\r" (and "\n"); then, repeatedly at the start, router "[port] "
// prefixes (and the legacy "[unix-seconds] " timestamp), runs of progress
// dots, the common_log "M.SS.mmm.uuu L " timestamp/level prefix, and leading
// blanks; finally a "cmn  func: " style tag when a message follows it.
//
// The result aliases line when no ANSI sequence had to be removed and scratch
// (grown as needed) otherwise. Payload never anchors on column 0 of the raw
// line: whatever prefix order a build or a router produced, it is removed.
func Payload(line []byte, scratch *[]byte) []byte {
	if bytes.IndexByte(line, 0x1b) >= 0 {
		*scratch = stripANSI((*scratch)[:0], line)
		line = *scratch
	}
	for len(line) > 0 && (line[len(line)-1] == '\n' || line[len(line)-1] == '\r') {
		line = line[:len(line)-1]
	}
	for {
		n := len(line)
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

// stripANSI appends src to dst without CSI sequences (ESC '[' params final)
// and without lone two-byte ESC sequences.
func stripANSI(dst, src []byte) []byte {
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c != 0x1b {
			dst = append(dst, c)
			continue
		}
		if i+1 < len(src) && src[i+1] == '[' {
			j := i + 2
			for j < len(src) && (src[j] < 0x40 || src[j] > 0x7e) {
				j++
			}
			i = j // skip the final byte too
			continue
		}
		i++ // ESC + one byte
	}
	return dst
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
