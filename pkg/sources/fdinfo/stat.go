package fdinfo

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// errStat is returned for a stat line that cannot be parsed.
var errStat = errors.New("malformed stat")

// procStat holds the fields of /proc/<pid>/stat the sampler uses.
type procStat struct {
	state byte   // field 3
	ppid  int    // field 4
	start uint64 // field 22, clock ticks after boot
}

// parseStat reads a /proc/<pid>/stat line. The command name (field 2) is in
// parentheses and may itself contain spaces and parentheses, so the fields
// are counted from the last ')'.
func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("%w: no command name", errStat)
	}
	var st procStat
	rest := b[i+1:]
	for field := 3; field <= 22; field++ {
		// Skip the separator, then take one field.
		for len(rest) > 0 && rest[0] == ' ' {
			rest = rest[1:]
		}
		j := bytes.IndexAny(rest, " \n")
		if j < 0 {
			j = len(rest)
		}
		v := rest[:j]
		rest = rest[j:]
		if len(v) == 0 {
			return procStat{}, fmt.Errorf("%w: %d fields", errStat, field-1)
		}
		var err error
		switch field {
		case 3:
			st.state = v[0]
		case 4:
			st.ppid, err = atoi(v)
		case 22:
			st.start, err = strconv.ParseUint(string(v), 10, 64)
		}
		if err != nil {
			return procStat{}, fmt.Errorf("%w: field %d: %w", errStat, field, err)
		}
	}
	return st, nil
}

// atoi parses a non-negative decimal without allocating.
func atoi(b []byte) (int, error) {
	if len(b) == 0 || len(b) > 18 {
		return 0, fmt.Errorf("%w: number %q", errStat, b)
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: number %q", errStat, b)
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}

// dead reports whether a stat state means the process is over.
func (s procStat) dead() bool { return s.state == 'Z' || s.state == 'X' || s.state == 'x' }
