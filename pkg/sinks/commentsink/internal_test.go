package commentsink

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gttsplit/gttsplit/pkg/sinks"
	"github.com/stretchr/testify/require"
)

func TestComposeBoundaries(t *testing.T) {
	t.Parallel()
	const limit = 200
	mark := marker("r")
	head := utf8.RuneCountInString(mark) + 1

	fits := strings.Repeat("é", limit-head)
	require.Equal(t, mark+"\n"+fits, compose(mark, fits, limit), "exactly at the limit: untouched")

	over := strings.Repeat("é", limit-head+1)
	got := compose(mark, over, limit)
	require.LessOrEqual(t, utf8.RuneCountInString(got), limit)
	require.True(t, utf8.ValidString(got))
	require.True(t, strings.HasPrefix(got, mark+"\n"))
	require.Contains(t, got, "truncated")

	// Cut at a line end, and an open code fence is closed.
	md := "# title\n```\n" + strings.Repeat("line of code\n", 100) + "```\ntail\n"
	got = compose(mark, md, 400)
	require.LessOrEqual(t, utf8.RuneCountInString(got), 400)
	body := strings.TrimPrefix(got, mark+"\n")
	shown := body[:strings.Index(body, "```\n\n---\n")]
	require.True(t, strings.HasSuffix(shown, "line of code\n"), "cut at a line end: %q", shown[max(0, len(shown)-30):])
	require.False(t, openFence(body[:strings.Index(body, "\n\n---\n")]), "fence closed before the note")

	for _, n := range []int{maxBody - 100, maxBody, maxBody + 1, 3 * maxBody} {
		md := strings.Repeat("ab\n", n/3) + strings.Repeat("x", n%3)
		got := compose(marker("run"), md, maxBody)
		require.LessOrEqual(t, utf8.RuneCountInString(got), maxBody, "n=%d", n)
	}
}

func FuzzMarker(f *testing.F) {
	for _, s := range []string{"run-1", "", "-->", "a b", "%41", "A", "--!>", "\x00", "é"} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ma, mb := marker(a), marker(b)
		inner := strings.TrimSuffix(strings.TrimPrefix(ma, "<!-- gttsplit run="), " -->")
		require.NotContains(t, inner, ">", "the id cannot end the HTML comment")
		require.NotContains(t, inner, " ")
		require.NotContains(t, inner, "\n")
		if a != b {
			require.NotEqual(t, ma, mb)
			require.False(t, strings.HasPrefix(ma+"\n", mb+"\n"), "one run's marker line never starts another's")
		}
	})
}

func TestParseIssue(t *testing.T) {
	t.Parallel()
	good := map[string]string{
		"acme/fleet#7":            "/repos/acme/fleet/issues/7/comments",
		"Org-1/repo.name_x#12345": "/repos/Org-1/repo.name_x/issues/12345/comments",
	}
	for in, want := range good {
		iss, err := parseIssue(in)
		require.NoError(t, err, in)
		require.Equal(t, want, iss.commentsPath())
		require.Equal(t, in, iss.String())
	}
	for _, in := range []string{"", "acme/fleet", "acme#1", "acme/fleet#0", "acme/fleet#-1", "acme/fleet#1x",
		"acme/../x#1", "acme/..#1", "acme/.#1", ".x/y#1", "a/b/c#1", "a b/c#1", "acme/fleet#99999999999", "acme/fleet#7\n",
		"a/b#", "a/b#x", "a#1", "a/b#99999999999999999999", strings.Repeat("o", 101) + "/r#1"} {
		_, err := parseIssue(in)
		require.Error(t, err, "%q", in)
	}
	owner, repo, n, err := ParseIssue("ggml-org/llama.cpp#42")
	require.NoError(t, err)
	require.Equal(t, []any{"ggml-org", "llama.cpp", 42}, []any{owner, repo, n})
	_, _, _, err = ParseIssue("owner/repo")
	require.EqualError(t, err, `"owner/repo" is not OWNER/REPO#N`)
	_, _, _, err = ParseIssue("owner/repo#0")
	require.EqualError(t, err, `"owner/repo#0": issue number must be a positive integer`)
	_, err = parseIssue("acme/..#1")
	require.EqualError(t, err, `issue "acme/..#1" is not OWNER/REPO#N`)
}

func TestNextPage(t *testing.T) {
	t.Parallel()
	api, _ := url.Parse("https://api.github.com")
	s := &Sink{api: api}
	iss := issue{owner: "o", repo: "r", number: 1}
	h := http.Header{}
	h.Add("Link", `<https://api.github.com/repositories/1/issues/1/comments?page=2>; rel="next", <https://api.github.com/repositories/1/issues/1/comments?page=5>; rel="last"`)
	next, err := s.nextPage(iss, h)
	require.NoError(t, err)
	require.Equal(t, "https://api.github.com/repositories/1/issues/1/comments?page=2", next)

	h = http.Header{"Link": {`<https://api.github.com/x?page=1>; rel="prev", <https://api.github.com/x?page=1>; rel="first"`}}
	next, err = s.nextPage(iss, h)
	require.NoError(t, err)
	require.Empty(t, next, "last page")

	h = http.Header{"Link": {`<https://evil.example/steal>; rel="next"`}}
	_, err = s.nextPage(iss, h)
	require.True(t, sinks.IsPermanent(err), "a link to another host is refused: %v", err)

	h = http.Header{"Link": {`<http://api.github.com/x?page=2>; rel="next"`}}
	_, err = s.nextPage(iss, h)
	require.Error(t, err, "a downgrade to http is refused")
}

func TestRateLimitDelay(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	s := &Sink{set: sinks.Settings{Now: func() time.Time { return now }}}
	for _, tc := range []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{"Retry-After": {"42"}}, 42 * time.Second},
		{http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second},
		{http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1748779500"}}, 5 * time.Minute},
		{http.Header{"X-Ratelimit-Remaining": {"10"}, "X-Ratelimit-Reset": {"1748779500"}}, time.Minute},
		{http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {"1"}}, time.Second},
		{http.Header{"Retry-After": {"soon"}}, time.Minute},
		{http.Header{}, time.Minute},
	} {
		require.Equal(t, tc.want, s.rateLimitDelay(tc.h), "%v", tc.h)
	}
}

func TestValidateMasksAPICredentials(t *testing.T) {
	c := Config{API: "https://bob:pw-s3cret-7@api.example"}
	err := c.Validate()
	require.Error(t, err)
	require.NotContains(t, err.Error(), "pw-s3cret-7")
	require.Contains(t, err.Error(), "credentials do not belong in it")
}
