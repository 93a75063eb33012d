package regress

import (
	"encoding/json"
	"fmt"
	"strings"
)

// runName is how a run is named in the gate's output: its id, with the
// input it came from when that is not the id itself.
func runName(s GateSide) string {
	switch {
	case s.RunID == "":
		return s.Input
	case s.Input == "" || s.Input == s.RunID:
		return s.RunID
	}
	return s.RunID + " (" + s.Input + ")"
}

// limitsText is the limits in words: "duplicate ≤ 10 %, peak ≤ 4096 MiB,
// growth ≤ 5 % over the baseline".
func limitsText(l Limits) string {
	var p []string
	if l.MaxDuplicatePct != nil {
		p = append(p, "duplicate ≤ "+num(*l.MaxDuplicatePct)+" %")
	}
	if l.MaxUnattributedPct != nil {
		p = append(p, "unattributed ≤ "+num(*l.MaxUnattributedPct)+" %")
	}
	if l.MaxPeakMiB != nil {
		p = append(p, "peak ≤ "+num(*l.MaxPeakMiB)+" MiB")
	}
	if l.MaxGrowthPct != nil {
		p = append(p, "growth ≤ "+num(*l.MaxGrowthPct)+" % over the baseline")
	}
	s := strings.Join(p, ", ")
	if l.AllowUnknown {
		s += "; unknown figures allowed"
	}
	if l.AllowFailed {
		s += "; failed commands allowed"
	}
	return s
}

func (g GateResult) verdict() string {
	if g.Pass {
		return fmt.Sprintf("PASS: %s", Count(len(g.Runs), "run", "runs")+" passed")
	}
	return fmt.Sprintf("FAIL: %d of %s failed", g.Failed, Count(len(g.Runs), "run", "runs"))
}

// Count says n things: "1 run", "2 runs".
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func baseText(b *GateSide) string {
	s := runName(*b)
	if b.Build != "" {
		s += ", llama.cpp " + b.Build
	}
	return s
}

// GateText is the gate's verdict as plain text: a block per run, each
// check on its own line, the verdict last.
func GateText(g GateResult) string {
	var b strings.Builder
	if g.Baseline != nil {
		fmt.Fprintf(&b, "baseline: %s\n", baseText(g.Baseline))
	}
	for _, r := range g.Runs {
		fmt.Fprintf(&b, "%s %s\n", map[bool]string{true: "PASS", false: "FAIL"}[r.Pass], runName(r.GateSide))
		for _, c := range r.Checks {
			mark := map[string]string{StatusPass: "ok  ", StatusFail: "FAIL", StatusUnknown: "?   ", StatusAllowed: "ok  "}[c.Status]
			fmt.Fprintf(&b, "  %s %s\n", mark, c.Text)
		}
	}
	for _, n := range g.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	fmt.Fprintf(&b, "gate: %s (%s)", g.verdict(), limitsText(g.Limits))
	return b.String()
}

// GateMarkdown is the gate's verdict as Markdown (a CI job's summary).
func GateMarkdown(g GateResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### gttsplit gate: %s\n\n", g.verdict())
	fmt.Fprintf(&b, "Limits: %s.", limitsText(g.Limits))
	if g.Baseline != nil {
		fmt.Fprintf(&b, " Baseline: %s.", mdEscape(baseText(g.Baseline)))
	}
	b.WriteString("\n\n| run | build | check | result |\n|---|---|---|---|\n")
	for _, r := range g.Runs {
		for i, c := range r.Checks {
			run, build := "", ""
			if i == 0 {
				run, build = "`"+strings.ReplaceAll(runName(r.GateSide), "`", "'")+"`", mdEscape(r.Build)
			}
			res := map[string]string{StatusPass: "pass", StatusFail: "**FAIL**", StatusUnknown: "unknown (allowed)", StatusAllowed: "failed (allowed)"}[c.Status]
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", run, build, mdEscape(c.Text), res)
		}
	}
	for _, n := range g.Notes {
		fmt.Fprintf(&b, "\n- %s", mdEscape(n))
	}
	return strings.TrimRight(b.String(), "\n")
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// GateJSON is the gate's verdict as one JSON object.
func GateJSON(g GateResult) ([]byte, error) { return json.Marshal(g) }

// GateAnnotations are the GitHub Actions workflow commands of the gate's
// failed checks: one `::error` line each, naming the run, the figure, its
// value and its limit.
func GateAnnotations(g GateResult) string {
	var b strings.Builder
	for _, r := range g.Runs {
		for _, c := range r.Checks {
			if c.Status == StatusFail {
				fmt.Fprintf(&b, "::error title=%s::%s\n", ghProperty("gttsplit gate"), ghData(runName(r.GateSide)+": "+c.Text))
			}
		}
	}
	return b.String()
}

// ghData escapes a workflow command's message (%, CR and LF).
func ghData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

// ghProperty escapes a workflow command's property value (also : and ,).
func ghProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}
