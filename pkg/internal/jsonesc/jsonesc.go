// Package jsonesc reads the escapes of JSON strings, for the code of pkg/
// that reads JSON strings by hand: the one-pass event decoder of
// pkg/events, and pkg/split's line filter, which looks for anchors in a
// line's text before it is unescaped. It lives under pkg/ so that no pkg/
// package imports internal/.
package jsonesc

// Decode reads the escape at the start of seg (seg[0] is the backslash):
// the character it stands for, its length in seg, and whether it is one.
// A \uXXXX escape of a UTF-16 surrogate is returned as the surrogate: the
// caller decides.
func Decode(seg []byte) (r rune, n int, ok bool) {
	if len(seg) < 2 || seg[0] != '\\' {
		return 0, 0, false
	}
	switch c := seg[1]; c {
	case '"', '\\', '/':
		return rune(c), 2, true
	case 'b':
		return '\b', 2, true
	case 'f':
		return '\f', 2, true
	case 'n':
		return '\n', 2, true
	case 'r':
		return '\r', 2, true
	case 't':
		return '\t', 2, true
	case 'u':
		if len(seg) < 6 {
			return 0, 0, false
		}
		for _, h := range seg[2:6] {
			switch {
			case '0' <= h && h <= '9':
				r = r<<4 | rune(h-'0')
			case 'a' <= h && h <= 'f':
				r = r<<4 | rune(h-'a'+10)
			case 'A' <= h && h <= 'F':
				r = r<<4 | rune(h-'A'+10)
			default:
				return 0, 0, false
			}
		}
		return r, 6, true
	}
	return 0, 0, false
}

// IsSurrogate reports whether r is a UTF-16 surrogate.
func IsSurrogate(r rune) bool { return 0xD800 <= r && r <= 0xDFFF }
