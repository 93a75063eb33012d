package runtable_test

import (
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/internal/config"

	"github.com/gttsplit/gttsplit/internal/regress"
	"github.com/gttsplit/gttsplit/internal/runtable"
	rt "github.com/gttsplit/gttsplit/internal/runtable/runtabletest"
	"github.com/gttsplit/gttsplit/pkg/sinks/commentsink/githubtest"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

const laneIssue = "example/engine#856"

// laneBuild is the 4B lane's recorded run at a build (testdata/lanes).
func laneBuild(t testing.TB, build string) rt.Fixture {
	t.Helper()
	return rt.Load(t, filepath.Join(filepath.Dir(rt.Runs("4b")), "..", "..", "lanes", "4b-builds", build, "events.jsonl"), rt.FoldOptions(t))
}

// publishLane publishes the lane's runs at builds one after the other,
// each once the one before is closed in r's run index, so the lane is
// looked at over its builds in their order: the runs' partitions close
// them in any order, and under load one may close after the poster's
// settle (a run of a later build closed first reads as a change of its
// own, and the comment is edited once more).
func publishLane(t testing.TB, b *rt.Broker, r *table, builds ...string) {
	t.Helper()
	for _, build := range builds {
		f := laneBuild(t, build)
		b.Publish(t, f.Wires...)
		rt.Eventually(t, build+" closed in the run index", func() bool {
			s, ok := r.tbl.Index().Get(f.Origin.RunID)
			return ok && s.State == "closed" && s.Split != nil
		})
	}
}

// laneComments are the lane changes comments on the issue.
func laneComments(gh *githubtest.Server) []githubtest.Comment {
	var out []githubtest.Comment
	for _, c := range gh.Comments(laneIssue) {
		if strings.HasPrefix(c.Body, "<!-- gttsplit lane=") {
			out = append(out, c)
		}
	}
	return out
}

// laneConfig is a table whose lanes' changes comments go to gh (the
// comment sink's API, retried after 10 ms doubling up to 100 ms) with
// the thresholds th ("": the defaults); the runs' splits go to memory.
func laneConfig(gh *githubtest.Server, now func() time.Time, th string) tableConfig {
	return tableConfig{idle: time.Hour, now: now, sinks: memSinks(new(sinktest.Memory), nil), edit: func(c *config.Aggregator) {
		c.Sinks.IssueComment.API, c.Sinks.IssueComment.Token = gh.URL, "t"
		c.Sinks.Retry.Initial, c.Sinks.Retry.Max = 10*time.Millisecond, 100*time.Millisecond
		c.LaneChanges.Thresholds = th
	}}
}

// A lane's comment is kept by the table that owns the lane's partition:
// the tracker's failures (a rate limit, a bad gateway) are retried until
// it is posted; once the runs of the older builds left the store
// (store.retention), the comment keeps their change; a restarted table
// finds it as posted and writes nothing.
func TestLaneChangesCommentIntegration(t *testing.T) {
	skipShort(t)
	b := rt.StartBroker(t)
	gh := githubtest.New(t)
	gh.AddIssue(laneIssue)
	clk := newFakeClock()
	const group = "lanechanges"
	cfg := laneConfig(gh, clk.now, "")
	r := startTable(t, b.URL, group, cfg)
	r.waitOwns(r.parts)
	checks := func(m *runtable.Metrics, outcome string) float64 {
		return counter(t, m, "gttsplit_lane_comment_checks_total", outcome)
	}

	// The tracker refuses the first attempts: a rate limit, then a bad
	// gateway twice.
	gh.FailNext(1, githubtest.RetryAfter(http.StatusTooManyRequests, 0))
	gh.FailNext(2, githubtest.Status(http.StatusBadGateway))
	publishLane(t, b, r, "b9850", "b9866", "b9901")
	rt.Eventually(t, "the lane's comment", func() bool { return len(laneComments(gh)) == 1 && checks(r.m, "posted") == 1 })
	require.GreaterOrEqual(t, checks(r.m, "failed"), 1.0)
	c := laneComments(gh)[0]
	require.Contains(t, c.Body, "**b9866 → b9901** · bisect `40f58efe1..c3e5a7b9d`")
	require.NotContains(t, c.Body, "b9850 → b9866", "under the thresholds")

	// Two builds more, closed two hours later.
	clk.advance(2 * time.Hour)
	publishLane(t, b, r, "b9920", "b9950")
	// The edit is on the tracker before its look has written the lane's
	// record and counted it: the count is waited for too.
	rt.Eventually(t, "the comment edited", func() bool {
		cs := laneComments(gh)
		return len(cs) == 1 && strings.Contains(cs[0].Body, "**b9920 → b9950**") && checks(r.m, "posted") >= 2
	})
	c = laneComments(gh)[0]
	require.Equal(t, 1, c.Edits)
	require.Contains(t, c.Body, "**b9866 → b9901**")
	posted := checks(r.m, "posted")

	// A retention of an hour deletes the three older runs: the lane's
	// runs now begin at b9920, but the comment keeps the drop at b9901.
	unchanged := checks(r.m, "unchanged")
	require.Equal(t, 3, r.tbl.Expire(rt.Ctx(t), time.Hour))
	rt.Eventually(t, "the lane looked at again", func() bool { return checks(r.m, "unchanged") > unchanged })
	c = laneComments(gh)[0]
	require.Equal(t, 1, c.Edits, "nothing to edit")
	require.Contains(t, c.Body, "**b9866 → b9901**")
	require.Equal(t, posted, checks(r.m, "posted"))

	// Restarted: the comment is found as posted.
	r.stop()
	r2 := startTable(t, b.URL, group, cfg)
	rt.Eventually(t, "the lane looked at", func() bool { return checks(r2.m, "unchanged") >= 1 })
	require.Zero(t, checks(r2.m, "posted"))
	require.Len(t, gh.Comments(laneIssue), 1)
	require.Equal(t, 1, laneComments(gh)[0].Edits)

	// Other thresholds change the comment, but the tracker fails for as
	// long as this table runs: the edit waits; the next table makes it.
	r2.stop()
	cfg = laneConfig(gh, clk.now, "peak=100/4")
	gh.FailNext(1_000_000, githubtest.Status(http.StatusServiceUnavailable))
	r3 := startTable(t, b.URL, group, cfg)
	rt.Eventually(t, "the edit failed", func() bool { return checks(r3.m, "failed") >= 2 })
	r3.stop()
	require.Equal(t, 1, laneComments(gh)[0].Edits)
	gh.ClearFailures()
	r4 := startTable(t, b.URL, group, cfg)
	rt.Eventually(t, "the edit made at the next start", func() bool { return checks(r4.m, "posted") == 1 })
	c = laneComments(gh)[0]
	require.Equal(t, 2, c.Edits)
	require.Contains(t, c.Body, "peak > 100 MiB and > 4 %")
	require.Contains(t, c.Body, "**b9866 → b9901**", "kept from the record")
}

// The 4B lane's fixtures fold to their answer key (testdata/README.md,
// "lanes/4b-builds"), and their changes are the two it names.
func TestLaneFixturesAnswerKey(t *testing.T) {
	type row struct{ peak, final, packed, compute, unattributed, duplicate float64 }
	want := map[string]row{
		"b9850": {3925, 3641.25, 795.8, 43.21, 674.08, 33.49},
		"b9866": {3985, 3701.25, 795.8, 43.71, 733.58, 33.49},
		"b9901": {3129.2, 2845.45, 0, 43.21, 674.08, 0},
		"b9920": {3129.2, 2845.45, 0, 43.21, 674.08, 0},
		"b9950": {3925, 3641.25, 795.8, 43.21, 674.08, 33.49},
	}
	var runs []regress.Run
	for build, w := range want {
		r := laneBuild(t, build).Report
		r2 := func(v *split.MiB) float64 { return math.Round(float64(*v)*100) / 100 } // as the report's JSON has them
		got := row{r2(r.PeakGTTMiB), r2(r.FinalGTTMiB), r2(r.PackedMiB), r2(r.ComputeMiB), r2(r.UnattributedMiB), r2(r.DuplicatePct)}
		require.Equal(t, w, got, build)
		require.Equal(t, 2375.91, r2(r.ModelGTTMiB), build)
		require.Equal(t, 36.0, r2(r.StateMiB), build)
		require.True(t, r.Run.Complete, build)
		require.Equal(t, laneIssue, r.Run.Issue, build)
		require.Equal(t, build, strings.Fields(r.Provenance.LlamaBuild)[0])
		require.Len(t, r.Provenance.SourceCommit, 40)
		require.NotEmpty(t, r.Provenance.SourceCommitTime)
		runs = append(runs, regress.RunOf(regress.Input{Report: r}))
	}
	l := regress.NewChanges(runs, regress.Filter{}, regress.DefaultThresholds()).Lanes[0]
	var names []string
	for _, c := range l.Changes {
		names = append(names, c.Before.Name()+" → "+c.After.Name())
	}
	require.Equal(t, []string{"b9920 → b9950", "b9866 → b9901"}, names)
}
