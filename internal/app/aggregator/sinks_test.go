package aggregator

import (
	"context"
	"io"
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
