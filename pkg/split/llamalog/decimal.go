package llamalog

import "strconv"

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// parseDecimal is strconv.ParseFloat(string(b), 64) without the string:
// for "digits" or "digits.digits" with at most 15 digits (every figure of
// a llama.cpp line) the mantissa and the power of ten are exact, so one
// division gives the correctly rounded value, as ParseFloat's own exact
// path does; anything else goes to ParseFloat. FuzzParseDecimalMatches
// holds the two equal.
func parseDecimal(b []byte) (float64, error) {
	var m uint64
	digits, frac, dot := 0, 0, false
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			m = m*10 + uint64(c-'0')
			digits++
			if dot {
				frac++
			}
		case c == '.' && !dot && digits > 0:
			dot = true
		default:
			return strconv.ParseFloat(string(b), 64)
		}
	}
	if digits == 0 || digits > 15 || dot && frac == 0 {
		return strconv.ParseFloat(string(b), 64)
	}
	return float64(m) / pow10[frac], nil
}
