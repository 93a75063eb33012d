package split

import "encoding/json"

// JSON renders the report as indented JSON (SPEC §5), with a final newline.
func JSON(r Report) ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Markdown renders the report as Markdown (the seed's table, flags, checks,
// provenance and the expected-range note).
func Markdown(r Report) string { return render(r, true) }

// Text renders the report for a terminal.
func Text(r Report) string { return render(r, false) }

func render(r Report, md bool) string {
	_ = md
	b, _ := JSON(r) // replaced by the real renderer in the next commit
	return string(b)
}
