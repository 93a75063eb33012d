package clitest

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// ExampleSubstitutions map what a help or doc example names on a
// user's machine to what a script has: the local broker and GitHub API, a
// running process, temporary paths. They are the only liberty the
// examples script takes with an example.
var ExampleSubstitutions = []struct{ From, To string }{
	{"nats://nats-1:4222,nats://nats-2:4222", "$NATS_URL"},
	{"nats://nats-1:4222", "$NATS_URL"},
	{"nats://nats:4222", "$NATS_URL"},
	{"nats://127.0.0.1:4222", "$NATS_URL"},
	{"https://api.github.com", "$GITHUB_API"},
	{"/var/log/llama-server.log", "$WORK/llama-server.log"},
	{"--pid 4242", "--pid $LLAMA_PID"},
	{"$(pgrep llama-server)", "$LLAMA_PID"},
	{"/srv/gttsplit/", "$WORK/srv/"},
	{"--http 0.0.0.0:8080", "--http 127.0.0.1:$HTTP_PORT2"},
	{"/tmp/q", "$WORK/q"},
	{"http://agg-1:8080", "http://127.0.0.1:$HTTP_PORT"},
	{"http://agg-2:8080", "http://127.0.0.1:$HTTP_PORT2"},
}

// HelpExamples returns every example line of root and its subcommands.
func HelpExamples(root *cobra.Command) []string {
	var out []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, l := range strings.Split(c.Example, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return out
}

// docsNotScripted are the docs whose command lines are not examples to
// run as written: a command's synopsis (`aggregator gate [flags] RUN...`)
// and a CI workflow's steps in regressions.md (TestRegressionsDocWorkflow
// checks them), and deploy.md, whose files deploy/'s tests check.
var docsNotScripted = []string{"deploy.md", "regressions.md"}

// DocCommands returns the command lines that run binary in the code
// blocks of README.md and of every docs/*.md but docsNotScripted
// (continuation lines joined), so an example moved from the README to a
// doc stays tested.
func DocCommands(t *testing.T, binary string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(RepoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = slices.DeleteFunc(docs, func(p string) bool { return slices.Contains(docsNotScripted, filepath.Base(p)) })
	var out []string
	for _, p := range append([]string{filepath.Join(RepoRoot, "README.md")}, docs...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, blockCommands(string(b), binary)...)
	}
	return out
}

// blockCommands returns the command lines of doc's code blocks that run
// binary (continuation lines joined).
func blockCommands(doc, binary string) []string {
	var out []string
	in := false
	var cur string
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "```") {
			in = !in
			continue
		}
		if !in {
			continue
		}
		if cur != "" {
			l = cur + " " + strings.TrimSpace(l)
			cur = ""
		}
		if strings.HasSuffix(l, "\\") {
			cur = strings.TrimSuffix(l, "\\")
			continue
		}
		l = strings.Join(strings.Fields(l), " ")
		if strings.HasPrefix(l, binary+" ") {
			out = append(out, l)
		}
	}
	return out
}

// RequireScripted checks that every example runs, as written but for
// ExampleSubstitutions (and the quoting of an argument holding '#'), in
// the script at path: as `exec LINE` (possibly in the background,
// `&name&`), or `exitcode 0 LINE`. An example ending in
// "> FILE" must be followed by `cp stdout FILE`.
func RequireScripted(t *testing.T, path string, examples []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	for _, ex := range examples {
		line := ex
		for _, s := range ExampleSubstitutions {
			line = strings.ReplaceAll(line, s.From, s.To)
		}
		redirect := ""
		if i := strings.LastIndex(line, " > "); i >= 0 {
			line, redirect = line[:i], strings.TrimSpace(line[i+3:])
		}
		// A script line starts a comment at '#': such an argument is quoted.
		fields := strings.Fields(line)
		for i, f := range fields {
			if strings.Contains(f, "#") {
				fields[i] = "'" + f + "'"
			}
		}
		line = strings.Join(fields, " ")
		re := regexp.MustCompile(`(?m)^(exec|exitcode 0) ` + regexp.QuoteMeta(line) + `( &\w+&)?$`)
		loc := re.FindStringIndex(script)
		if loc == nil {
			t.Errorf("%s does not run the example\n\t%s\nas\n\texec %s", path, ex, line)
			continue
		}
		if redirect != "" && !strings.HasPrefix(strings.TrimLeft(script[loc[1]:], "\n"), "cp stdout "+redirect+"\n") {
			t.Errorf("%s: the example %q writes %s: follow it with `cp stdout %s`", path, ex, redirect, redirect)
		}
	}
}

// Transcript is a command and the output a doc prints for it: a code
// block whose first line is "$ COMMAND" and whose other lines are what
// COMMAND writes on stdout.
type Transcript struct {
	Args   []string // the command line's words, the binary first
	Output string   // without the final newline
}

// Transcripts returns the transcripts of doc whose command runs binary, in
// order. The command line is split at spaces (no quoting: a transcript
// with quotes or shell syntax is not run as printed and is left out).
func Transcripts(doc, binary string) []Transcript {
	var out []Transcript
	blocks := strings.Split(doc, "```")
	for i := 1; i < len(blocks); i += 2 {
		b := blocks[i]
		nl := strings.IndexByte(b, '\n')
		if nl < 0 {
			continue
		}
		body := b[nl+1:] // the fence's info string ends the first line
		first, rest, _ := strings.Cut(body, "\n")
		cmd, ok := strings.CutPrefix(first, "$ "+binary+" ")
		if !ok || strings.ContainsAny(cmd, `'"|;&<>$`+"`") {
			continue
		}
		out = append(out, Transcript{Args: append([]string{binary}, strings.Fields(cmd)...), Output: strings.TrimRight(rest, "\n")})
	}
	return out
}
