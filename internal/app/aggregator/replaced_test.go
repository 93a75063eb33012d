package aggregator

import (
	"encoding/json"
	"html"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/sinks/commentsink/githubtest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// TestServeReplacedSplitSaysSoIntegration: a run closed incomplete (the
// idle timeout) and completed by its own host's late finish gets a split
// that says it replaces the incomplete one (when that one was written, its
// number, what it lacked), everywhere the split goes: the JSON sink and
// /runs/{id} (run.replaces and the flag replaces_incomplete), the Markdown
// file, the tracker comment (edited in place, the note first), the run's
// page and the runs list.
func TestServeReplacedSplitSaysSoIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	gh := githubtest.New(t)
	issue := fx.Report.Run.Issue
	gh.AddIssue(issue)
	cfg := testConfig(t, b.url)
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.IdleTimeout = 3 * time.Second
	cfg.Sinks.File.Dir = t.TempDir()
	cfg.Sinks.IssueComment.API, cfg.Sinks.IssueComment.Token = gh.URL, "ghp_replaced-test-token"
	s := startServe(t, cfg, ServeOptions{})
	id := fx.Origin.RunID
	fin := fx.FinishedIndex(t)

	// Everything but the finish: the run goes idle and closes incomplete.
	// (On a loaded machine it may go idle earlier, between two events, and
	// be re-opened by the next: the test waits for a split of every event
	// but the finish, whichever it is.)
	b.publish(t, fx.Without(fin)...)
	var last split.Report
	eventually(t, "the incomplete split of every event but the finish", func() bool {
		cs := s.closes.of(id)
		if len(cs) == 0 || !b.state(t, id).Closed {
			return false
		}
		last = cs[len(cs)-1]
		return !last.Run.Complete && last.Detail.LinesRead == fx.Report.Detail.LinesRead && last.Detail.Samples == fx.Report.Detail.Samples
	})
	st := b.state(t, id)
	eventually(t, "its comment", func() bool {
		cs := gh.Comments(issue)
		return len(cs) == 1 && strings.Contains(cs[0].Body, "- incomplete:") && !b.state(t, id).SinksPending
	})
	written := st.ClosedAt.UTC().Format(time.RFC3339)
	want := split.Replaced{Written: written, Split: st.Splits - 1, Missing: []string{"the run-finished event"}}

	// The host's late finish completes it.
	b.publish(t, fx.Wires[fin])
	var done split.Report
	eventually(t, "the complete split", func() bool {
		cs := s.closes.of(id)
		done = cs[len(cs)-1]
		return done.Run.Complete
	})
	require.Equal(t, &want, done.Run.Replaces)
	require.Contains(t, done.Flags, split.FlagReplaces)
	words := split.FlagWords(done, split.FlagReplaces)
	require.Contains(t, words, "this split replaces the incomplete split written at "+written)
	require.Contains(t, words, "which lacked the run-finished event")

	// The tracker comment: the same one, edited, the note first.
	eventually(t, "the comment edited in place", func() bool {
		cs := gh.Comments(issue)
		return len(cs) == 1 && strings.Contains(cs[0].Body, "replaces_incomplete")
	})
	c := gh.Comments(issue)[0]
	require.GreaterOrEqual(t, c.Edits, 1)
	require.Contains(t, c.Body, "### gttsplit: GTT split of run "+id+"\n\n> T"+words[1:]+".\n\n")
	require.Contains(t, c.Body, "- replaces_incomplete: "+words+"\n")
	require.NotContains(t, c.Body, "- incomplete:")

	// The JSON sink and /runs/{id}: run.replaces.
	eventually(t, "settled by the sinks", func() bool { return !b.state(t, id).SinksPending })
	lines := sinkLines(t, cfg.Sinks.JSON.Dir)
	var got split.Report
	require.NoError(t, json.Unmarshal(lines[len(lines)-1].raw, &got))
	require.Equal(t, &want, got.Run.Replaces)
	require.NoError(t, json.Unmarshal([]byte(httpGet(t, s.http, "/runs/"+id, 200)), &got))
	require.Equal(t, &want, got.Run.Replaces)

	// The Markdown file, replaced.
	mds, err := filepath.Glob(filepath.Join(cfg.Sinks.File.Dir, "*", "*", "*.md"))
	require.NoError(t, err)
	require.Len(t, mds, 1)
	md, err := os.ReadFile(mds[0])
	require.NoError(t, err)
	require.Contains(t, string(md), "\n> T"+words[1:]+".\n")

	// The run's page says it at the top and in its flags; the runs list
	// shows the flag.
	page := httpGet(t, s.http, "/run/"+id, 200)
	require.Contains(t, page, `<p id="replaces"><span class="flag">replaces_incomplete</span> `+html.EscapeString(words)+".</p>")
	require.Contains(t, httpGet(t, s.http, "/", 200), `<span class="flag">replaces_incomplete</span>`)
}
