package split

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SamplesStats counts what ParseSamples could not use.
type SamplesStats struct {
	// SkippedLines are lines outside any fd block, or headers that did not
	// parse; each is skipped and the rest of the file is still read.
	SkippedLines int
}

// ParseSamples parses a samples file (gtt.txt, docs/formats.md): each sample starts
// "# sample t=<RFC3339Nano> pid=<pid>", each fd starts "## fd=<n>" and is
// followed by that fd's fdinfo text verbatim; "## card=<name>
// mem_info_gtt_used=<bytes> mem_info_gtt_total=<bytes>" records the card's
// counters. Consecutive samples with the same t are one tick of a process
// tree. Ticks are numbered from 1 in file order.
func ParseSamples(data []byte) ([]Sample, SamplesStats, error) {
	var (
		out   []Sample
		st    SamplesStats
		cur   *Sample
		proc  *ProcFDs
		fd    *FDInfo
		text  strings.Builder
		inBad bool // inside a sample whose header did not parse
	)
	flushFD := func() {
		if fd != nil {
			fd.Text = text.String()
			proc.FDs = append(proc.FDs, *fd)
			fd = nil
		}
		text.Reset()
	}
	for len(data) > 0 {
		var line []byte
		if nl := bytes.IndexByte(data, '\n'); nl >= 0 {
			line, data = data[:nl+1], data[nl+1:]
		} else {
			line, data = data, nil
		}
		trimmed := bytes.TrimRight(line, "\r\n")
		switch {
		case bytes.HasPrefix(trimmed, []byte("# sample ")):
			flushFD()
			t, pid, err := parseSampleHeader(string(trimmed[len("# sample "):]))
			if err != nil {
				st.SkippedLines++
				inBad, proc = true, nil
				continue
			}
			inBad = false
			if cur == nil || !cur.Time.Equal(t) {
				out = append(out, Sample{Seq: uint64(len(out) + 1), Time: t})
				cur = &out[len(out)-1]
			}
			cur.Procs = append(cur.Procs, ProcFDs{PID: pid})
			proc = &cur.Procs[len(cur.Procs)-1]
		case bytes.HasPrefix(trimmed, []byte("## ")):
			flushFD()
			if inBad || proc == nil {
				st.SkippedLines++
				continue
			}
			h := string(trimmed[3:])
			switch {
			case strings.HasPrefix(h, "fd="):
				n, err := strconv.Atoi(strings.TrimSpace(h[3:]))
				if err != nil || n < 0 {
					st.SkippedLines++
					continue
				}
				fd = &FDInfo{FD: n}
			case strings.HasPrefix(h, "card="):
				c, err := parseCardHeader(h)
				if err != nil {
					st.SkippedLines++
					continue
				}
				cur.Cards = append(cur.Cards, c)
			default:
				st.SkippedLines++
			}
		default:
			if fd != nil {
				text.Write(line)
				continue
			}
			if len(bytes.TrimSpace(trimmed)) == 0 || inBad {
				continue
			}
			st.SkippedLines++
		}
	}
	flushFD()
	if len(out) == 0 && st.SkippedLines > 0 {
		return nil, st, fmt.Errorf("%w: no sample header (\"# sample t=... pid=...\") in %d non-empty lines", ErrParse, st.SkippedLines)
	}
	return out, st, nil
}

func parseSampleHeader(h string) (time.Time, int, error) {
	var t time.Time
	pid := -1
	for _, f := range strings.Fields(h) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			var err error
			if t, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return t, 0, err
			}
			// A zone offset can move a time of year 0 or 9999 out of
			// the range RFC 3339 (and FormatSamples) can write in UTC.
			if y := t.UTC().Year(); y < 1 || y > 9999 {
				return time.Time{}, 0, fmt.Errorf("sample time %q is outside the years 1 to 9999", v)
			}
		case "pid":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return t, 0, fmt.Errorf("bad pid %q", v)
			}
			pid = n
		}
	}
	if t.IsZero() || pid < 0 {
		return t, 0, fmt.Errorf("sample header needs t= and pid=")
	}
	return t, pid, nil
}

func parseCardHeader(h string) (CardGTT, error) {
	var c CardGTT
	for _, f := range strings.Fields(h) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "card":
			c.Card = v
		case "mem_info_gtt_used", "mem_info_gtt_total":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return c, fmt.Errorf("bad %s %q", k, v)
			}
			if k == "mem_info_gtt_used" {
				c.UsedBytes = n
			} else {
				c.TotalBytes = n
			}
		}
	}
	if c.Card == "" {
		return c, fmt.Errorf("card header without a name")
	}
	return c, nil
}

// FormatSamples appends one tick in the gtt.txt format ParseSamples reads.
// An fd text cut off mid-line keeps only its complete lines (ParseFDInfo
// ignores the partial one anyway), so formatting never changes a figure.
func FormatSamples(buf *bytes.Buffer, s Sample) {
	procs := s.Procs
	if len(procs) == 0 && len(s.Cards) > 0 {
		procs = []ProcFDs{{PID: 0}}
	}
	for i, p := range procs {
		fmt.Fprintf(buf, "# sample t=%s pid=%d\n", s.Time.UTC().Format(time.RFC3339Nano), p.PID)
		if i == 0 {
			for _, c := range s.Cards {
				fmt.Fprintf(buf, "## card=%s mem_info_gtt_used=%d mem_info_gtt_total=%d\n", c.Card, c.UsedBytes, c.TotalBytes)
			}
		}
		for _, fd := range p.FDs {
			fmt.Fprintf(buf, "## fd=%d\n", fd.FD)
			t := fd.Text
			if j := strings.LastIndexByte(t, '\n'); j >= 0 {
				buf.WriteString(t[:j+1])
			}
		}
	}
}

// ParseSysfsBytes parses a sysfs counter such as mem_info_gtt_used: a decimal
// byte count and a newline.
func ParseSysfsBytes(b []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
