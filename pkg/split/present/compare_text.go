package present

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// CompareJSON renders a comparison as indented JSON with a final newline.
func CompareJSON(c Comparison) ([]byte, error) {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// CompareText renders a comparison for a terminal.
func CompareText(c Comparison) string { return renderCompare(c, false) }

// CompareMarkdown renders a comparison as Markdown (a tracker comment).
func CompareMarkdown(c Comparison) string { return renderCompare(c, true) }

func renderCompare(c Comparison, md bool) string {
	var b strings.Builder
	title := "gttsplit: control comparison"
	if md {
		fmt.Fprintf(&b, "### %s\n\n", title)
	} else {
		fmt.Fprintf(&b, "%s\n\n", title)
	}
	for _, s := range []struct {
		name string
		s    CompareSide
	}{{"A", c.A}, {"B", c.B}} {
		id := s.s.RunID
		if id == "" {
			id = s.s.Input
		}
		role := ""
		switch s.s.Role {
		case "offload":
			role = " (weights in GTT)"
		case "control":
			role = " (the control: offload off)"
		}
		cmd := s.s.Command
		if cmd == "" {
			cmd = "command unknown"
		} else {
			cmd = quoteCmd(cmd)
		}
		if md {
			fmt.Fprintf(&b, "- **%s**: `%s`%s: %s\n", s.name, strings.ReplaceAll(id, "`", "'"), role, cmd)
		} else {
			fmt.Fprintf(&b, "%s: %s%s: %s\n", s.name, id, role, cmd)
		}
	}
	b.WriteString("\n")
	cell := func(v *split.MiB) string {
		if v == nil {
			return "unknown"
		}
		return fmt.Sprintf("%.1f", float64(*v))
	}
	diffCell := func(v *split.MiB) string {
		if v == nil {
			return "—"
		}
		return fmt.Sprintf("%+.1f", float64(*v))
	}
	var rows [][]string
	for _, r := range c.Rows {
		rows = append(rows, []string{r.Part, cell(r.A), cell(r.B), diffCell(r.Diff)})
	}
	writeTable(&b, md, []string{"part", "A MiB", "B MiB", "A − B MiB"}, rows)
	if len(c.Devices) > 0 {
		var drows [][]string
		for _, d := range c.Devices {
			for _, r := range d.Rows {
				drows = append(drows, []string{d.Name, r.Part, cell(r.A), cell(r.B), diffCell(r.Diff)})
			}
		}
		b.WriteString("\n")
		writeTable(&b, md, []string{"device", "part", "A MiB", "B MiB", "A − B MiB"}, drows)
	}
	if md {
		fmt.Fprintf(&b, "\n**Verdict**: %s\n", c.Words)
	} else {
		fmt.Fprintf(&b, "\nverdict: %s\n", c.Words)
	}
	for _, n := range c.Notes {
		fmt.Fprintf(&b, "- note: %s\n", n)
	}
	return b.String()
}
