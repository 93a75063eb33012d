package commentsink

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxBody is the most characters a comment body may have: GitHub refuses
// bodies of more than 65,536 characters; we stay under that.
const maxBody = 65536 - 1

// marker returns the hidden HTML comment that identifies run id's comment.
// The id is percent-encoded outside a safe set, so no id can end the HTML
// comment early or be mistaken for another id.
func marker(id string) string { return markerOf("run", id) }

// stickyMarker returns the hidden HTML comment that identifies the sticky
// comment of key ("<!-- gttsplit lane=KEY -->").
func stickyMarker(key string) string { return markerOf("lane", key) }

// markerOf is the hidden HTML comment "<!-- gttsplit KIND=ID -->", the id
// percent-encoded outside a safe set.
func markerOf(kind, id string) string {
	var b strings.Builder
	b.WriteString("<!-- gttsplit " + kind + "=")
	for i := 0; i < len(id); i++ {
		c := id[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("-_.:@+=/#", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	b.WriteString(" -->")
	return b.String()
}

// compose joins the marker and the Markdown and, when the result exceeds
// limit characters, cuts the Markdown (at a line end when one is near),
// closes an open code fence and appends a note saying it was truncated.
func compose(mark, md string, limit int) string {
	head := mark + "\n"
	full := head + md
	total := utf8.RuneCountInString(md)
	if utf8.RuneCountInString(full) <= limit {
		return full
	}
	// The note's numbers are at most len("65536") and len(total) digits.
	note := func(shown int) string {
		return fmt.Sprintf("\n\n---\n*gttsplit: report truncated to fit the comment size limit (%d of %d characters shown).*\n", shown, total)
	}
	budget := limit - utf8.RuneCountInString(head) - utf8.RuneCountInString(note(total)) - len("\n```")
	kept := md
	if budget < 0 {
		budget = 0
	}
	// Cut at a rune boundary after budget runes.
	n := 0
	for i := range md {
		if n == budget {
			kept = md[:i]
			break
		}
		n++
	}
	// Prefer ending at a line end, unless that would throw away much.
	if i := strings.LastIndexByte(kept, '\n'); i >= 0 && len(kept)-i < 2048 {
		kept = kept[:i+1]
	}
	fence := ""
	if openFence(kept) {
		fence = "```"
		if !strings.HasSuffix(kept, "\n") {
			fence = "\n```"
		}
	}
	return head + kept + fence + note(utf8.RuneCountInString(kept))
}

// openFence reports whether s ends inside a ``` code block.
func openFence(s string) bool {
	open := false
	for line := range strings.Lines(s) {
		if strings.HasPrefix(strings.TrimLeft(line, " "), "```") {
			open = !open
		}
	}
	return open
}
