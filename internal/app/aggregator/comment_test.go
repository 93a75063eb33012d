package aggregator

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/commentsink/githubtest"
)

// TestServeKeepsCommentPendingOn401Integration: a run's tracker comment
// that the tracker refuses with 401 (a token revoked or expired, its auth
// down for a while) is kept pending, not dropped for good: serve retries
// it with the sink's backoff and posts it once the token works again; an
// aggregator stopped before then leaves the split unsettled in the state
// bucket, and the next one posts it at its start. Before, a 401 was a
// permanent failure: the split was settled and the comment never posted.
func TestServeKeepsCommentPendingOn401Integration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	gh := githubtest.New(t)
	gh.AddIssue(fx.Report.Run.Issue)
	cfg := testConfig(t, b.url)
	cfg.Embedded.Store = ""
	cfg.Sinks.IssueComment.API, cfg.Sinks.IssueComment.Token = gh.URL, "ghp_401-test-token"
	cfg.ShutdownTimeout = 2 * time.Second
	run := fx.Origin.RunID
	posted := func() bool { return len(gh.Comments(fx.Report.Run.Issue)) == 1 }

	// 401 for as long as this aggregator runs.
	gh.FailNext(1000, githubtest.Status(http.StatusUnauthorized))
	s := startServe(t, cfg, ServeOptions{})
	b.publish(t, fx.Wires...)
	eventually(t, "the split written", func() bool { n, _ := s.closes.count(); return n == 1 })
	eventually(t, "the tracker asked twice", func() bool { return gh.Count(http.MethodGet) >= 2 })
	err := s.stop(t)
	require.ErrorIs(t, err, sinks.ErrUndelivered, "serve says the comment waits")
	require.ErrorContains(t, err, "401 Unauthorized")
	require.False(t, posted())
	st := b.state(t, run)
	require.True(t, st.Closed)
	require.True(t, st.SinksPending, "a 401 leaves the split unsettled")

	// The token works again: the next aggregator posts the comment at its
	// start, and the state stops asking.
	gh.ClearFailures()
	s = startServe(t, cfg, ServeOptions{})
	eventually(t, "the comment posted at the next start", posted)
	eventually(t, "the split settled", func() bool { return !b.state(t, run).SinksPending })
	require.NoError(t, s.stop(t))

	// In one aggregator: 401, then 200 a moment later; the comment is
	// edited in place (another threshold changes the report).
	gh.FailNext(2, githubtest.Status(http.StatusUnauthorized))
	cfg.Split.UnattributedThresholdPct = 30
	cfg.Sinks.JSON.Dir = t.TempDir()
	b2 := startBroker(t)
	cfg.NATS.URL = b2.url
	s = startServe(t, cfg, ServeOptions{})
	b2.publish(t, fx.Wires...)
	eventually(t, "the comment edited once the token works again", func() bool {
		cs := gh.Comments(fx.Report.Run.Issue)
		return len(cs) == 1 && cs[0].Edits == 1
	})
	eventually(t, "the split settled", func() bool { return !b2.state(t, run).SinksPending })
	require.NoError(t, s.stop(t))
}
