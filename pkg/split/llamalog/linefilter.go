package llamalog

import (
	"bytes"

	"github.com/gttsplit/gttsplit/pkg/internal/jsonesc"
)

// LineFilter picks, from the lines of one log batch, those that may be
// relevant to a fold, from each line's text as a JSON string holds it (the
// bytes between the string's quotes, escapes and all), so that a decoder
// need not unescape the others: Keep false means that a fold given that
// line would only count it (split.Fold.MarkLines counts it), as long as the
// fold no longer looks for a -v marker (split.Fold.WantsDebug false). A
// line that may be
// one is not kept either, but SkippedMarker says so: a fold that still
// looks for one must take the batch whole. Use a new LineFilter for each
// batch.
//
// Every anchor is plain ASCII that JSON never has to escape, so an anchor
// in the text is in the JSON string too, unless an escape stands for one
// of its bytes (an encoder may write any character as \uXXXX): such a line
// is kept. A custom trace pattern can match anything: with one, every line
// is kept.
type LineFilter struct {
	p      *Parser
	marker bool // a line that may be a -v marker was not kept
	buf    []byte
}

// NewLineFilter returns a filter for one batch of lines.
func (p *Parser) NewLineFilter() *LineFilter { return &LineFilter{p: p} }

// Keep reports whether a line of the batch, whose text the JSON string seg
// holds, may be relevant (but for -v markers). With the default trace,
// Relevant is a search for anchors, which the JSON string holds as the text
// does.
func (lf *LineFilter) Keep(seg []byte) bool {
	p := lf.p
	if !p.traceNeedsMiB || escapesAnchorByte(seg) || p.Relevant(seg, false) {
		return true
	}
	if !lf.marker && p.Relevant(seg, true) {
		// Perhaps a -v marker. The pattern may have been made up by
		// the escapes' own characters ("\u001bbackend"): look again
		// with each escape as one byte that is in no anchor.
		lf.buf = lf.buf[:0]
		for {
			i := bytes.IndexByte(seg, '\\')
			if i < 0 {
				lf.buf = append(lf.buf, seg...)
				break
			}
			lf.buf = append(append(lf.buf, seg[:i]...), 0)
			_, n, _ := jsonesc.Decode(seg[i:]) // escapesAnchorByte read every escape
			seg = seg[i+n:]
		}
		lf.marker = p.Relevant(lf.buf, true)
	}
	return false
}

// SkippedMarker reports whether a line Keep did not keep may be a -v
// marker.
func (lf *LineFilter) SkippedMarker() bool { return lf.marker }

// anchorBytes marks the bytes of every anchor and -v marker.
var anchorBytes = func() (t [256]bool) {
	for _, set := range [][][]byte{pieceAnchors, debugMarkers} {
		for _, a := range set {
			for _, c := range a {
				t[c] = true
			}
		}
	}
	return t
}()

// escapesAnchorByte reports whether an escape in seg stands for a byte of
// an anchor (or is not one that can be read).
func escapesAnchorByte(seg []byte) bool {
	for {
		i := bytes.IndexByte(seg, '\\')
		if i < 0 {
			return false
		}
		c, n, ok := jsonesc.Decode(seg[i:])
		if !ok || c < 0x80 && anchorBytes[c] {
			return true
		}
		seg = seg[i+n:]
	}
}
