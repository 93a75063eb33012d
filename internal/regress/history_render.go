package regress

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// Title names a group: "strix01 gpu0 Qwen3.5-4B-Q4_K_M.gguf".
func (g Group) Title() string {
	s := cmp.Or(g.Host, "(no host)") + " " + cmp.Or(g.Lane, "(no lane)") + " " + cmp.Or(g.Model, "(model unknown)")
	if g.Control {
		s += " (controls: offload off)"
	}
	return s
}

// ChangeText is a change in words: "+25.4 % ▲", "-100.0 % ▼", "new ▲"
// (from 0), "+0.0 %".
func ChangeText(c Change) string {
	var s string
	switch {
	case c.FromZero:
		s = "new"
	case c.Pct != nil:
		s = fmt.Sprintf("%+.1f %%", float64(*c.Pct))
	}
	if c.Marked {
		if c.Up() {
			s += " ▲"
		} else {
			s += " ▼"
		}
	}
	return s
}

// StartedText is a run's start as the history shows it: UTC, to the
// second.
func StartedText(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return cmp.Or(s, "unknown")
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// ShortCommit is a commit as the history shows it (9 characters).
func ShortCommit(c string) string {
	if len(c) > 9 {
		return c[:9]
	}
	return cmp.Or(c, "unknown")
}

func buildText(r Row) string {
	if r.BuildNumber != nil {
		return "b" + strconv.FormatInt(*r.BuildNumber, 10)
	}
	return "unknown"
}

// figureText is a row's figure in f as the history shows it: one decimal,
// with " %" for a share; "unknown" for none.
func figureText(row split.Row, f split.Figures) string {
	v := row.OfFigures(f)
	if v == nil {
		return "unknown"
	}
	s := strconv.FormatFloat(float64(*v), 'f', 1, 64)
	if row.Unit == split.UnitPct {
		s += " %"
	}
	return s
}

func runText(r Row) string {
	s := r.RunID
	if !r.Figures.Complete {
		s += " (incomplete)"
	}
	return s
}

func thresholdText(h History) string {
	return fmt.Sprintf("changes from the run before beyond %s %% marked ▲ (grew) or ▼ (shrank); MiB", num(h.ThresholdPct))
}

// HistoryText is the history as plain text: per group a table, each run
// on one line and the change from the run before on the next.
func HistoryText(h History) string {
	if len(h.Groups) == 0 {
		return "no closed run matches"
	}
	var b strings.Builder
	for gi, g := range h.Groups {
		if gi > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s: %s (%s)\n", g.Title(), Count(len(g.Rows), "run", "runs"), thresholdText(h))
		cols := Columns()
		head := []string{"build", "commit", "started (UTC)"}
		for _, col := range cols {
			head = append(head, col.Labels.History)
		}
		t := [][]string{append(head, "run")}
		for _, r := range g.Rows {
			line := []string{buildText(r), ShortCommit(r.Figures.Commit), StartedText(r.Figures.Started)}
			for _, col := range cols {
				line = append(line, figureText(col, r.Figures))
			}
			t = append(t, append(line, runText(r)))
			if len(r.Changes) > 0 {
				ch := []string{"", "", "  change"}
				for _, col := range cols {
					s := ""
					if c, ok := r.Changes[col.Key]; ok {
						s = ChangeText(c)
					}
					ch = append(ch, s)
				}
				t = append(t, append(ch, ""))
			}
		}
		writeTable(&b, t, 3, 2+len(cols))
	}
	return strings.TrimRight(b.String(), "\n")
}

// writeTable writes t with its columns aligned: columns from..to (inclusive) right-aligned.
func writeTable(b *strings.Builder, t [][]string, from, to int) {
	w := make([]int, len(t[0]))
	for _, r := range t {
		for i, c := range r {
			w[i] = max(w[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range t {
		var line strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", w[i]-utf8.RuneCountInString(c))
			if i > 0 {
				line.WriteString("  ")
			}
			if i >= from && i <= to {
				line.WriteString(pad + c)
			} else {
				line.WriteString(c + pad)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
}

// HistoryMarkdown is the history as Markdown: a table per group, each
// figure with its change from the run before, the marked ones in bold.
func HistoryMarkdown(h History) string {
	if len(h.Groups) == 0 {
		return "No closed run matches."
	}
	var b strings.Builder
	for _, g := range h.Groups {
		fmt.Fprintf(&b, "### %s\n\n%s, %s.\n\n", mdEscape(g.Title()), Count(len(g.Rows), "run", "runs"), thresholdText(h))
		cols := Columns()
		b.WriteString("| build | commit | started (UTC) |")
		for _, col := range cols {
			b.WriteString(" " + col.Labels.History + " |")
		}
		b.WriteString(" run |\n|---|---|---|")
		b.WriteString(strings.Repeat("---:|", len(cols)))
		b.WriteString("---|\n")
		for _, r := range g.Rows {
			fmt.Fprintf(&b, "| %s | `%s` | %s |", buildText(r), ShortCommit(r.Figures.Commit), StartedText(r.Figures.Started))
			for _, col := range cols {
				cell := figureText(col, r.Figures)
				if c, ok := r.Changes[col.Key]; ok {
					cell += "<br>" + ChangeText(c)
					if c.Marked {
						cell = "**" + cell + "**"
					}
				}
				b.WriteString(" " + cell + " |")
			}
			fmt.Fprintf(&b, " `%s` |\n", strings.ReplaceAll(runText(r), "`", "'"))
		}
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// HistoryJSON is the history as one JSON object.
func HistoryJSON(h History) ([]byte, error) { return json.Marshal(h) }
