package split

import (
	"bytes"
	"io"
	"sort"
)

// chunkSize is how much of a log ReadLog searches at once.
const chunkSize = 1 << 18

// ReadLog applies a whole log to the fold, numbering its lines from 1 in
// stream. Only lines that contain one of the parser's anchors are visited:
// each chunk is searched for every anchor (a vectorised substring search)
// and the lines around the hits are handed to AddLineBytes, so the cost per
// irrelevant line is a share of a few memchr-speed passes, with no
// allocation. It returns the number of lines read.
func (f *Fold) ReadLog(r io.Reader, stream string) (uint64, error) {
	f.inTable = false
	buf := make([]byte, chunkSize)
	var (
		carry  int    // bytes of an unfinished line at buf[:carry]
		lineNo uint64 // lines before buf[0]
		starts []int
	)
	for {
		n, err := io.ReadFull(r, buf[carry:])
		end := carry + n
		eof := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !eof {
			return lineNo, err
		}
		chunk := buf[:end]
		if !eof {
			// Only whole lines; keep the tail for the next round.
			cut := bytes.LastIndexByte(chunk, '\n')
			if cut < 0 {
				// A line longer than the buffer: grow it.
				nb := make([]byte, 2*len(buf))
				copy(nb, buf[:end])
				buf, carry = nb, end
				continue
			}
			chunk = chunk[:cut+1]
		}
		starts = f.candidates(chunk, starts[:0])
		pos := 0
		for _, s := range starts {
			lineNo += uint64(bytes.Count(chunk[pos:s], []byte{'\n'}))
			e := bytes.IndexByte(chunk[s:], '\n')
			if e < 0 {
				e = len(chunk) - s
			}
			f.AddLineBytes(stream, lineNo+1, chunk[s:s+e])
			pos = s
		}
		lineNo += uint64(bytes.Count(chunk[pos:], []byte{'\n'}))
		if eof {
			if len(chunk) > 0 && chunk[len(chunk)-1] != '\n' {
				lineNo++ // a last line without a newline
			}
			f.markLines(stream, 1, lineNo)
			return lineNo, nil
		}
		carry = copy(buf, buf[len(chunk):end])
	}
}

// candidates appends the start offsets of the lines of chunk that can be
// relevant (see Parser.Relevant), sorted and without duplicates.
func (f *Fold) candidates(chunk []byte, starts []int) []int {
	// all adds the line of every hit of a; first only the first hit's.
	all := func(a []byte, first bool) {
		for off := 0; ; {
			i := bytes.Index(chunk[off:], a)
			if i < 0 {
				return
			}
			i += off
			starts = append(starts, bytes.LastIndexByte(chunk[:i], '\n')+1)
			e := bytes.IndexByte(chunk[i:], '\n')
			if first || e < 0 {
				return
			}
			off = i + e + 1
		}
	}
	starts = scanAnchorLines(chunk, starts)
	if !f.st.HaveBuild {
		all(aBuild, false)
		all(aVersion, false)
	}
	if !f.st.HaveVerbosity {
		all(aVerbosity, false)
	}
	p := f.p
	if !p.traceNeedsMiB {
		if len(p.traceAnchor) > 0 {
			all(p.traceAnchor, false)
		} else {
			for s := 0; s < len(chunk); {
				e := bytes.IndexByte(chunk[s:], '\n')
				if e < 0 {
					e = len(chunk) - s
				}
				if p.trace.Match(chunk[s : s+e]) {
					starts = append(starts, s)
				}
				s += e + 1
			}
		}
	}
	if f.st.DebugSeq == 0 {
		// One -v marker is all the verdict needs.
		for _, m := range debugMarkers {
			if i := bytes.Index(chunk, m); i >= 0 {
				starts = append(starts, bytes.LastIndexByte(chunk[:i], '\n')+1)
				break
			}
		}
	}
	if len(starts) > 1 {
		sort.Ints(starts)
		out := starts[:1]
		for _, s := range starts[1:] {
			if s != out[len(out)-1] {
				out = append(out, s)
			}
		}
		starts = out
	}
	return f.breakdownRows(chunk, starts)
}

// breakdownRows adds the rows that follow a memory-breakdown header: the
// table's rows carry no anchor of their own. A table cut by the chunk
// boundary goes on in the next chunk (f.inTable).
func (f *Fold) breakdownRows(chunk []byte, starts []int) []int {
	var extra []int
	follow := func(s int) {
		for s < len(chunk) {
			e := bytes.IndexByte(chunk[s:], '\n')
			if e < 0 {
				e = len(chunk) - s
			}
			if !bytes.Contains(chunk[s:s+e], aBreakdown) {
				f.inTable = false
				return
			}
			extra = append(extra, s)
			s += e + 1
		}
		f.inTable = true // the table may go on in the next chunk
	}
	if f.inTable {
		follow(0)
	}
	for _, s := range starts {
		e := bytes.IndexByte(chunk[s:], '\n')
		if e < 0 {
			e = len(chunk) - s
		}
		if line := chunk[s : s+e]; bytes.Contains(line, aBreakdown) && isBreakdownHead(Payload(line, &f.scratch)) {
			follow(s + e + 1)
		}
	}
	if len(extra) == 0 {
		return starts
	}
	starts = append(starts, extra...)
	sort.Ints(starts)
	out := starts[:1]
	for _, s := range starts[1:] {
		if s != out[len(out)-1] {
			out = append(out, s)
		}
	}
	return out
}

// anchorAt is an anchor and the offset in it of its group's byte.
type anchorAt struct {
	a []byte
	k int
}

// anchorGroup is the scan anchors that contain byte c: one IndexByte pass
// over a chunk for c finds every line holding any of them.
type anchorGroup struct {
	c  byte
	as []anchorAt
}

// groupBytes are the bytes the scanner hunts for, in order of preference:
// each scan anchor is searched for by the first of them it contains. They
// are rare in llama.cpp and llama-server output (request and slot lines are
// most of a long server log), so a pass costs little more than a memchr,
// and 7 passes cover the 14 anchors. An anchor holding none of them gets
// a pass of its own, by its first byte.
const groupBytes = "zMu=fbw"

// scanGroups is scanAnchors grouped by groupBytes.
var scanGroups = groupAnchors(scanAnchors, groupBytes)

func groupAnchors(anchors [][]byte, pref string) []anchorGroup {
	var gs []anchorGroup
	for _, a := range anchors {
		// An anchor with none of pref is searched by its first byte.
		c, k := a[0], 0
		for _, p := range []byte(pref) {
			if i := bytes.IndexByte(a, p); i >= 0 {
				c, k = p, i
				break
			}
		}
		i := 0
		for i < len(gs) && gs[i].c != c {
			i++
		}
		if i == len(gs) {
			gs = append(gs, anchorGroup{c: c})
		}
		gs[i].as = append(gs[i].as, anchorAt{a, k})
	}
	return gs
}

// scanAnchorLines appends the start of every line of chunk that contains
// one of scanAnchors (in no particular order, maybe twice). It is the
// same set as searching for each anchor in turn (scanAnchorLinesPlain, a
// fuzz test holds them equal), in one pass per group byte.
func scanAnchorLines(chunk []byte, starts []int) []int {
	for _, g := range scanGroups {
		for off := 0; off < len(chunk); {
			i := bytes.IndexByte(chunk[off:], g.c)
			if i < 0 {
				break
			}
			i += off
			off = i + 1
			for _, x := range g.as {
				s := i - x.k
				// The first and last bytes turn most false hits away
				// before the full compare.
				if s < 0 || s+len(x.a) > len(chunk) || chunk[s] != x.a[0] || chunk[s+len(x.a)-1] != x.a[len(x.a)-1] || !bytes.Equal(chunk[s:s+len(x.a)], x.a) {
					continue
				}
				starts = append(starts, bytes.LastIndexByte(chunk[:s], '\n')+1)
				// The rest of the line is already in.
				if e := bytes.IndexByte(chunk[i:], '\n'); e >= 0 {
					off = i + e + 1
				} else {
					off = len(chunk)
				}
				break
			}
		}
	}
	return starts
}

// scanAnchorLinesPlain is the straightforward search scanAnchorLines
// stands for: every anchor in turn, the line of each hit.
func scanAnchorLinesPlain(chunk []byte, starts []int) []int {
	for _, a := range scanAnchors {
		for off := 0; ; {
			i := bytes.Index(chunk[off:], a)
			if i < 0 {
				break
			}
			i += off
			starts = append(starts, bytes.LastIndexByte(chunk[:i], '\n')+1)
			e := bytes.IndexByte(chunk[i:], '\n')
			if e < 0 {
				break
			}
			off = i + e + 1
		}
	}
	return starts
}
