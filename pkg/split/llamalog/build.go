package llamalog

import (
	"bytes"
	"regexp"
	"strconv"
)

// readBuild reads a build/version line: the build's number (0 when
// unknown) and its commit.
func readBuild(r Record, s []byte, _ *Scratch) (Record, bool) {
	b, ok := parseBuild(s)
	if !ok {
		return r, false
	}
	r.Kind, r.Int, r.Text = KindBuild, b.number, b.text
	return r, true
}

// readVerbosity reads "verbosity = N".
func readVerbosity(r Record, s []byte, _ *Scratch) (Record, bool) {
	i := bytes.Index(s, aVerbosity)
	v, err := strconv.ParseInt(string(leadingDigits(s[i+len(aVerbosity):])), 10, 64)
	if err != nil {
		return r, false
	}
	r.Kind, r.Int = KindVerbosity, v
	return r, true
}

type buildInfo struct {
	number int64
	text   string
}

var buildRes = []*regexp.Regexp{
	// version: 0.1.2-dev (build 10524, commit 9ee9fc04c)
	regexp.MustCompile(`version: (\S+) \(build (\d+), commit ([0-9a-f]+)\)`),
	// build: 4615 (bfcce4d6) with ... / print_info: build 9890 (74976e1ae) / main: build = 1500 (a30b324) / version: 4615 (bfcce4d6)
	regexp.MustCompile(`(?:^|[\s:])(?:build|version)(?::| =)? (\d+) \(([0-9a-f]+)\)`),
	// build_info: b7000-abc1234 / build      : b7000-abc1234
	regexp.MustCompile(`build(?:_info| +)?: b(\d+)-([0-9a-f]+)`),
	// old server JSON and ik_llama text
	regexp.MustCompile(`"build":(\d+),"commit":"([^"]*)"`),
	regexp.MustCompile(`build=(\d+) commit="([^"]*)"`),
}

// buildNeeds are literals each of buildRes needs in a line it matches: a
// line without them is not tried (most lines holding "build" are paths).
var buildNeeds = [][][]byte{
	{[]byte("version: "), []byte(" (build "), []byte(", commit ")},
	{[]byte(" ("), []byte(")")},
	{[]byte(": b"), []byte("-")},
	{[]byte(`"build":`), []byte(`,"commit":"`)},
	{[]byte("build="), []byte(` commit="`)},
}

func parseBuild(s []byte) (buildInfo, bool) {
next:
	for k, re := range buildRes {
		for _, lit := range buildNeeds[k] {
			if !bytes.Contains(s, lit) {
				continue next
			}
		}
		var m [][]byte
		if k == 1 {
			// The common form, by hand (buildNumber).
			if num, commit, ok := buildNumber(s); ok {
				m = [][]byte{nil, num, commit}
			}
		} else {
			m = re.FindSubmatch(s)
		}
		if m == nil {
			continue
		}
		if k == 0 {
			n, _ := strconv.ParseInt(string(m[2]), 10, 64)
			return buildInfo{n, "b" + string(m[2]) + " (" + string(m[3]) + ", " + string(m[1]) + ")"}, true
		}
		n, _ := strconv.ParseInt(string(m[1]), 10, 64)
		return buildInfo{n, "b" + string(m[1]) + " (" + string(m[2]) + ")"}, true
	}
	return buildInfo{}, false
}

// buildNumber is buildRes[1], `(?:^|[\s:])(?:build|version)(?::| =)?
// (\d+) \(([0-9a-f]+)\)`, by hand: the number and the commit of the
// leftmost match. FuzzParseLeavesMatchPlain holds it to the regexp.
func buildNumber(s []byte) (num, commit []byte, ok bool) {
	for i := 0; i < len(s); i++ {
		var j int
		switch {
		case s[i] == 'b' && bytes.HasPrefix(s[i:], aBuild):
			j = i + len(aBuild)
		case s[i] == 'v' && bytes.HasPrefix(s[i:], []byte("version")):
			j = i + len("version")
		default:
			continue
		}
		// What comes before: the start, a blank (RE2's \s) or a colon.
		if i > 0 {
			switch s[i-1] {
			case ' ', '\t', '\n', '\f', '\r', ':':
			default:
				continue
			}
		}
		// At most one of ":", " =" and nothing can be followed by " N".
		if j < len(s) && s[j] == ':' {
			j++
		} else if j+1 < len(s) && s[j] == ' ' && s[j+1] == '=' {
			j += 2
		}
		if j >= len(s) || s[j] != ' ' {
			continue
		}
		j++
		d := j
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j == d || j+1 >= len(s) || s[j] != ' ' || s[j+1] != '(' {
			continue
		}
		n := s[d:j]
		j += 2
		h := j
		for j < len(s) && (isDigit(s[j]) || s[j] >= 'a' && s[j] <= 'f') {
			j++
		}
		if j == h || j >= len(s) || s[j] != ')' {
			continue
		}
		return n, s[h:j], true
	}
	return nil, nil, false
}
