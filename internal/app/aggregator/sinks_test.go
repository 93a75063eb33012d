package aggregator

import (
	"context"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/config"
	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/commentsink/githubtest"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
)

// TestOpenSinksOnDefaults enables every sink the way a user does, by the
// one key that switches it on (plus the comment token), and opens them:
// whatever `validate` accepts must open. A sink option that has no default
// in the aggregator's config and fails the sink's own validation (the
// comment sink's request timeout did) fails here.
func TestOpenSinksOnDefaults(t *testing.T) {
	t.Parallel()
	for _, dryRun := range []bool{false, true} {
		cfg := config.DefaultAggregator()
		cfg.Sinks.File.Dir = t.TempDir()
		cfg.Sinks.JSON.Dir = t.TempDir()
		cfg.Sinks.IssueComment.API = "http://127.0.0.1:1"
		cfg.Sinks.IssueComment.DryRun = dryRun
		if !dryRun {
			cfg.Sinks.IssueComment.Token = "t"
		}
		require.NoError(t, cfg.Validate())
		fan, err := OpenSinks(cfg.Sinks, io.Discard, testLogger(t), nil, nil)
		require.NoError(t, err, "dry run %v", dryRun)
		require.NotNil(t, fan)
		require.Equal(t, []string{"file", "json", "issue_comment"}, fan.Targets(), "every sink, by its key under sinks.*")
		require.NoError(t, fan.Close(context.Background()))
	}
}

// TestCommentTimeoutReachesTheSink: the configured request timeout is the
// one the sink's requests get (a tracker that answers slower than it is a
// transient failure).
func TestCommentTimeoutReachesTheSink(t *testing.T) {
	t.Parallel()
	gh := githubtest.New(t, githubtest.WithListDelay(2*time.Second))
	gh.AddIssue("org/repo#1")
	cfg := config.DefaultAggregator()
	cfg.Sinks.IssueComment.API, cfg.Sinks.IssueComment.Token = gh.URL, "t"
	cfg.Sinks.IssueComment.DefaultIssue = "org/repo#1"
	cfg.Sinks.IssueComment.Timeout = 100 * time.Millisecond
	outcomes := make(chan sinks.Event, 16)
	obs := sinks.ObserverFunc(func(e sinks.Event) { outcomes <- e })
	fan, err := OpenSinks(cfg.Sinks, io.Discard, testLogger(t), obs, nil)
	require.NoError(t, err)
	require.NoError(t, fan.Write(context.Background(), sinktest.Report("r1")))
	select {
	case e := <-outcomes:
		require.Equal(t, sinks.OutcomeRetrying, e.Outcome)
		require.ErrorContains(t, e.Err, "Timeout")
	case <-time.After(waitFor):
		t.Fatal("no outcome")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_ = fan.Close(ctx)
}

// sinkSection is a section of sinks.* that is a sink: its key, its
// package, and the key that switches it on, with that key's flag.
type sinkSection struct {
	key, pkg, on, flag string
}

// sinkSections finds the sinks of config.Sinks: each field whose type has
// Enabled, its switch the one key that, set alone, turns Enabled true.
func sinkSections(t *testing.T) []sinkSection {
	t.Helper()
	var out []sinkSection
	st := reflect.TypeOf(config.Sinks{})
	for i := range st.NumField() {
		f := st.Field(i)
		if _, ok := reflect.New(f.Type).Elem().Interface().(interface{ Enabled() bool }); !ok {
			continue
		}
		s := sinkSection{key: f.Tag.Get("mapstructure"), pkg: path.Base(f.Type.PkgPath())}
		for j := range f.Type.NumField() {
			sw := f.Type.Field(j)
			if sw.Type.Kind() != reflect.String {
				continue
			}
			v := reflect.New(f.Type).Elem()
			v.Field(j).SetString("x")
			if v.Interface().(interface{ Enabled() bool }).Enabled() {
				s.on, s.flag = sw.Tag.Get("mapstructure"), sw.Tag.Get("flag")
			}
		}
		require.NotEmpty(t, s.on, "sinks.%s: no key switches it on (Config.Enabled)", s.key)
		out = append(out, s)
	}
	require.NotEmpty(t, out, "no field of config.Sinks has Enabled")
	return out
}

// TestDocsNameEverySink holds the words of docs/architecture.md's "Add a
// sink" (steps 3 and 8): every sink of config.Sinks is named where its
// siblings are, in the package docs and in docs/.
func TestDocsNameEverySink(t *testing.T) {
	t.Parallel()
	read := func(p ...string) string {
		b, err := os.ReadFile(filepath.Join(append([]string{"..", "..", ".."}, p...)...))
		require.NoError(t, err)
		return string(b)
	}
	// section is the text of doc from the heading to the next one of its
	// level.
	section := func(doc, heading string) string {
		i := strings.Index(doc, "\n"+heading+"\n")
		require.GreaterOrEqual(t, i, 0, "no heading %q", heading)
		rest := doc[i+len(heading)+2:]
		if j := strings.Index(rest, "\n"+strings.SplitAfter(heading, " ")[0]); j >= 0 {
			rest = rest[:j]
		}
		return rest
	}
	cfgDoc, sinksDoc := read("internal", "config", "doc.go"), read("pkg", "sinks", "doc.go")
	conf, ops, arch := read("docs", "configuration.md"), read("docs", "operations.md"), read("docs", "architecture.md")
	sections, switching := section(conf, "## One struct per section"), section(conf, "## Switching a sink on")
	opsSinks, packages := section(ops, "## Sinks"), section(arch, "## The packages")
	names := func(text, want, where string) {
		if !strings.Contains(text, want) {
			t.Errorf("%s does not name %s", where, want)
		}
	}
	for _, s := range sinkSections(t) {
		keys := "sinks." + s.key + ".*"
		names(cfgDoc, keys, "internal/config/doc.go's list of the sections")
		names(sections, "`"+keys+"`", "docs/configuration.md's table of the sections")
		names(switching, "`sinks."+s.key+"."+s.on+"`", "docs/configuration.md's Switching a sink on")
		on := "`sinks." + s.key + "." + s.on
		if s.flag != "" {
			on = "`--" + s.flag
		}
		names(opsSinks, on, "docs/operations.md's table of the sinks")
		names(sinksDoc, s.pkg, "pkg/sinks/doc.go")
		names(packages, s.pkg+"`", "docs/architecture.md's table of the packages")
	}
}

// TestLaneChangesWhereTheCommentSinkIs: the lanes' changes comments are on
// by default wherever the comment sink is, off by lane_changes.comment,
// and never without the comment sink; they take the thresholds, the page,
// and the default issue of the configuration.
func TestLaneChangesWhereTheCommentSinkIs(t *testing.T) {
	t.Parallel()
	set := sinks.Settings{Logger: testLogger(t)}
	cfg := config.DefaultAggregator()
	lc, closeLC, err := laneChanges(cfg, set)
	require.NoError(t, err)
	require.Nil(t, lc, "no comment sink")
	closeLC()

	cfg.Sinks.IssueComment.API, cfg.Sinks.IssueComment.Token = "http://127.0.0.1:1", "t"
	cfg.Sinks.IssueComment.DefaultIssue = "o/r#1"
	cfg.LaneChanges.Thresholds, cfg.LaneChanges.PageURL = "peak=64/2", "https://gtt.example.org"
	require.NoError(t, cfg.Validate())
	lc, closeLC, err = laneChanges(cfg, set)
	require.NoError(t, err)
	require.NotNil(t, lc, "on by default")
	require.Equal(t, 64.0, lc.Thresholds["peak"].Abs)
	require.Equal(t, 1.0, lc.Thresholds["packed"].Abs, "the other rows keep their defaults")
	require.Equal(t, "https://gtt.example.org", lc.PageURL)
	require.Equal(t, "o/r#1", lc.DefaultIssue)
	require.NotNil(t, lc.Post)
	closeLC()

	cfg.LaneChanges.Comment = false
	lc, closeLC, err = laneChanges(cfg, set)
	require.NoError(t, err)
	require.Nil(t, lc, "off by lane_changes.comment")
	closeLC()
}
