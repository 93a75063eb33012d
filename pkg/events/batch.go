package events

import "github.com/gttsplit/gttsplit/pkg/split"

// Batches cuts lines, in capture order, into batches NewLogLines accepts:
// runs of one stream with consecutive Seq values, each of at most maxLines
// lines and about maxBytes of text (0 means no limit; a line longer than
// maxBytes is alone in its batch). The batches share lines' backing array.
func Batches(lines []split.Line, maxLines, maxBytes int) [][]split.Line {
	var out [][]split.Line
	start, size := 0, 0
	for i, l := range lines {
		if i > start {
			prev := lines[i-1]
			if l.Stream != prev.Stream || l.Seq != prev.Seq+1 ||
				(maxLines > 0 && i-start >= maxLines) ||
				(maxBytes > 0 && size+len(l.Text) > maxBytes) {
				out = append(out, lines[start:i:i])
				start, size = i, 0
			}
		}
		size += len(l.Text)
	}
	if start < len(lines) {
		out = append(out, lines[start:len(lines):len(lines)])
	}
	return out
}
