package regress

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/gttsplit/gttsplit/pkg/split"
)

// ChangesText is the lane changes as plain text: per lane its changes,
// the newest build first, each naming the two builds, the commits to
// bisect, the rows that moved and the two runs.
func ChangesText(c Changes) string {
	if len(c.Lanes) == 0 {
		return "no closed run matches"
	}
	var b strings.Builder
	for i, l := range c.Lanes {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s: %s\n", l.Title(), laneCount(l))
		for _, ch := range l.Changes {
			fmt.Fprintf(&b, "%s → %s  %s\n", ch.Before.Name(), ch.After.Name(), bisectText(ch))
			t := [][]string{}
			for _, rc := range ch.Rows {
				t = append(t, []string{"  " + rowLabel(rc.Row), figText(rc, rc.Before), "→", figText(rc, rc.After), diffOnly(rc), pctText(rc)})
			}
			writeTable(&b, t, 1, 5)
			fmt.Fprintf(&b, "  runs %s → %s\n", ch.Before.RunID, ch.After.RunID)
		}
	}
	fmt.Fprintf(&b, "\nthresholds: %s\n", c.Thresholds.Text())
	return strings.TrimRight(b.String(), "\n")
}

// laneCount says how many changes over how many builds, and the runs
// left out.
func laneCount(l Lane) string {
	s := "no change"
	if len(l.Changes) > 0 {
		s = Count(len(l.Changes), "change", "changes")
	}
	s += " over " + Count(l.Builds, "build", "builds")
	if len(l.Changes) > 1 {
		s += ", the newest first"
	}
	if l.Skipped > 0 {
		s += " (" + Count(l.Skipped, "run", "runs") + " left out: not complete, or no build number)"
	}
	return s
}

func rowLabel(key string) string {
	if row, ok := split.RowOf(key); ok {
		return row.Labels.History
	}
	return key
}

// figText is a row's figure: one decimal, " %" for a share.
func figText(rc RowChange, v split.MiB) string {
	s := strconv.FormatFloat(float64(v), 'f', 1, 64)
	if rc.Unit == split.UnitPct {
		s += " %"
	}
	return s
}

// diffOnly is a row's move in its unit: "-795.8 MiB", "-33.5 points".
func diffOnly(rc RowChange) string {
	if rc.Unit == split.UnitPct {
		return fmt.Sprintf("%+.1f points", float64(rc.Diff))
	}
	return fmt.Sprintf("%+.1f MiB", float64(rc.Diff))
}

// pctText is a MiB row's move relative to its earlier figure: "-20.0 %",
// "new" from 0; "" for a share.
func pctText(rc RowChange) string {
	switch {
	case rc.Unit == split.UnitPct:
		return ""
	case rc.FromZero:
		return "new"
	case rc.Pct != nil:
		return fmt.Sprintf("%+.1f %%", float64(*rc.Pct))
	}
	return ""
}

// diffText is a row's move: "-795.8 MiB (-100.0 %)", "+795.8 MiB (new)",
// "-33.5 points" for a share.
func diffText(rc RowChange) string {
	if rc.Unit == split.UnitPct {
		return fmt.Sprintf("%+.1f points", float64(rc.Diff))
	}
	s := fmt.Sprintf("%+.1f MiB", float64(rc.Diff))
	switch {
	case rc.FromZero:
		s += " (new)"
	case rc.Pct != nil:
		s += fmt.Sprintf(" (%+.1f %%)", float64(*rc.Pct))
	}
	return s
}

// bisectText names the commits to bisect: "bisect 40f58efe1..5e6f70819",
// with a note when a tree was dirty.
func bisectText(ch LaneChange) string {
	if ch.Range == "" {
		return "commits unknown: nothing to bisect"
	}
	s := "bisect " + ShortCommit(ch.Before.Commit) + ".." + ShortCommit(ch.After.Commit)
	if dirty(ch.Before) || dirty(ch.After) {
		s += " (a source tree was dirty: the cause may be outside the range)"
	}
	return s
}

func dirty(b Build) bool { return b.Dirty != nil && *b.Dirty }

// Text is the row's move in words: "packed 795.8 → 0.0 (-795.8 MiB,
// -100.0 %)", "duplicate 33.5 % → 0.0 % (-33.5 points)".
func (rc RowChange) Text() string {
	s := rowLabel(rc.Row) + " " + figText(rc, rc.Before) + " → " + figText(rc, rc.After) + " (" + diffOnly(rc)
	if p := pctText(rc); p != "" {
		s += ", " + p
	}
	return s + ")"
}

// Title is the change in one line: "b9866 → b9901 (bisect
// 40f58efe1..c3e5a7b9d): peak 3925.0 → 3129.2 (...); packed ...".
func (ch LaneChange) Title() string {
	parts := make([]string, len(ch.Rows))
	for i, rc := range ch.Rows {
		parts[i] = rc.Text()
	}
	return ch.Before.Name() + " → " + ch.After.Name() + " (" + bisectText(ch) + "): " + strings.Join(parts, "; ")
}

// ChangesMarkdown is the lane changes as Markdown: a table per lane.
func ChangesMarkdown(c Changes) string {
	if len(c.Lanes) == 0 {
		return "No closed run matches."
	}
	var b strings.Builder
	for _, l := range c.Lanes {
		fmt.Fprintf(&b, "### %s\n\n%s.\n\n", mdEscape(l.Title()), laneCount(l))
		if len(l.Changes) == 0 {
			continue
		}
		b.WriteString("| builds | commits to bisect | row | before | after | change |\n|---|---|---|---:|---:|---:|\n")
		for _, ch := range l.Changes {
			for i, rc := range ch.Rows {
				builds, commits := "", ""
				if i == 0 {
					builds = ch.Before.Name() + " → " + ch.After.Name()
					commits = "unknown"
					if ch.Range != "" {
						commits = "`" + ShortCommit(ch.Before.Commit) + ".." + ShortCommit(ch.After.Commit) + "`"
					}
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", builds, commits, rowLabel(rc.Row), figText(rc, rc.Before), figText(rc, rc.After), diffText(rc))
			}
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "Thresholds: %s.", c.Thresholds.Text())
	return b.String()
}

// ChangesJSON is the lane changes as one JSON object.
func ChangesJSON(c Changes) ([]byte, error) { return json.Marshal(c) }

// LaneComment is what a lane's sticky comment on one issue shows: the
// lane's changes posted there and its controls'.
type LaneComment struct {
	Host, Lane, Model string
	// Changes and Controls are newest first.
	Changes, Controls []LaneChange
}

// MaxCommentChanges bounds the changes a comment shows (the newest);
// the note under them says how to list the rest.
const MaxCommentChanges = 40

// Markdown is the comment's body: a heading, the thresholds, and each
// change (the newest first) with its builds, the commits to bisect, a
// table of the rows before → after, and the two runs and their
// comparison, linked on the page at pageURL when it is set.
func (c LaneComment) Markdown(th Thresholds, pageURL string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### gttsplit: lane changes of %s %s %s\n\n", code(c.Host), code(c.Lane), code(c.Model))
	fmt.Fprintf(&b, "The memory this lane measured moved between these llama.cpp builds, the newest first (a row moved when it changed by more than its threshold: %s). This comment is edited as builds are measured.\n", th.Text())
	n := 0
	section := func(chs []LaneChange) {
		for _, ch := range chs {
			if n == MaxCommentChanges {
				return
			}
			n++
			b.WriteString("\n")
			writeCommentChange(&b, ch, pageURL)
		}
	}
	if len(c.Changes) == 0 && len(c.Controls) == 0 {
		b.WriteString("\nNo change beyond the thresholds between the builds measured.\n")
	}
	section(c.Changes)
	if len(c.Controls) > 0 && n < MaxCommentChanges {
		b.WriteString("\n#### Controls (offload off)\n")
		section(c.Controls)
	}
	if rest := len(c.Changes) + len(c.Controls) - n; rest > 0 {
		fmt.Fprintf(&b, "\n*%s not shown: `aggregator history --changes --host %s --lane %s --model %s`.*\n",
			Count(rest, "older change", "older changes"), shellWord(c.Host), shellWord(c.Lane), shellWord(c.Model))
	}
	return b.String()
}

func writeCommentChange(b *strings.Builder, ch LaneChange, pageURL string) {
	fmt.Fprintf(b, "**%s → %s** · ", ch.Before.Name(), ch.After.Name())
	if ch.Range == "" {
		b.WriteString("commits unknown\n\n")
	} else {
		fmt.Fprintf(b, "bisect `%s..%s`", ShortCommit(ch.Before.Commit), ShortCommit(ch.After.Commit))
		if dirty(ch.Before) || dirty(ch.After) {
			b.WriteString(" (a source tree was dirty: the cause may be outside the range)")
		}
		b.WriteString("\n\n")
	}
	fmt.Fprintf(b, "| row | %s | %s | change |\n|---|---:|---:|---:|\n", ch.Before.Name(), ch.After.Name())
	for _, rc := range ch.Rows {
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", rowLabel(rc.Row), figText(rc, rc.Before), figText(rc, rc.After), diffText(rc))
	}
	b.WriteString("\n")
	if pageURL == "" {
		fmt.Fprintf(b, "Runs %s → %s; their comparison: `aggregator compare %s %s`\n", code(ch.Before.RunID), code(ch.After.RunID),
			shellWord(ch.Before.RunID), shellWord(ch.After.RunID))
		return
	}
	base := strings.TrimRight(pageURL, "/")
	q := url.Values{"a": {ch.Before.RunID}, "b": {ch.After.RunID}}
	fmt.Fprintf(b, "Runs [%s](%s/run/%s) → [%s](%s/run/%s) · [their comparison](%s/compare?%s)\n",
		code(ch.Before.RunID), base, url.PathEscape(ch.Before.RunID), code(ch.After.RunID), base, url.PathEscape(ch.After.RunID), base, q.Encode())
}

// code is s as a Markdown code span (its backticks and line ends dropped:
// a run's names come from the network).
func code(s string) string {
	s = strings.NewReplacer("`", "'", "\n", " ", "\r", " ").Replace(s)
	if s == "" {
		return "(none)"
	}
	return "`" + s + "`"
}

// shellWord is s as one shell word inside a code span.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@+=") == "" {
		return s
	}
	return "'" + strings.NewReplacer("'", `'\''`, "`", "", "\n", "", "\r", "").Replace(s) + "'"
}
