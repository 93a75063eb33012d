package commentsink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/gttsplit/gttsplit/pkg/sinks/commentsink"
	"github.com/gttsplit/gttsplit/pkg/sinks/commentsink/githubtest"
	"github.com/gttsplit/gttsplit/pkg/sinks/sinktest"
	"github.com/gttsplit/gttsplit/pkg/split"
	"github.com/gttsplit/gttsplit/pkg/split/present"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	token = "ghp_TEST-token-do-not-leak-42"
	issue = "acme/fleet#7"
)

// clock is a fake clock: Sleep records the duration and advances Now
// without waiting.
type clock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

func newClock() *clock { return &clock{now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = append(c.slept, d)
	c.now = c.now.Add(d)
	return nil
}

func (c *clock) Slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.slept...)
}

type env struct {
	srv   *githubtest.Server
	cfg   *commentsink.Config
	set   sinks.Settings
	clock *clock
	logs  *sinktest.Buffer
	out   *sinktest.Buffer
}

func newEnv(t *testing.T, opts ...githubtest.Option) *env {
	t.Helper()
	srv := githubtest.New(t, append([]githubtest.Option{githubtest.WithToken(token)}, opts...)...)
	srv.AddIssue(issue)
	cfg := commentsink.DefaultConfig()
	cfg.API = srv.URL
	cfg.DefaultIssue = issue
	cfg.Token = token
	e := &env{srv: srv, cfg: &cfg, clock: newClock(), logs: &sinktest.Buffer{}, out: &sinktest.Buffer{}}
	e.set = sinks.Settings{
		Logger: zerolog.New(io.MultiWriter(e.logs, zerolog.NewTestWriter(t))).Level(zerolog.DebugLevel),
		Now:    e.clock.Now,
		Sleep:  e.clock.Sleep,
		Stdout: e.out,
	}
	return e
}

func (e *env) sink(t *testing.T) sinks.Sink {
	t.Helper()
	s, err := commentsink.New(*e.cfg, e.set)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// fanout wraps s in a Fanout using the env's clock and no jitter.
func (e *env) fanout(t *testing.T, s sinks.Sink, obs sinks.Observer) *sinks.Fanout {
	t.Helper()
	f, err := sinks.NewFanout(e.set, sinks.FanoutConfig{Observer: obs, Rand: func() float64 { return 0.5 }},
		sinks.Target{Name: "issue_comment", Sink: s})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	return f
}

func marker(id string) string { return "<!-- gttsplit run=" + id + " -->" }

// ours returns the comments that carry run id's marker.
func ours(cs []githubtest.Comment, id string) []githubtest.Comment {
	var out []githubtest.Comment
	for _, c := range cs {
		if strings.HasPrefix(c.Body, marker(id)) {
			out = append(out, c)
		}
	}
	return out
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Conformance(t, func(t *testing.T) sinks.Sink {
		return newEnv(t).sink(t)
	})
}

func TestOneCommentPerRunEditedNotDuplicated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	s := e.sink(t)
	r := sinktest.Report("run-1")

	for range 3 {
		require.NoError(t, s.Write(ctx, r))
	}
	cs := e.srv.Comments(issue)
	require.Len(t, cs, 1)
	require.Equal(t, marker("run-1")+"\n"+present.Markdown(r), cs[0].Body)
	require.Equal(t, 1, e.srv.Count(http.MethodPost))
	require.Equal(t, 0, e.srv.Count(http.MethodPatch))

	r.Flags = []string{"not_verbose"}
	require.NoError(t, s.Write(ctx, r))
	require.NoError(t, s.Write(ctx, r))
	cs = e.srv.Comments(issue)
	require.Len(t, cs, 1, "a newer split edits the comment")
	require.Equal(t, marker("run-1")+"\n"+present.Markdown(r), cs[0].Body)
	require.Equal(t, 1, cs[0].Edits)
	require.Equal(t, 1, e.srv.Count(http.MethodPost))
	require.Equal(t, 1, e.srv.Count(http.MethodPatch), "an unchanged body is not sent again")

	// A restarted aggregator finds the comment by its marker and leaves an
	// unchanged body alone.
	s2 := e.sink(t)
	before := len(e.srv.Requests())
	require.NoError(t, s2.Write(ctx, r))
	after := e.srv.Requests()[before:]
	require.Len(t, after, 1)
	require.Equal(t, http.MethodGet, after[0].Method)
	require.Len(t, e.srv.Comments(issue), 1)

	// A second run gets its own comment.
	require.NoError(t, s2.Write(ctx, sinktest.Report("run-2")))
	cs = e.srv.Comments(issue)
	require.Len(t, cs, 2)
	require.Len(t, ours(cs, "run-1"), 1)
	require.Len(t, ours(cs, "run-2"), 1)
}

func TestPaginationFindsMarkerPastFirstPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	for i := range 250 {
		e.srv.AddComment(issue, fmt.Sprintf("comment %d from someone else", i))
	}
	// Left by an earlier aggregator: the run's comment with an older split.
	old := sinktest.Report("run-1")
	e.srv.AddComment(issue, marker("run-1")+"\n"+present.Markdown(old))

	r := sinktest.Report("run-1")
	r.Flags = []string{"fit_probe"}
	require.NoError(t, e.sink(t).Write(ctx, r))

	cs := e.srv.Comments(issue)
	require.Len(t, cs, 251, "found on page 3 and edited, not posted again")
	mine := ours(cs, "run-1")
	require.Len(t, mine, 1)
	require.Equal(t, marker("run-1")+"\n"+present.Markdown(r), mine[0].Body)
	require.Equal(t, 0, e.srv.Count(http.MethodPost))
	require.Equal(t, 1, e.srv.Count(http.MethodPatch))

	var pages []string
	for _, rq := range e.srv.Requests() {
		if rq.Method == http.MethodGet {
			pages = append(pages, rq.RawQuery)
		}
	}
	require.Equal(t, []string{"per_page=100", "per_page=100&page=2", "per_page=100&page=3"}, pages, "Link rel=next followed")

	// Unchanged on a fresh sink: three pages read, nothing written.
	before := len(e.srv.Requests())
	require.NoError(t, e.sink(t).Write(ctx, r))
	for _, rq := range e.srv.Requests()[before:] {
		require.Equal(t, http.MethodGet, rq.Method)
	}
	require.Equal(t, 1, e.srv.Count(http.MethodPatch))
}

func TestRateLimitWaitsHonoured(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	start := e.clock.Now()
	var counts sinks.Counters
	f := e.fanout(t, e.sink(t), &counts)

	e.srv.FailNext(1, githubtest.RetryAfter(http.StatusForbidden, 30))
	// Reached after the 30s wait: the reset is 90s later.
	e.srv.FailNext(1, githubtest.RateLimitReset(http.StatusTooManyRequests, start.Add(30*time.Second+90*time.Second)))
	e.srv.FailNext(1, githubtest.Status(http.StatusTooManyRequests)) // no hint: a minute
	e.srv.FailNext(1, githubtest.RetryAfter(http.StatusTooManyRequests, 7))

	require.NoError(t, f.Write(context.Background(), sinktest.Report("run-1")))
	require.NoError(t, f.Flush(context.Background()))

	require.Equal(t, []time.Duration{30 * time.Second, 90 * time.Second, time.Minute, 7 * time.Second}, e.clock.Slept())
	require.Len(t, e.srv.Comments(issue), 1)
	c := counts.Snapshot()["issue_comment"]
	require.Equal(t, uint64(4), c.Retries)
	require.Equal(t, uint64(1), c.Delivered)
	require.Contains(t, c.LastError, "429")
}

func TestServerErrorsRetriedWithBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := e.fanout(t, e.sink(t), nil)
	e.srv.FailNext(2, githubtest.Status(http.StatusInternalServerError))
	e.srv.FailNext(1, githubtest.Status(http.StatusBadGateway))

	require.NoError(t, f.Write(context.Background(), sinktest.Report("run-1")))
	require.NoError(t, f.Flush(context.Background()))
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, e.clock.Slept())
	require.Len(t, e.srv.Comments(issue), 1)
}

// TestRefusedTokenKeepsCommentPending: a 401 (a token revoked, expired,
// or the tracker's auth down for a while) leaves the comment pending: it
// is retried with the sink's backoff and posted once the token works
// again. Before, a 401 dropped the run's comment for good.
func TestRefusedTokenKeepsCommentPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var counts sinks.Counters
	f := e.fanout(t, e.sink(t), &counts)
	e.srv.FailNext(3, githubtest.Status(http.StatusUnauthorized))

	require.NoError(t, f.Write(context.Background(), sinktest.Report("run-1")))
	require.NoError(t, f.Flush(context.Background()))
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, e.clock.Slept(), "the sink's backoff")
	require.Len(t, ours(e.srv.Comments(issue), "run-1"), 1, "posted once the token works again")
	c := counts.Snapshot()["issue_comment"]
	require.Equal(t, uint64(3), c.Retries)
	require.Zero(t, c.Failed)
	require.Equal(t, uint64(1), c.Delivered)
	require.Contains(t, c.LastError, "401")
}

func TestNetworkErrorIsTransient(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.sink(t)
	e.srv.Close()
	err := s.Write(context.Background(), sinktest.Report("run-1"))
	require.Error(t, err)
	require.False(t, sinks.IsPermanent(err))
	_, hinted := sinks.RetryAfterDelay(err)
	require.False(t, hinted, "network errors use the runner's backoff")
	require.Contains(t, err.Error(), issue)
}

func TestPermanentErrors(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusNotFound, http.StatusUnprocessableEntity} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			var counts sinks.Counters
			f := e.fanout(t, e.sink(t), &counts)
			e.srv.FailNext(1, githubtest.Status(code))
			require.NoError(t, f.Write(context.Background(), sinktest.Report("run-1")))
			require.NoError(t, f.Flush(context.Background()))

			require.Empty(t, e.clock.Slept(), "never retried")
			require.Len(t, e.srv.Requests(), 1)
			require.Empty(t, e.srv.Comments(issue))
			c := counts.Snapshot()["issue_comment"]
			require.Equal(t, uint64(1), c.Failed)
			require.Contains(t, c.LastError, issue, "the error names the issue")
			require.Contains(t, c.LastError, fmt.Sprint(code))
		})
	}

	t.Run("MissingIssue", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		r := sinktest.Report("run-1")
		r.Run.Issue = "acme/fleet#999"
		err := e.sink(t).Write(context.Background(), r)
		require.True(t, sinks.IsPermanent(err), "%v", err)
		require.ErrorContains(t, err, "acme/fleet#999")
	})
	t.Run("WrongToken", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.cfg.Token = "ghp_wrong"
		err := e.sink(t).Write(context.Background(), sinktest.Report("run-1"))
		require.False(t, sinks.IsPermanent(err), "a refused token is transient: %v", err)
		require.ErrorContains(t, err, "401")
		require.NotContains(t, err.Error(), "ghp_wrong")
	})
	t.Run("MalformedIssue", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		for _, bad := range []string{"../../etc#1", "acme/fleet", "acme/fleet#0", "acme/..#1", "a/b#1/../x", "acme/fleet#7?x=1"} {
			r := sinktest.Report("run-1")
			r.Run.Issue = bad
			err := e.sink(t).Write(context.Background(), r)
			require.True(t, sinks.IsPermanent(err), "%q: %v", bad, err)
			require.ErrorContains(t, err, fmt.Sprintf("%q", bad))
		}
		require.Empty(t, e.srv.Requests(), "a malformed issue is never requested")
	})
}

func TestDeletedCommentIsPostedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	s := e.sink(t)
	r := sinktest.Report("run-1")
	require.NoError(t, s.Write(ctx, r))
	e.srv.DeleteComment(e.srv.Comments(issue)[0].ID)

	r.Flags = []string{"no_trace"}
	require.NoError(t, s.Write(ctx, r))
	cs := e.srv.Comments(issue)
	require.Len(t, cs, 1)
	require.Equal(t, marker("run-1")+"\n"+present.Markdown(r), cs[0].Body)
}

func TestConcurrentWritesOneCommentEach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The listing delay keeps every writer inside the lookup at the same
	// time, so without per-issue serialisation each would post.
	e := newEnv(t, githubtest.WithListDelay(20*time.Millisecond))
	s := e.sink(t)

	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			r := sinktest.Report("run-same")
			r.Checks = append(r.Checks, split.Check{Name: "writer", Status: split.StatusOK, Detail: fmt.Sprint(i)})
			require.NoError(t, s.Write(ctx, r))
		})
	}
	wg.Wait()
	require.Len(t, e.srv.Comments(issue), 1, "two reports for the same run")

	for i := range 8 {
		wg.Go(func() {
			require.NoError(t, s.Write(ctx, sinktest.Report(fmt.Sprintf("run-%d", i%2))))
		})
	}
	wg.Wait()
	cs := e.srv.Comments(issue)
	require.Len(t, cs, 3)
	require.Len(t, ours(cs, "run-0"), 1)
	require.Len(t, ours(cs, "run-1"), 1)
}

func TestTokenOnlyInAuthorization(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	s := e.sink(t)
	f := e.fanout(t, s, nil)

	// Successes, retried failures, a permanent failure, and a server that
	// echoes the token in its error message.
	e.srv.FailNext(1, githubtest.Status(http.StatusInternalServerError))
	e.srv.FailNext(1, githubtest.RetryAfter(http.StatusTooManyRequests, 1))
	require.NoError(t, f.Write(ctx, sinktest.Report("run-1")))
	require.NoError(t, f.Flush(ctx))
	r := sinktest.Report("run-1")
	r.Flags = []string{"fit_probe"}
	require.NoError(t, f.Write(ctx, r))
	require.NoError(t, f.Flush(ctx))
	e.srv.FailNext(1, githubtest.Failure{Status: http.StatusUnprocessableEntity, Body: `{"message":"token ` + token + ` rejected"}`})
	err := s.Write(ctx, sinktest.Report("run-2"))
	require.Error(t, err)
	require.NotContains(t, err.Error(), token)
	require.Contains(t, err.Error(), "[redacted]")
	require.NoError(t, f.Close(ctx))

	reqs := e.srv.Requests()
	require.NotEmpty(t, reqs)
	for _, rq := range reqs {
		require.Equal(t, "Bearer "+token, rq.Header.Get("Authorization"))
		require.Equal(t, "application/vnd.github+json", rq.Header.Get("Accept"))
		require.NotEmpty(t, rq.Header.Get("User-Agent"))
		for k, vs := range rq.Header {
			if k == "Authorization" {
				continue
			}
			for _, v := range vs {
				require.NotContains(t, v, token, "header %s", k)
			}
		}
		require.NotContains(t, rq.Path+rq.RawQuery+rq.Body, token)
	}
	for _, c := range e.srv.Comments(issue) {
		require.NotContains(t, c.Body, token)
	}
	logs := e.logs.String()
	require.NotEmpty(t, logs, "debug logging was on")
	require.NotContains(t, logs, token)
	require.NotContains(t, e.out.String(), token)

	// The config itself never prints the token.
	for _, s := range []string{fmt.Sprint(e.cfg), fmt.Sprintf("%+v", *e.cfg), fmt.Sprintf("%#v", *e.cfg)} {
		require.NotContains(t, s, token)
	}
	j, err := json.Marshal(e.cfg)
	require.NoError(t, err)
	require.NotContains(t, string(j), token)
	var buf bytes.Buffer
	zl := zerolog.New(&buf)
	zl.Info().Interface("cfg", e.cfg).Msg("config")
	require.NotContains(t, buf.String(), token)
}

func TestBodyTruncated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := sinktest.Report("run-big")
	for i := range 3000 {
		r.Checks = append(r.Checks, split.Check{Name: fmt.Sprintf("check_%04d", i), Status: split.StatusWarn,
			Detail: strings.Repeat("é", 40) + " many words of detail"})
	}
	md := present.Markdown(r)
	require.Greater(t, utf8.RuneCountInString(md), 65536, "precondition: the report needs truncating")

	require.NoError(t, e.sink(t).Write(context.Background(), r))
	cs := e.srv.Comments(issue)
	require.Len(t, cs, 1, "the server (which refuses more than 65,536 characters) accepted it")
	body := cs[0].Body
	require.Less(t, utf8.RuneCountInString(body), 65536)
	require.Greater(t, utf8.RuneCountInString(body), 60000, "truncation keeps most of the report")
	require.True(t, strings.HasPrefix(body, marker("run-big")+"\n"), "marker kept")
	require.Contains(t, body, "truncated")
	require.True(t, utf8.ValidString(body))
	shown := strings.TrimPrefix(body, marker("run-big")+"\n")
	shown = shown[:strings.LastIndex(shown, "\n\n---\n")]
	shown = strings.TrimSuffix(shown, "```") // a closed code fence
	require.True(t, strings.HasPrefix(md, shown) || strings.HasPrefix(md, strings.TrimSuffix(shown, "\n")),
		"the body is the report's beginning")

	// Re-sending the big report changes nothing.
	require.NoError(t, e.sink(t).Write(context.Background(), r))
	require.Len(t, e.srv.Comments(issue), 1)
	require.Equal(t, 0, e.srv.Count(http.MethodPatch))
}

func TestDryRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.cfg.DryRun = true
	e.cfg.Token = ""
	s := e.sink(t)
	r := sinktest.Report("run-1")
	require.NoError(t, s.Write(context.Background(), r))
	require.NoError(t, s.Write(context.Background(), r))
	out := e.out.String()
	require.Contains(t, out, issue)
	require.Contains(t, out, marker("run-1")+"\n"+present.Markdown(r))
	require.Equal(t, 1, strings.Count(out, "dry run:"), "an unchanged body is printed once")
	require.Empty(t, e.srv.Requests(), "a dry run calls no API")
}

func TestRunsWithoutIssueSkipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.cfg.DefaultIssue = ""
	s := e.sink(t)
	require.NoError(t, s.Write(context.Background(), sinktest.Report("run-1")))
	require.Empty(t, e.srv.Requests())

	r := sinktest.Report("run-2")
	r.Run.Issue = issue
	require.NoError(t, s.Write(context.Background(), r), "the run's own issue")
	require.Len(t, e.srv.Comments(issue), 1)
}

func TestGiteaBasePath(t *testing.T) {
	t.Parallel()
	e := newEnv(t, githubtest.WithBasePath("/api/v1"))
	require.True(t, strings.HasSuffix(e.cfg.API, "/api/v1"))
	s := e.sink(t)
	r := sinktest.Report("run-1")
	require.NoError(t, s.Write(context.Background(), r))
	r.Flags = []string{"no_gpu_client"}
	require.NoError(t, s.Write(context.Background(), r))
	require.Len(t, e.srv.Comments(issue), 1)
	for _, rq := range e.srv.Requests() {
		require.True(t, strings.HasPrefix(rq.Path, "/api/v1/repos/acme/fleet/issues/"), rq.Path)
	}
	require.Equal(t, 1, e.srv.Count(http.MethodPatch))
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cfg := commentsink.DefaultConfig()
	require.False(t, cfg.Enabled(), "off by default")
	require.NoError(t, cfg.Validate())
	_, err := commentsink.New(cfg, sinks.Settings{})
	require.ErrorContains(t, err, "api: must not be empty")

	cfg.API = "https://api.github.com"
	err = cfg.Validate()
	require.ErrorContains(t, err, "token: must be set")
	cfg.DryRun = true
	require.NoError(t, cfg.Validate(), "a dry run needs no token")

	bad := commentsink.Config{API: "ftp://x", DefaultIssue: "nope", Timeout: 0}
	err = bad.Validate()
	for _, want := range []string{"api:", "default_issue:", "token:", "timeout:"} {
		require.ErrorContains(t, err, want, "every problem reported at once")
	}
	_, err = commentsink.New(bad, sinks.Settings{})
	require.Error(t, err)
}

// A run that names the run it is the control of gets the comparison of the
// two in its comment once both splits are known, whichever comes first.
func TestControlComparisonPosted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mib := func(v float64) *split.MiB { m := split.MiB(v); return &m }
	on := sinktest.Report("run-on")
	ctl := sinktest.Report("run-off")
	ctl.Run.ControlOf = "run-on"
	ctl.PeakGTTMiB, ctl.ModelGTTMiB, ctl.PackedMiB = mib(20480-15000.25-14000), mib(0), nil

	for _, order := range [][]split.Report{{on, ctl}, {ctl, on}} {
		e := newEnv(t)
		s := e.sink(t)
		for _, r := range order {
			require.NoError(t, s.Write(ctx, r))
		}
		cs := e.srv.Comments(issue)
		require.Len(t, cs, 2)
		off := ours(cs, "run-off")
		require.Len(t, off, 1)
		require.Contains(t, off[0].Body, "- control: this run is the control (the same command with offload off) of run run-on")
		require.Contains(t, off[0].Body, "### gttsplit: control comparison")
		require.Contains(t, off[0].Body, "**Verdict**: weights resident twice: the difference of the peaks is 29000.2 MiB ≈ model buffer + packed copy (15000.2 + 14000.0 = 29000.2 MiB)")
		require.NotContains(t, ours(cs, "run-on")[0].Body, "control comparison")
	}

	// Without the other split in memory, the sink asks Settings.Lookup.
	e := newEnv(t)
	e.set.Lookup = func(_ context.Context, id string) (split.Report, bool, error) {
		return on, id == "run-on", nil
	}
	require.NoError(t, e.sink(t).Write(ctx, ctl))
	require.Contains(t, ours(e.srv.Comments(issue), "run-off")[0].Body, "**Verdict**: weights resident twice")
}

// A sticky comment is one per key and issue: created once, edited in
// place when its body changes (by the id it was given back, without
// listing the issue), left alone when it does not, found again by its
// marker when the id is not known (a restart) or the comment was deleted;
// a run's comment and other keys' comments are not it.
func TestStickyComment(t *testing.T) {
	e := newEnv(t)
	s, err := commentsink.New(*e.cfg, e.set)
	require.NoError(t, err)
	defer s.Close(context.Background())
	ctx := context.Background()
	e.srv.AddComment(issue, "<!-- gttsplit run=strix01/gpu0/m.gguf -->\na run's comment")
	e.srv.AddComment(issue, "<!-- gttsplit lane=strix01/gpu0/m.gguf.2 -->\nanother lane")

	id, err := s.Sticky(ctx, issue, "strix01/gpu0/m.gguf", "first", 0, nil)
	require.NoError(t, err)
	cs := e.srv.Comments(issue)
	require.Len(t, cs, 3)
	require.Equal(t, id, cs[2].ID)
	require.Equal(t, "<!-- gttsplit lane=strix01/gpu0/m.gguf -->\nfirst", cs[2].Body)

	gets := e.srv.Count(http.MethodGet)
	got, err := s.Sticky(ctx, issue, "strix01/gpu0/m.gguf", "second", id, nil)
	require.NoError(t, err)
	require.Equal(t, id, got)
	require.Equal(t, gets, e.srv.Count(http.MethodGet), "the known id is edited at once")
	cs = e.srv.Comments(issue)
	require.Len(t, cs, 3)
	require.Equal(t, 1, cs[2].Edits)
	require.Equal(t, "<!-- gttsplit lane=strix01/gpu0/m.gguf -->\nsecond", cs[2].Body)

	// Asked again with the body it just wrote there (the caller's record
	// of the edit was not written, and it retries): nothing is written.
	patches := e.srv.Count(http.MethodPatch)
	got, err = s.Sticky(ctx, issue, "strix01/gpu0/m.gguf", "second", id, nil)
	require.NoError(t, err)
	require.Equal(t, id, got)
	require.Equal(t, patches, e.srv.Count(http.MethodPatch), "the same body is not written again")
	require.Equal(t, 1, e.srv.Comments(issue)[2].Edits)

	// Not known (another aggregator, a restart): found by its marker; the
	// same body is not written again.
	got, err = s.Sticky(ctx, issue, "strix01/gpu0/m.gguf", "second", 0, nil)
	require.NoError(t, err)
	require.Equal(t, id, got)
	require.Equal(t, patches, e.srv.Count(http.MethodPatch))

	// Deleted by someone: the known id is gone, a new one is made.
	e.srv.DeleteComment(id)
	got, err = s.Sticky(ctx, issue, "strix01/gpu0/m.gguf", "third", id, nil)
	require.NoError(t, err)
	require.NotEqual(t, id, got)
	require.Len(t, e.srv.Comments(issue), 3)

	// keep refuses: nothing is written.
	posts, patches := e.srv.Count(http.MethodPost), e.srv.Count(http.MethodPatch)
	_, err = s.Sticky(ctx, issue, "strix01/gpu0/m.gguf", "fourth", got, func() bool { return false })
	require.ErrorIs(t, err, commentsink.ErrNotKept)
	_, err = s.Sticky(ctx, issue, "strix01/gpu1/m.gguf", "new lane", 0, func() bool { return false })
	require.ErrorIs(t, err, commentsink.ErrNotKept)
	require.Equal(t, posts, e.srv.Count(http.MethodPost))
	require.Equal(t, patches, e.srv.Count(http.MethodPatch))
	require.Len(t, e.srv.Comments(issue), 3)
}

// Sticky's errors are classified as a run's comment's: a rate limit with
// the server's delay, a 5xx transient, a missing issue or a bad reference
// permanent; the dry run prints and needs no server.
func TestStickyErrors(t *testing.T) {
	e := newEnv(t)
	s, err := commentsink.New(*e.cfg, e.set)
	require.NoError(t, err)
	defer s.Close(context.Background())
	ctx := context.Background()

	e.srv.FailNext(1, githubtest.RetryAfter(http.StatusTooManyRequests, 7))
	_, err = s.Sticky(ctx, issue, "k", "b", 0, nil)
	d, ok := sinks.RetryAfterDelay(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, 7*time.Second, d)

	e.srv.FailNext(1, githubtest.Status(http.StatusBadGateway))
	_, err = s.Sticky(ctx, issue, "k", "b", 0, nil)
	require.Error(t, err)
	require.False(t, sinks.IsPermanent(err))

	_, err = s.Sticky(ctx, "acme/none#1", "k", "b", 0, nil)
	require.True(t, sinks.IsPermanent(err), "%v", err)
	_, err = s.Sticky(ctx, "not an issue", "k", "b", 0, nil)
	require.True(t, sinks.IsPermanent(err), "%v", err)
	require.Empty(t, e.srv.Comments(issue))

	e.cfg.DryRun = true
	dry, err := commentsink.New(*e.cfg, e.set)
	require.NoError(t, err)
	defer dry.Close(context.Background())
	id, err := dry.Sticky(ctx, issue, "h/l/m", "the body", 0, nil)
	require.NoError(t, err)
	require.Zero(t, id)
	require.Contains(t, e.out.String(), "dry run: would keep the comment of h/l/m on acme/fleet#7 (")
	require.Contains(t, e.out.String(), "<!-- gttsplit lane=h/l/m -->\nthe body\n-- end of comment --")
	require.Empty(t, e.srv.Comments(issue))
}
