package aggregator

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/commentsink/githubtest"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/gttsplit/gttsplit/pkg/split"
)

// TestServiceResendsUnsettledSplitsIntegration: a split the sinks did not
// settle before the aggregator stopped is re-sent by the next one, and the
// state stops asking once every sink settled it.
func TestServiceResendsUnsettledSplitsIntegration(t *testing.T) {
	skipShort(t)
	fx := loadFixture(t, fixture4B)
	b := startBroker(t)
	const durable = "resend"

	// A sink that never answers in time: the split stays unsettled.
	stuck := new(sinktest.Memory)
	block := make(chan struct{})
	stuck.Block(block)
	deliv := newDeliveries(1)
	fan1, err := sinks.NewFanout(sinks.Settings{Logger: testLogger(t)}, sinks.FanoutConfig{Observer: deliv},
		sinks.Target{Name: "mem", Sink: stuck})
	require.NoError(t, err)
	a := startService(t, b.url, durable, ServiceConfig{IdleTimeout: time.Hour, Sinks: fan1, Deliveries: deliv})
	b.publish(t, fx.wires...)
	eventually(t, "the split is written", func() bool { n, _ := a.closes.count(); return n >= 1 })
	a.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_ = fan1.Close(ctx) // gives up: the sink is blocked
	cancel()
	close(block)
	st := b.state(t, fx.origin.RunID)
	require.True(t, st.Closed)
	require.True(t, st.SinksPending, "no sink settled the split")

	// The next aggregator re-sends it, and clears the flag once delivered.
	mem := new(sinktest.Memory)
	deliv2 := newDeliveries(1)
	fan2, err := sinks.NewFanout(sinks.Settings{Logger: testLogger(t)}, sinks.FanoutConfig{Observer: deliv2},
		sinks.Target{Name: "mem", Sink: mem})
	require.NoError(t, err)
	c := startService(t, b.url, durable, ServiceConfig{IdleTimeout: time.Hour, Sinks: fan2, Deliveries: deliv2})
	eventually(t, "the split re-sent", func() bool { _, ok := mem.Runs()[fx.origin.RunID]; return ok })
	eventually(t, "the flag cleared", func() bool {
		c.svc.Flush(context.Background())
		return !b.state(t, fx.origin.RunID).SinksPending
	})
	c.stop()
	require.NoError(t, fan2.Close(context.Background()))
	got, err := split.JSON(mem.Runs()[fx.origin.RunID])
	require.NoError(t, err)
	require.Equal(t, string(fx.want), string(got), "the re-sent split is the written one")
}

func TestDeliveriesSettleWhenEverySinkDid(t *testing.T) {
	t.Parallel()
	d := newDeliveries(2)
	d.queued("r")
	d.Observe(sinks.Event{Sink: "file", RunID: "r", Outcome: sinks.OutcomeDelivered})
	require.Empty(t, d.take(), "one of two sinks")
	d.Observe(sinks.Event{Sink: "json", RunID: "r", Outcome: sinks.OutcomeRetrying, Err: errors.New("x")})
	require.Empty(t, d.take(), "a retry settles nothing")
	d.Observe(sinks.Event{Sink: "json", RunID: "r", Outcome: sinks.OutcomeFailed, Err: errors.New("x")})
	require.Equal(t, []string{"r"}, d.take(), "delivered or failed for good: settled")
	require.Empty(t, d.take())
}

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
	gh.AddIssue(fx.report.Run.Issue)
	cfg := testConfig(t, b.url)
	cfg.Embedded.Store = ""
	cfg.Sinks.IssueComment.API, cfg.Sinks.IssueComment.Token = gh.URL, "ghp_401-test-token"
	cfg.ShutdownTimeout = 2 * time.Second
	run := fx.origin.RunID
	posted := func() bool { return len(gh.Comments(fx.report.Run.Issue)) == 1 }

	// 401 for as long as this aggregator runs.
	gh.FailNext(1000, githubtest.Status(http.StatusUnauthorized))
	s := startServe(t, cfg, ServeOptions{})
	b.publish(t, fx.wires...)
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
	b2.publish(t, fx.wires...)
	eventually(t, "the comment edited once the token works again", func() bool {
		cs := gh.Comments(fx.report.Run.Issue)
		return len(cs) == 1 && cs[0].Edits == 1
	})
	eventually(t, "the split settled", func() bool { return !b2.state(t, run).SinksPending })
	require.NoError(t, s.stop(t))
}
